// cleanup/queue_trim.cc — ReclaimQueue::trim() and what it needs: replacing the storage while producers
// push and other threads drain (see reclaim_queue.h for the contract, queue_storage.h for the readers'
// guard).

#include <malloc.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "cleanup/queue_storage.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim {

bool ReclaimQueue::trim_would_help() const noexcept {
  if (is_closed()) return false;
  if (retired_.load(std::memory_order_relaxed) != nullptr) return true;  // a trim that ran out of memory
  if (pending_since_trim_.load(std::memory_order_relaxed) > options_.reserved_capacity) return true;
  note_pending(pending());  // a burst no drain has seen yet
  return pending_since_trim_.load(std::memory_order_relaxed) > options_.reserved_capacity;
}

bool ReclaimQueue::move_pending(Storage* from, Storage* to, ProducerSlot& mover) noexcept {
  void* batch[kDrainBatch];
  for (std::size_t got; (got = dequeue_batch<false>(from->queue, batch, kDrainBatch).taken) != 0;) {
    if (!to->queue.enqueue_bulk(mover.token(), batch, got)) {
      (void)from->queue.enqueue_bulk(batch, got);  // out of memory: back where it was (no new block)
      return false;
    }
  }
  return true;
}

void ReclaimQueue::free_storage(Storage* storage) noexcept {
  storage->~Storage();
  std::free(storage);
}

TrimStatus ReclaimQueue::trim() noexcept {
  if (!trim_would_help()) return TrimStatus::kNotNeeded;  // also: closed, or a retired storage to empty
  // Only when no reader is in the storage (possibly this very thread, from a release action: waiting
  // for it would wait forever) and no other trim runs.
  std::uint64_t idle = 0;
  if (!readers_.compare_exchange_strong(idle, kTrimming, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
    return TrimStatus::kBusy;
  }
  // Normally: a fresh storage replaces the current one, whose pending pointers move over. After a trim
  // that ran out of memory while moving: the storage it retired is emptied into the current one.
  Storage* source = retired_.load(std::memory_order_relaxed);
  Storage* target = storage_.load(std::memory_order_relaxed);
  if (source == nullptr) {
    target = make_storage(options_.reserved_capacity);
    source = storage_.exchange(target, std::memory_order_seq_cst);
  }
  // Pushes that loaded `source` still hold their slot, or are slot-less pushes in flight. Taking every
  // slot in turn waits for the first kind and drops the slots' producers of `source` (their tokens must
  // go before its queue); slot-less pushes admitted after the exchange load `target`, and those admitted
  // before it are waited for below (also when a close() came in meanwhile: its late pushes never
  // complete, and are not waited for).
  ProducerSlot* mover = nullptr;
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    ProducerSlot& slot = slots_[i];
    while (slot.held.exchange(1, std::memory_order_seq_cst) != 0) sched_yield();
    slot.unbind_from(source);
    if (mover == nullptr && slot.bind_to(target)) {
      mover = &slot;  // kept: its producer carries what is still pending into `target`
      continue;
    }
    slot.held.store(0, std::memory_order_release);
  }
  wait_for_slotless_pushes_in_flight();

  // Nothing is released and no counter changes.
  const bool moved_all = mover != nullptr && move_pending(source, target, *mover);
  if (mover != nullptr) mover->held.store(0, std::memory_order_release);
  if (moved_all) {
    retired_.store(nullptr, std::memory_order_relaxed);
    pending_since_trim_.store(0, std::memory_order_relaxed);
    free_storage(source);
    trims_.fetch_add(1, std::memory_order_relaxed);
#if defined(__GLIBC__)
    ::malloc_trim(0);  // hand the freed heap pages back to the system (glibc keeps them otherwise)
#endif
  } else {
    // Out of memory while moving: `source` keeps what is left and stays reachable (drains and counts
    // read it) until a later trim empties it. Nothing is lost.
    retired_.store(source, std::memory_order_relaxed);
  }
  readers_.fetch_and(~kTrimming, std::memory_order_release);
  return moved_all ? TrimStatus::kTrimmed : TrimStatus::kBusy;
}

}  // namespace reclaim
