// cleanup/queue_dequeue.h — one bulk dequeue of a drain: up to kDrainBatch pointers copied out of a
// QueueStorage into the drain's stack batch, optionally asking the CPU for each pointee's line on the way.
// Internal to cleanup/ (queue_drain.h includes it for its template).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cleanup/queue_storage.h"

namespace reclaim {

// Pointers taken off the queue per bulk dequeue; a drain's stack holds one batch.
constexpr std::size_t kDrainBatch = 512;  // 4 KiB of stack per drain, nested drains included

// The output iterator of a bulk dequeue: stores each pointer into the batch, and with kPrefetch asks the
// CPU to fetch the cache line it points to, so that the release action (which will touch it: Py_DECREF
// writes the object's header) finds it there; the fetches overlap with the copy. A prefetch never faults.
// It also notes where the copy stopped in the queue's storage (next_source: see TakenBatch). It advances
// in its assignment, so both of moodycamel's copy loops (`*it++ = x` and `*it = x; ++it`) see one step per
// pointer, and moodycamel is handed a reference to it (the caller reads both fields afterwards).
template <bool kPrefetch>
struct BatchWriter {
  // The batch's address as an integer, and an index: GCC lets a store of any pointer type alias any
  // object of pointer type, so a `void**` member would be reloaded and re-stored around every pointer
  // copied; integers stay in registers.
  std::uintptr_t batch_address;
  std::size_t index;
  std::uintptr_t next_source;
  BatchWriter& operator*() noexcept { return *this; }
  // `item` is moodycamel's own lane of the pointer (it moves from it), so `&item + 1` is the next lane.
  BatchWriter& operator=(void*&& item) noexcept {
    if (kPrefetch) __builtin_prefetch(item, 1);
    next_source = reinterpret_cast<std::uintptr_t>(&item + 1);
    reinterpret_cast<void**>(batch_address)[index++] = item;
    return *this;
  }
  BatchWriter& operator++() noexcept { return *this; }
  BatchWriter& operator++(int) noexcept { return *this; }
};

// What one bulk dequeue left for the release action: `taken` pointers came off the queue (all of them
// count as released), the first `left` of them are in the batch for the action (the others were released
// quietly while they were copied: cleanup/queue_drain.h). `next_source` is the address just after the
// last pointer copied, in the queue's storage: the next dequeue will most likely start reading there
// (the rest of the block, then, when blocks were handed out in order, the next one), so the drain asks
// the CPU for those lines while the release action runs. A hint only (0 when nothing was copied).
struct TakenBatch {
  std::size_t taken;
  std::size_t left;
  std::uintptr_t next_source;
};

// Takes up to `want` pointers off `queue` into `batch`. A drain holding a StorageReader, any thread; never
// blocks, never allocates. Flattened: moodycamel's bulk dequeue takes the
// iterator by reference, and only once it is inlined here does the iterator live in registers rather
// than in memory that every copied pointer goes through.
template <bool kPrefetch>
__attribute__((flatten)) inline TakenBatch dequeue_batch(PointerQueue& queue, void** batch,
                                                         std::size_t want) noexcept {
  BatchWriter<kPrefetch> writer{reinterpret_cast<std::uintptr_t>(batch), 0, 0};
  const std::size_t taken = queue.template try_dequeue_bulk<BatchWriter<kPrefetch>&>(writer, want);
  return TakenBatch{taken, taken, writer.next_source};
}

}  // namespace reclaim
