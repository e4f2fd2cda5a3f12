// cleanup/queue_storage.h — where a ReclaimQueue keeps its pointers: the moodycamel queue (QueueStorage),
// replaced by trim() and by the fork reset, and the front (FrontStorage) that holds what drains requeued.
// Not part of the queue's interface: published only for the benchmark that measures the storage alone
// (bench/queue_bench.cc); bindings/ may not include it (//tests/layering:include_rules_test).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>

#include "cleanup/queue_allocation.h"
#include "concurrentqueue/concurrentqueue.h"

namespace reclaim {

// Loaded on every storage allocation; written only by tests (set_queue_allocator_for_testing).
extern std::atomic<AllocateFn> g_allocate;

struct QueueTraits : moodycamel::ConcurrentQueueDefaultTraits {
  // Larger blocks than the default (32): fewer block hand-offs per pointer, and with the larger initial
  // index a producer thread can hold 256 * 256 pointers before its block index must grow (allocate).
  static const std::size_t BLOCK_SIZE = 256;
  static const std::size_t EXPLICIT_INITIAL_INDEX_SIZE = 256;
  static const std::size_t IMPLICIT_INITIAL_INDEX_SIZE = 256;

  static void* malloc(std::size_t size) {
    AllocateFn allocate = g_allocate.load(std::memory_order_relaxed);
    return allocate != nullptr ? allocate(size) : std::malloc(size);
  }
  static void free(void* pointer) { std::free(pointer); }
};

using PointerQueue = moodycamel::ConcurrentQueue<void*, QueueTraits>;

struct QueueStorage {
  explicit QueueStorage(std::size_t reserved_capacity) : queue(reserved_capacity) {}
  PointerQueue queue;
};

// What drains requeued (the rest of a dequeue after ReleaseBatch::halt or an unwinding release), in the
// order it must be taken again: a deque under a mutex rather than a moodycamel queue, whose order holds only per
// producer. Only owner threads (drains) touch it, never CUDA's, and rarely; the size is mirrored in an
// atomic so that counter reads never take the lock. Its memory goes back as soon as it is empty.
// Allocates through QueueTraits (the storage's allocator, which tests can make fail), throwing
// std::bad_alloc when it fails, as a standard allocator does.
template <class T>
struct QueueAllocator {
  using value_type = T;
  QueueAllocator() noexcept = default;
  template <class U>
  QueueAllocator(const QueueAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    void* memory = QueueTraits::malloc(n * sizeof(T));
    if (memory == nullptr) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* pointer, std::size_t) noexcept { QueueTraits::free(pointer); }
  template <class U>
  bool operator==(const QueueAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const QueueAllocator<U>&) const noexcept { return false; }
};

struct FrontStorage {
  using Items = std::deque<void*, QueueAllocator<void*>>;
  std::mutex mutex;
  Items items;  // guarded by mutex
  std::atomic<std::size_t> size{0};

  // Puts items[0 ... count) ahead of what is there, in their order (the rest of a dequeue is older than
  // anything requeued since). False, storing nothing, when out of memory.
  bool put_first(void* const* put_items, std::size_t count) noexcept {
    const std::lock_guard<std::mutex> lock(mutex);
    try {
      items.insert(items.begin(), put_items, put_items + count);
    } catch (...) {  // std::bad_alloc: deque's insert at its front leaves it unchanged
      return false;
    }
    size.store(items.size(), std::memory_order_relaxed);
    return true;
  }

  // Takes up to `want` items from the head into `batch`; returns how many.
  std::size_t take(void** batch, std::size_t want) noexcept {
    const std::lock_guard<std::mutex> lock(mutex);
    const std::size_t taken = want < items.size() ? want : items.size();
    for (std::size_t i = 0; i < taken; ++i) batch[i] = items[i];
    items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(taken));
    if (items.empty() && taken != 0) {
      try {
        Items().swap(items);  // a requeued burst keeps no blocks (an empty deque still holds one)
      } catch (...) {  // out of memory for the empty one: keep the old blocks
      }
    }
    size.store(items.size(), std::memory_order_relaxed);
    return taken;
  }
};

}  // namespace reclaim
