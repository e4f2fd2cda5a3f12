// cleanup/reclaim_queue.cc — the queue composed from its parts: push, the wake-up handshake, drain and
// close. trim() is in queue_trim.cc, snapshot() in queue_snapshot.cc, the fork reset in queue_fork.cc;
// see reclaim_queue.h for the contract of every function.

#include "cleanup/reclaim_queue.h"

#include <cstddef>
#include <cstdint>
#include <optional>

#include "cleanup/producer_lane.h"
#include "cleanup/queue_storage.h"

namespace reclaim {

namespace {

// Up to `want` pointers of `queue` into `batch` (moodycamel's try_dequeue_bulk). Flattened: moodycamel
// takes the output iterator by reference, and only once its copy loop is inlined here does the iterator
// live in a register rather than in memory that every copied pointer goes through.
__attribute__((flatten)) std::size_t take_bulk(PointerQueue& queue, void** batch, std::size_t want) noexcept {
  return queue.try_dequeue_bulk(batch, want);
}

}  // namespace

ReclaimQueue::ReclaimQueue(const QueueOptions& options) noexcept
    : options_(options), admission_(options.producer_lanes), storages_(options.reserved_capacity) {}

ReclaimQueue::~ReclaimQueue() {
  // Tokens go before the queue that owns their producers (the members' destructors free both).
  QueueStorage* const storage = storages_.current();
  for (std::size_t i = 0; i < admission_.lane_count(); ++i) admission_.lane(i).unbind_from(storage);
}

// Inlined into push(): the steady-state path is one function.
__attribute__((always_inline)) inline PushStatus ReclaimQueue::push_through_lane(ProducerLane& lane,
                                                                                 void* item) noexcept {
  // Everything below is ordered after the lane exchange (seq_cst). A close() or trim() that stored before
  // it is seen here; one that stores after it finds the lane taken and waits for it to be free.
  if (admission_.closed_for_lane_holder()) {
    bump(lane.leaked);
    lane.taken.store(0, std::memory_order_release);
    return PushStatus::kLeakedAfterClose;
  }
  // Read before the enqueue: a drain that clears the signal after this load finds the lane taken or the
  // item (it reads `taken` and then the queue after its store), and re-arms the signal itself.
  const bool already_signaled = signal_.seen_by_push();
  QueueStorage* storage = storages_.current_for_push();
  // Counted before the enqueue (like an admission): a drain can never release an item not yet counted.
  bump(lane.admitted);
  const bool stored = lane.bind_to(storage) && storage->queue.enqueue(lane.token(), item);
  if (!stored) counters_.count_rejected(1);
  // Release: whoever sees the lane free (close, trim, a clearing drain) also sees the item and counters.
  lane.taken.store(0, std::memory_order_release);
  if (!stored) return PushStatus::kRejected;
  if (!already_signaled) signal_.raise();
  return PushStatus::kQueued;
}

__attribute__((flatten)) PushStatus ReclaimQueue::push(void* item) noexcept {
  if (item == nullptr) return PushStatus::kInvalidArgument;
  ProducerLane* const lane = admission_.take_lane();
  if (lane != nullptr) return push_through_lane(*lane, item);
  // Every lane is taken at this instant. Never waits for a lane: a holder may be preempted, and push()
  // must not block.
  return push_overflow(item);
}

__attribute__((noinline)) PushStatus ReclaimQueue::push_overflow(void* item) noexcept {
  // The admission plays the part of the lane exchange: close() and trim() wait for the admitted ones.
  if (admission_.admit_laneless()) {
    // Counted by the admission itself (laneless_leaked()), and not as a completion: close() waits for
    // the pushes admitted before it, and a late push finishing first must not stand in for one of them.
    return PushStatus::kLeakedAfterClose;
  }
  const bool already_signaled = signal_.seen_by_push();
  // This thread's own implicit producer (created once per such thread).
  const bool stored = storages_.current_for_push()->queue.enqueue(item);
  if (!stored) counters_.count_rejected(1);
  admission_.complete_laneless();
  if (!stored) return PushStatus::kRejected;
  if (!already_signaled) signal_.raise();
  return PushStatus::kQueued;
}


void ReclaimQueue::settle_taken(std::size_t count, std::uint64_t forks, bool released) noexcept {
  if (count == 0) return;
  counters_.settle(count, storages_.forks() != forks, released);
}

void ReclaimQueue::requeue_items(void* const* items, std::size_t count) noexcept {
  if (count == 0) return;
  if (storages_.front()->put_first(items, count)) {
    signal_.raise();
  } else {
    // Out of memory at that very moment: stored nowhere, so counted as a push that could not be stored
    // is, in `rejected` (leaked), never as released.
    counters_.count_rejected(count);
  }
}

void ReclaimQueue::settle(ReleaseBatch* batch, std::size_t upto) noexcept {
  ReclaimQueue* const queue = batch->queue;
  if (queue == nullptr || upto <= batch->settled) return;
  queue->settle_taken(upto - batch->settled, batch->forks, /*released=*/true);  // one step out of in_drain
  batch->settled = upto;
}

void ReclaimQueue::settle_and_requeue_rest(ReleaseBatch* batch, std::size_t reached) noexcept {
  settle(batch, reached);
  const std::size_t rest = batch->count - reached;
  // Uncounted first: in between, a snapshot finds them in no bucket (like a dequeue in flight), never in two.
  settle_taken(rest, batch->forks, /*released=*/false);
  requeue_items(batch->items + reached, rest);
}

void ReclaimQueue::clear_signal_if_empty() noexcept {
  if (storages_.stored_count() != 0) return;  // still pending: stay readable.
  clear_signal();
}

void ReclaimQueue::clear_signal() noexcept {
  signal_.lower();
  // A push that read the signal as set before lower()'s store skipped its write: it still holds its lane
  // (seen here) or its item is in the queue (seen below, after the acquire of its lane's release). Either
  // way, re-arm for it.
  if (admission_.push_may_be_in_flight() || storages_.stored_count() != 0) signal_.raise();
}

void ReclaimQueue::end_linger() noexcept {
  const StorageReader reader(storages_);
  clear_signal();
}

void ReclaimQueue::linger_if_empty() noexcept {
  if (storages_.stored_count() != 0) return;  // still pending: stay readable.
  // The fd stops being readable (an event loop watching it goes quiet), but the signal stays set, so
  // pushes skip the write until the lingering caller's next drain clears it as usual.
  signal_.make_unreadable();
}

std::size_t ReclaimQueue::release_all(const StorageReader& reader, ReleaseBatchFn release, void* context,
                                      std::size_t max_items, bool linger) {
  // The caller's reader: neither storage changes until it leaves. What drains requeued (the front) is taken
  // first, as much of it as was there when this drain began (what this drain requeues itself waits for
  // the next one); then the previous storage a failed trim() left; then the current one.
  // Unless a release forks and the child goes on: the child's reset abandons the storages (their pointers
  // are counted as abandoned_after_fork, never to be read again) and no longer counts the caller as a
  // reader (reader.forked()). There the drain finishes the batch in hand (settled out of
  // abandoned_after_fork, see settle_taken) and stops.
  FrontStorage* const front = storages_.front();
  std::size_t front_left = front->size.load(std::memory_order_relaxed);
  QueueStorage* const previous = storages_.previous();
  PointerQueue& current = storages_.current()->queue;
  counters_.note_pending(storages_.stored_count());
  void* batch[kDrainBatch];
  std::size_t taken_total = 0;
  std::size_t released_total = 0;
  bool halted = false;
  while (taken_total < max_items && !halted) {
    const std::size_t want = max_items - taken_total < kDrainBatch ? max_items - taken_total : kDrainBatch;
    std::size_t taken = 0;
    if (front_left != 0) {
      taken = front->take(batch, want < front_left ? want : front_left);
      front_left = taken == 0 ? 0 : front_left - taken;
    }
    if (taken == 0 && previous != nullptr) taken = take_bulk(previous->queue, batch, want);
    if (taken == 0) taken = take_bulk(current, batch, want);
    if (taken == 0) break;
    // Counted before the release calls, so a nested drain or a snapshot never sees these pointers in no
    // bucket for longer than the dequeue itself.
    counters_.count_taken(taken);
    if (taken_total == 0) counters_.count_nonempty_drain();
    taken_total += taken;
    ReleaseBatch items{batch, taken, 0};
    items.queue = this;
    items.forks = reader.forks;
    try {
      release(&items, context);
    } catch (...) {
      // The item being released counts as released (its owner's action ran); the rest are still ours: back
      // to the front, into the child's own after a fork (the front is read again).
      settle_and_requeue_rest(&items, items.next < taken ? items.next : taken);
      throw;
    }
    // The action halts before items[next]: that one and the rest of the dequeue go back first.
    const std::size_t reached = items.halt ? items.next : taken;
    settle_and_requeue_rest(&items, reached);
    released_total += reached;
    halted = items.halt;
    if (reader.forked()) break;
  }
  // In a fork child where `reader` outlived the reset: settling reads the child's storage through a fresh
  // reader, since the old one no longer counts.
  std::optional<StorageReader> child_reader;
  if (reader.forked()) child_reader.emplace(storages_);
  if (linger && released_total != 0 && !halted) {
    linger_if_empty();
  } else {
    clear_signal_if_empty();
  }
  return released_total;
}

std::size_t ReclaimQueue::drain(ReleaseBatchFn release, void* context, std::size_t max_items) {
  // The one atomic load of an empty drain: nothing was signalled since the last clear.
  if (!signal_.is_set()) return 0;
  const StorageReader reader(storages_);
  return release_all(reader, release, context, max_items, /*linger=*/false);
}

std::size_t ReclaimQueue::drain_and_linger(ReleaseBatchFn release, void* context, std::size_t max_items) {
  if (!signal_.is_set()) return 0;
  const StorageReader reader(storages_);
  return release_all(reader, release, context, max_items, /*linger=*/true);
}

std::size_t ReclaimQueue::close(ReleaseBatchFn release, void* context) {
  admission_.close();
  // Wakes every waiter, now and later: a drain(timeout) blocked on an open queue returns.
  signal_.mark_closed();
  // A push that took its lane before the bit was set may still be enqueueing; one that took it after
  // sees the bit (its lane exchange and the close's CAS are both seq_cst) and only counts a leak. Wait
  // for the first kind: after that, every push admitted while open is in the queue.
  admission_.wait_for_pushes_in_flight();
  if (release == nullptr) return 0;
  const StorageReader reader(storages_);
  return release_all(reader, release, context, SIZE_MAX, /*linger=*/false);
}

void ReclaimQueue::close_without_release() noexcept { (void)close(ReleaseBatchFn{nullptr}, nullptr); }

bool ReclaimQueue::maybe_pending() const noexcept { return signal_.is_set(); }

bool ReclaimQueue::is_closed() const noexcept { return admission_.is_closed(); }

std::size_t ReclaimQueue::pending() const noexcept {
  const StorageReader reader(storages_);
  return storages_.stored_count();
}

int ReclaimQueue::wakeup_fd() const noexcept { return signal_.fd(); }

bool ReclaimQueue::wait_for_work(int timeout_ms) noexcept { return wait_for_work_or(-1, timeout_ms); }

bool ReclaimQueue::wait_for_work_or(int extra_fd, int timeout_ms) noexcept {
  return signal_.wait(extra_fd, timeout_ms);
}

}  // namespace reclaim
