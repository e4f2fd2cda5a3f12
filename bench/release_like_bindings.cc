// bench/release_like_bindings.cc — see release_like_bindings.h.

#include "bench/release_like_bindings.h"

#include <algorithm>

#include "bindings/release_loop.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim_bench {
namespace {

PyTypeObject* volatile g_no_host_item_type = nullptr;  // never an object's type here

// Out of line, as bindings/ reads its type (host_item_type()), so that the loop compiles as the drain's.
__attribute__((noinline)) reclaim::bindings::HostItemType no_host_item_type() {
  return reclaim::bindings::HostItemType{g_no_host_item_type};
}

// Out of line and named, so that bench/count_instructions.py can attribute its instructions.
__attribute__((noinline)) void release_batch_like_bindings(reclaim::ReleaseBatch* batch) {
  // The call action is never called: no item is a host item.
  reclaim::bindings::release_batch(batch, no_host_item_type(), [](PyObject* item) { Py_DECREF(item); });
}

}  // namespace

void release_like_bindings(PyObject* const* items, std::size_t count) {
  for (std::size_t first = 0; first < count; first += reclaim::kDrainBatch) {
    reclaim::ReleaseBatch batch{reinterpret_cast<void* const*>(items + first),
                                std::min(reclaim::kDrainBatch, count - first), 0};
    release_batch_like_bindings(&batch);
  }
}

}  // namespace reclaim_bench
