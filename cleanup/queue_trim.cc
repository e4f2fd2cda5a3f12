// cleanup/queue_trim.cc — ReclaimQueue::trim(): replacing the storage while producers push and other
// threads drain (see reclaim_queue.h for the contract, storage_set.h for the readers' guard).

#include <malloc.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cleanup/producer_slot.h"
#include "cleanup/queue_dequeue.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim {

namespace {

// Moves every pointer of `from` into `to` through `mover` (held by the caller); false when `to` could not
// grow (what was not moved stays in `from`).
bool move_pending(QueueStorage* from, QueueStorage* to, ProducerSlot& mover) noexcept {
  void* batch[kDrainBatch];
  for (std::size_t got; (got = dequeue_batch<false>(from->queue, batch, kDrainBatch).taken) != 0;) {
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
  if (storages_.retired() != nullptr) return true;  // a trim that ran out of memory
  if (counters_.exceeded_since_trim(options_.reserved_capacity)) return true;
  counters_.note_pending(pending());  // a burst no drain has seen yet
  return counters_.exceeded_since_trim(options_.reserved_capacity);
}

TrimStatus ReclaimQueue::trim() noexcept {
  if (!trim_would_help()) return TrimStatus::kNotNeeded;  // also: closed, or a retired storage to empty
  // Only when no reader is in the storage (possibly this very thread, from a release action) and no
  // other trim runs.
  if (!storages_.begin_trim()) return TrimStatus::kBusy;
  // Normally: a fresh storage replaces the current one, whose pending pointers move over. After a trim
  // that ran out of memory while moving: the storage it retired is emptied into the current one.
  QueueStorage* source = storages_.retired();
  QueueStorage* target = storages_.current();
  if (source == nullptr) {
    target = StorageSet::make_storage(options_.reserved_capacity);
    source = storages_.replace_current(target);
  }
  // Pushes that loaded `source` still hold their slot, or are slot-less pushes in flight. Taking every
  // slot in turn waits for the first kind and drops the slots' producers of `source` (their tokens must
  // go before its queue); slot-less pushes admitted after the exchange load `target`, and those admitted
  // before it are waited for below (also when a close() came in meanwhile: its late pushes never
  // complete, and are not waited for).
  ProducerSlot* mover = nullptr;
  for (std::size_t i = 0; i < admission_.slot_count(); ++i) {
    ProducerSlot& slot = admission_.slot(i);
    while (slot.held.exchange(1, std::memory_order_seq_cst) != 0) sched_yield();
    slot.unbind_from(source);
    if (mover == nullptr && slot.bind_to(target)) {
      mover = &slot;  // kept: its producer carries what is still pending into `target`
      continue;
    }
    slot.held.store(0, std::memory_order_release);
  }
  admission_.wait_for_slotless_pushes_in_flight();

  // Nothing is released and no counter changes.
  const bool moved_all = mover != nullptr && move_pending(source, target, *mover);
  if (mover != nullptr) mover->held.store(0, std::memory_order_release);
  if (moved_all) {
    storages_.set_retired(nullptr);
    counters_.forget_pending_since_trim();
    StorageSet::free_storage(source);
    counters_.count_trim();
#if defined(__GLIBC__)
    ::malloc_trim(0);  // hand the freed heap pages back to the system (glibc keeps them otherwise)
#endif
  } else {
    // Out of memory while moving: `source` keeps what is left and stays reachable (drains and counts
    // read it) until a later trim empties it. Nothing is lost.
    storages_.set_retired(source);
  }
  storages_.end_trim();
  return moved_all ? TrimStatus::kTrimmed : TrimStatus::kBusy;
}

}  // namespace reclaim
