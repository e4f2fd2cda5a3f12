// cleanup/queue_fork.cc — ReclaimQueue::reset_after_fork_in_child(): the child's fresh, open queue, with
// the parent's counters carried over (see reclaim_queue.h for the contract).

#include <cstdint>

#include "cleanup/reclaim_queue.h"

namespace reclaim {

void ReclaimQueue::reset_after_fork_in_child() noexcept {
  // Only the forking thread exists now. Pushes that other parent threads had admitted may have stopped
  // anywhere inside the old storage, so it is left as it is (never freed, never read), and everything
  // accepted and not yet released or leaked becomes abandoned: derived from the counters rather than the
  // old queue, so a push cut off between its count and its enqueue is accounted for too.
  const std::uint64_t admissions = admission_.admissions();
  const ProducerAdmission::LaneTotals lanes = admission_.lane_totals();
  const std::uint64_t accepted =
      lanes.admitted + lanes.leaked + ProducerAdmission::laneless_admitted(admissions) - counters_.rejected();
  const std::uint64_t laneless_leaked = admission_.laneless_leaked(admissions);
  const std::uint64_t gone = counters_.released_relaxed() + lanes.leaked + laneless_leaked;
  // What drains had taken and not settled (in_drain) is in neither `gone` term: abandoned too.
  counters_.reset_after_fork(accepted - gone);
  admission_.reset_after_fork(laneless_leaked);
  storages_.reset_after_fork(options_.reserved_capacity);
  // Same descriptor numbers (an event loop in the child may have registered the wake-up fd), new eventfds
  // behind them: the child's queue is open and empty whatever the parent's state.
  signal_.reset_after_fork();
}

}  // namespace reclaim
