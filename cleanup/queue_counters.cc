// cleanup/queue_counters.cc — reading the queue's counters (snapshot(), producer_use()) and the fork
// reset that carries them into a child (see reclaim_queue.h for the contract of each function).

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cleanup/queue_storage.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim {

// Re-reads snapshot() allows itself while something is in flight, and how many of them come without a
// sched_yield() first.
constexpr int kSnapshotAttempts = 64;
constexpr int kSnapshotSpins = 8;

std::uint64_t ReclaimQueue::overflow_leaked_in(std::uint64_t admissions) const noexcept {
  std::uint64_t leaked = overflow_leaked_before_reopen_.load(std::memory_order_relaxed);
  if ((admissions & kClosedBit) != 0) {
    // Every slot-less admission after the close is a leak. The caller's load that saw the closed bit
    // synchronizes with the close's CAS, so admitted_at_close_ is the value stored before it.
    leaked += (admissions & ~kClosedBit) - admitted_at_close_.load(std::memory_order_relaxed);
  }
  return leaked;
}

ProducerUse ReclaimQueue::producer_use() const noexcept {
  ProducerUse use;
  use.slot_count = slot_mask_ + 1;
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    if (slots_[i].token_owner.load(std::memory_order_relaxed) != nullptr) ++use.slots_used;
  }
  use.overflow_pushes = overflow_pushes_.load(std::memory_order_relaxed);
  return use;
}

ReclaimQueue::SlotTotals ReclaimQueue::slot_totals() const noexcept {
  SlotTotals totals;
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    const ProducerSlot& slot = slots_[i];
    // Acquire: a slot given back publishes its counters (and its item) with the release of `held`.
    if (slot.held.load(std::memory_order_acquire) != 0) totals.any_held = true;
    totals.admitted += slot.admitted.load(std::memory_order_relaxed);
    totals.leaked += slot.leaked.load(std::memory_order_relaxed);
  }
  return totals;
}

CounterSnapshot ReclaimQueue::snapshot() const noexcept {
  // Every late push (after close) bumps exactly one counter, its slot's `leaked` (or the slot-less
  // admission word), and each is read once here and used for both handed_over and leaked_after_close:
  // late pushes never unbalance a closed queue's snapshot, however many are arriving (the exit report is
  // taken while CUDA's thread may still be pushing). What can is something in flight between two of its
  // steps: a push admitted while open, between its count and its enqueue (on an open queue, or one whose
  // close() still waits for it); a drain between its dequeue and its count of what it took; a trim moving
  // pointers between storages. Each only ever leaves items in no bucket, never in two (a put-back after
  // an unwind uncounts before it enqueues), so a read that conserves is exact. Re-read until no push was
  // in flight across the reads (open queue) and the law holds, yielding after a few attempts (a pusher or
  // drainer may have been preempted in the middle). Bounded, so it never blocks: if one of them stalls
  // through every attempt, the last attempt stands.
  const StorageReader reader(*this);
  CounterSnapshot counters;
  for (int attempt = 0; attempt < kSnapshotAttempts; ++attempt) {
    if (attempt >= kSnapshotSpins) sched_yield();
    const SlotTotals before = slot_totals();
    const std::uint64_t admissions = push_admissions_.load(std::memory_order_seq_cst);
    const std::uint64_t overflow_admitted = admissions & ~kClosedBit;
    // Acquire: the bucket updates of every completed slot-less push are visible to the reads below.
    const std::uint64_t overflow_completed = push_completions_.load(std::memory_order_acquire);
    counters.rejected = rejected_.load(std::memory_order_relaxed);
    counters.handed_over = before.admitted + before.leaked + overflow_admitted - counters.rejected;
    // released_ and returned_ first (acquire), taken_ last: every item they count was counted as taken
    // before, so the difference never goes below zero, and a settle (one add to released_) moves an item
    // from in_drain to released in the same read.
    counters.released = released_.load(std::memory_order_acquire);
    const std::uint64_t returned = returned_.load(std::memory_order_acquire);
    const std::uint64_t taken = taken_.load(std::memory_order_relaxed);
    counters.in_drain = taken > counters.released + returned ? taken - counters.released - returned : 0;
    counters.pending = stored_count();
    note_pending(counters.pending);
    counters.leaked_after_close = before.leaked + overflow_leaked_in(admissions);
    counters.abandoned_after_fork = abandoned_after_fork_.load(std::memory_order_relaxed);
    // Orders the reads above before the re-check: a push that started after it is in none of them.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const SlotTotals after = slot_totals();
    const std::uint64_t overflow_after = push_admissions_.load(std::memory_order_seq_cst) & ~kClosedBit;
    const bool closed = (admissions & kClosedBit) != 0;
    // Closed: pushes admitted while open have all completed once close() returned, and the late ones
    // are counted by the reads above alone, so the read is exact as it is.
    const bool quiet = !before.any_held && !after.any_held && overflow_completed == overflow_admitted &&
                       after.admitted == before.admitted && after.leaked == before.leaked &&
                       overflow_after == overflow_admitted;
    if ((closed || quiet) && counters.conserved()) break;
  }
  counters.nonempty_drains = nonempty_drains_.load(std::memory_order_relaxed);
  counters.max_pending = max_pending_.load(std::memory_order_relaxed);
  counters.eventfd_writes = eventfd_writes_.load(std::memory_order_relaxed);
  counters.trims = trims_.load(std::memory_order_relaxed);
  return counters;
}

void ReclaimQueue::reset_after_fork_in_child() noexcept {
  // Only the forking thread exists now. Pushes that other parent threads had admitted may have stopped
  // anywhere inside the old storage, so it is left as it is (never freed, never read), and everything
  // accepted and not yet released or leaked becomes abandoned: derived from the counters rather than the
  // old queue, so a push cut off between its count and its enqueue is accounted for too.
  const std::uint64_t admissions = push_admissions_.load(std::memory_order_relaxed);
  const SlotTotals slots = slot_totals();
  const std::uint64_t accepted =
      slots.admitted + slots.leaked + (admissions & ~kClosedBit) - rejected_.load(std::memory_order_relaxed);
  const std::uint64_t overflow_leaked = overflow_leaked_in(admissions);
  const std::uint64_t gone = released_.load(std::memory_order_relaxed) + slots.leaked + overflow_leaked;
  // What drains had taken and not settled (in_drain) is in neither `gone` term: abandoned too. A drain of
  // the forking thread that goes on in the child settles it out of abandoned_after_fork (settle_taken).
  abandoned_after_fork_.store(accepted - gone, std::memory_order_relaxed);
  taken_.store(released_.load(std::memory_order_relaxed) + returned_.load(std::memory_order_relaxed),
               std::memory_order_relaxed);  // in_drain 0
  overflow_leaked_before_reopen_.store(overflow_leaked, std::memory_order_relaxed);  // ends the derivation
  push_admissions_.store(admissions & ~kClosedBit, std::memory_order_relaxed);  // open again
  push_completions_.store(admissions & ~kClosedBit, std::memory_order_relaxed);  // cut-off pushes are done
  closing_.clear(std::memory_order_relaxed);  // a parent thread may have been closing at the fork
  readers_.store(0, std::memory_order_relaxed);  // readers and trims of parent threads are gone
  // So is this thread's own reader, should a finalizer run by its drain have forked: see StorageReader.
  fork_generation_.fetch_add(1, std::memory_order_relaxed);
  // Slots a parent thread held at the fork are free in the child; every producer belongs to the
  // abandoned storage, so the tokens are dropped without touching it.
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    slots_[i].forget_token();
    slots_[i].held.store(0, std::memory_order_relaxed);
  }
  retired_.store(nullptr, std::memory_order_relaxed);
  storage_.store(make_storage(options_.reserved_capacity), std::memory_order_relaxed);
  front_.store(make_front(), std::memory_order_relaxed);  // the parent's give-backs are abandoned too
  pending_since_trim_.store(0, std::memory_order_relaxed);

  // Same descriptor numbers (an event loop in the child may have registered the wake-up fd), new eventfds
  // behind them: the child's queue is open and empty whatever the parent's state.
  replace_eventfd(wakeup_fd_);
  replace_eventfd(closed_fd_);
  signaled_.store(false, std::memory_order_relaxed);
}

}  // namespace reclaim
