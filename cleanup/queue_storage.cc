// cleanup/queue_storage.cc — the allocation hook behind every storage (queue_allocation.h).

#include <atomic>

#include "cleanup/queue_allocation.h"
#include "cleanup/queue_storage.h"

namespace reclaim {

std::atomic<AllocateFn> g_allocate{nullptr};

void set_queue_allocator_for_testing(AllocateFn allocate) noexcept {
  g_allocate.store(allocate, std::memory_order_relaxed);
}

}  // namespace reclaim
