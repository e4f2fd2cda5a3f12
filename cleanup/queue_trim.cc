// cleanup/queue_trim.cc — ReclaimQueue::trim(): replacing the storage while producers push and other
// threads drain (see reclaim_queue.h for the contract, storage_set.h for the readers' guard).

#include <malloc.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cleanup/producer_lane.h"
#include "cleanup/queue_storage.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim {

namespace {

// Moves every pointer of `from` into `to` through `mover` (held by the caller); false when `to` could not
// grow (what was not moved stays in `from`).
bool move_pending(QueueStorage* from, QueueStorage* to, ProducerLane& mover) noexcept {
  void* batch[kDrainBatch];
  for (std::size_t got; (got = from->queue.try_dequeue_bulk(batch, kDrainBatch)) != 0;) {
    if (!to->queue.enqueue_bulk(mover.token(), batch, got)) {
      (void)from->queue.enqueue_bulk(batch, got);  // out of memory: back where it was (no new block)
      return false;
    }
  }
  return true;
}

}  // namespace

bool ReclaimQueue::trim_would_help() const noexcept {
  if (is_closed()) return false;
  if (storages_.previous() != nullptr) return true;  // a trim that ran out of memory
  if (counters_.exceeded_since_trim(options_.reserved_capacity)) return true;
  counters_.note_pending(pending());  // a burst no drain has seen yet
  return counters_.exceeded_since_trim(options_.reserved_capacity);
}

TrimStatus ReclaimQueue::trim() noexcept {
  if (!trim_would_help()) return TrimStatus::kNotNeeded;  // also: closed, or a previous storage to empty
  // Only when no reader is in the storage (possibly this very thread, from a release action) and no
  // other trim runs.
  if (!storages_.begin_trim()) return TrimStatus::kBusy;
  // Normally: a fresh storage replaces the current one, whose pending pointers move over. After a trim
  // that ran out of memory while moving: the previous storage it left is emptied into the current one.
  QueueStorage* source = storages_.previous();
  QueueStorage* target = storages_.current();
  if (source == nullptr) {
    target = StorageSet::make_storage(options_.reserved_capacity);
    source = storages_.replace_current(target);
  }
  // Pushes that loaded `source` still hold their lane, or are lane-less pushes in flight. Taking every
  // lane in turn waits for the first kind and drops the lanes' producers of `source` (their tokens must
  // go before its queue); lane-less pushes admitted after the exchange load `target`, and those admitted
  // before it are waited for below (also when a close() came in meanwhile: its late pushes never
  // complete, and are not waited for).
  ProducerLane* mover = nullptr;
  for (std::size_t i = 0; i < admission_.lane_count(); ++i) {
    ProducerLane& lane = admission_.lane(i);
    while (lane.taken.exchange(1, std::memory_order_seq_cst) != 0) sched_yield();
    lane.unbind_from(source);
    if (mover == nullptr && lane.bind_to(target)) {
      mover = &lane;  // kept: its producer carries what is still pending into `target`
      continue;
    }
    lane.taken.store(0, std::memory_order_release);
  }
  admission_.wait_for_laneless_pushes_in_flight();

  // Nothing is released and no counter changes.
  const bool moved_all = mover != nullptr && move_pending(source, target, *mover);
  if (mover != nullptr) mover->taken.store(0, std::memory_order_release);
  if (!moved_all) {
    // Out of memory while moving: `source` keeps what is left and stays reachable (drains and counts
    // read it) until a later trim empties it. Nothing is lost.
    storages_.set_previous(source);
    storages_.end_trim();
    return TrimStatus::kBusy;
  }
  storages_.set_previous(nullptr);
  counters_.forget_pending_since_trim();
  counters_.count_trim();
  // `source` is out of every reader's reach (neither current nor previous; no lane bound to it): readers
  // go on while it is freed and the heap is trimmed, which take time in proportion to the whole heap.
  storages_.end_trim();
  StorageSet::free_storage(source);
#if defined(__GLIBC__)
  ::malloc_trim(0);  // hand the freed heap pages back to the system (glibc keeps them otherwise)
#endif
  return TrimStatus::kTrimmed;
}

}  // namespace reclaim
