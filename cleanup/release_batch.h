// cleanup/release_batch.h — what a drain hands to its owner's release action: a batch (ReleaseBatch,
// ReleaseBatchFn).
// Part of the queue's interface (reclaim_queue.h includes it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace reclaim {

class ReclaimQueue;

// The release action, supplied by the owner at each drain and called on the thread that drains, outside
// any internal lock, once per bulk dequeue (up to kDrainBatch pointers): the owner runs one tight loop per
// batch (bindings/ fetches its thread state once per batch). It releases batch->items[batch->next ...
// batch->count) in order; `next` must be `count` when it returns, and, should a release unwind, just past
// the item being released (or at an item whose release never began) by the time the unwind leaves the
// action: advanced before each release, or set by a handler that rethrows. Nothing reads `next` while the
// action runs. It may push again or drain again (re-entrancy is safe). It should not throw, but it may
// unwind: CPython ends a thread that re-takes the GIL during finalization with pthread_exit, whose forced
// unwind passes through here. drain() and close() let any unwind pass (a noexcept frame would turn it into
// std::terminate) after putting back the items the action had not reached (`next` onwards: the item being
// released when it unwound counts as released).
//
// Counting: a drain counts what it takes as in_drain, and each item as released once the action is done
// with it: the drain settles a call's items when the call returns; an action settles earlier
// (ReclaimQueue::settle) before it runs something that may take long (a Python call), so that counters
// and an exit report taken meanwhile say what really happened. An action may also halt the drain (`halt`).
struct ReleaseBatch {
  void* const* items;
  std::size_t count;
  std::size_t next;  // where the release action is: see ReleaseBatchFn
  // Set by the action, with `next` at the first item it did not release: the drain puts items[next ...)
  // of its whole dequeue back at the front of the queue (pending again, taken first by the next drain, in
  // this order) and returns.
  bool halt = false;
  // The drain's bookkeeping (the action never writes these): items[0 ... settled) are counted as
  // released; `queue` and `forks` say whose counters and whether a fork reset came in between. Null
  // queue: nothing counts (a release action run over a plain array).
  std::size_t settled = 0;
  ReclaimQueue* queue = nullptr;
  std::uint64_t forks = 0;
};
using ReleaseBatchFn = void (*)(ReleaseBatch* batch, void* context);

}  // namespace reclaim
