// bench/release_like_bindings.cc — see release_like_bindings.h.

#include "bench/release_like_bindings.h"

#include <algorithm>

#include "bindings/release_loop.h"
#include "cleanup/queue_drain.h"

namespace reclaim_bench {
namespace {

PyTypeObject* volatile g_no_host_item_type = nullptr;  // never an object's type here

// Out of line, as bindings/ reads its type (host_item_type()), so that the loop compiles as the drain's.
__attribute__((noinline)) reclaim::bindings::HostItemType no_host_item_type() {
  return reclaim::bindings::HostItemType{g_no_host_item_type};
}

// Out of line and named, so that bench/count_instructions.py can attribute its instructions.
__attribute__((noinline)) void release_chunk_like_bindings(reclaim::ReleaseBatch* chunk) {
  // The call action is never called: no item is a host item.
  reclaim::bindings::release_batch(chunk, no_host_item_type(), [](PyObject* item) { Py_DECREF(item); });
}

}  // namespace

void release_like_bindings(PyObject* const* items, std::size_t count) {
  for (std::size_t first = 0; first < count; first += reclaim::kDrainBatch) {
    const std::size_t available = std::min(reclaim::kDrainBatch, count - first);
    reclaim::ReleaseBatch chunk{reinterpret_cast<void* const*>(items + first), 0, 0, available};
    while (chunk.count < available) {
      chunk.count += std::min(reclaim::kReleaseChunk, available - chunk.count);
      release_chunk_like_bindings(&chunk);
    }
  }
}

}  // namespace reclaim_bench
