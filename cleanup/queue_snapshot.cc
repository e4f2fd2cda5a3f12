// cleanup/queue_snapshot.cc — ReclaimQueue::snapshot() and producer_use(): reading every counter of the
// queue's parts as one consistent set (see reclaim_queue.h for the contract).

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "cleanup/reclaim_queue.h"

namespace reclaim {

// Re-reads snapshot() allows itself while something is in flight, and how many of them come without a
// sched_yield() first.
constexpr int kSnapshotAttempts = 64;
constexpr int kSnapshotSpins = 8;

ProducerUse ReclaimQueue::producer_use() const noexcept { return admission_.producer_use(); }

CounterSnapshot ReclaimQueue::snapshot() const noexcept {
  // Every late push (after close) bumps exactly one counter, its lane's `leaked` (or the lane-less
  // admission word), and each is read once here and used for both handed_over and leaked_after_close:
  // late pushes never unbalance a closed queue's snapshot, however many are arriving (the exit report is
  // taken while CUDA's thread may still be pushing). What can is something in flight between two of its
  // steps: a push admitted while open, between its count and its enqueue (on an open queue, or one whose
  // close() still waits for it); a drain between its dequeue and its count of what it took; a trim moving
  // pointers between storages. Each only ever leaves items in no bucket, never in two (a requeue after
  // an unwind uncounts before it enqueues), so a read that conserves is exact. Re-read until no push was
  // in flight across the reads (open queue) and the law holds, yielding after a few attempts (a pusher or
  // drainer may have been preempted in the middle). Bounded, so it never blocks: if one of them stalls
  // through every attempt, the last attempt stands.
  const StorageReader reader(storages_);
  CounterSnapshot counters;
  for (int attempt = 0; attempt < kSnapshotAttempts; ++attempt) {
    if (attempt >= kSnapshotSpins) sched_yield();
    const ProducerAdmission::LaneTotals before = admission_.lane_totals();
    const std::uint64_t admissions = admission_.admissions();
    const std::uint64_t overflow_admitted = ProducerAdmission::laneless_admitted(admissions);
    // Acquire: the bucket updates of every completed lane-less push are visible to the reads below.
    const std::uint64_t overflow_completed = admission_.laneless_completions();
    counters.rejected = counters_.rejected();
    counters.handed_over = before.admitted + before.leaked + overflow_admitted - counters.rejected;
    const QueueCounters::DrainBuckets buckets = counters_.drain_buckets();
    counters.released = buckets.released;
    counters.in_drain = buckets.in_drain;
    counters.pending = storages_.stored_count();
    counters_.note_pending(counters.pending);
    counters.leaked_after_close = before.leaked + admission_.laneless_leaked(admissions);
    counters.abandoned_after_fork = counters_.abandoned_after_fork();
    // Orders the reads above before the re-check: a push that started after it is in none of them.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const ProducerAdmission::LaneTotals after = admission_.lane_totals();
    const std::uint64_t overflow_after = ProducerAdmission::laneless_admitted(admission_.admissions());
    const bool closed = (admissions & ProducerAdmission::kClosedBit) != 0;
    // Closed: pushes admitted while open have all completed once close() returned, and the late ones
    // are counted by the reads above alone, so the read is exact as it is.
    const bool quiet = !before.any_taken && !after.any_taken && overflow_completed == overflow_admitted &&
                       after.admitted == before.admitted && after.leaked == before.leaked &&
                       overflow_after == overflow_admitted;
    if ((closed || quiet) && counters.conserved()) break;
  }
  counters.nonempty_drains = counters_.nonempty_drains();
  counters.max_pending = counters_.max_pending();
  counters.eventfd_writes = signal_.writes();
  counters.trims = counters_.trims();
  return counters;
}

}  // namespace reclaim
