// cleanup/queue_storage.h — private to //cleanup: what a ReclaimQueue stores its pointers in. The
// moodycamel queue and the fixed set of producer slots in front of it (see reclaim_queue.h's header
// comment for why slots). Replaced, never freed, after fork (ReclaimQueue::reset_after_fork_in_child).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "cleanup/queue_allocation.h"
#include "cleanup/reclaim_queue.h"
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


// Where a thread starts looking for a free producer slot: a hash of its pthread handle, so that a thread
// keeps finding the same slot (its producer stays warm) and concurrent threads spread out. No
// thread-local storage: a thread's first TLS access in a dlopen'ed library may allocate.
inline std::size_t preferred_slot(std::size_t slot_count) noexcept {
  std::uint64_t h = static_cast<std::uint64_t>(::pthread_self());
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return static_cast<std::size_t>(h % slot_count);
}


// One producer slot: a moodycamel explicit producer that at most one thread uses at a time.
struct alignas(64) ProducerSlot {
  // Taken with exchange(acquire) by a pushing thread, given back with store(release) after its enqueue:
  // the next holder sees the producer exactly as the last one left it (explicit producers are
  // single-threaded).
  std::atomic<bool> held{false};
  // Written only by the thread holding `held`: the token is created on the slot's first use.
  bool has_token = false;
  // Set (relaxed) once the slot's producer exists; read by producer_use() for diagnostics.
  std::atomic<bool> used{false};
  alignas(moodycamel::ProducerToken) unsigned char token_bytes[sizeof(moodycamel::ProducerToken)];

  moodycamel::ProducerToken& token() noexcept {
    return *std::launder(reinterpret_cast<moodycamel::ProducerToken*>(token_bytes));
  }
};

struct ReclaimQueue::Storage {
  Storage(std::size_t reserved_capacity, ProducerSlot* slot_array, std::size_t count)
      : queue(reserved_capacity), slots(slot_array), slot_count(count) {}
  // Tokens go before the queue that owns their producers (tests destroy queues; production never does).
  ~Storage() {
    for (std::size_t i = 0; i < slot_count; ++i) {
      if (slots[i].has_token) slots[i].token().~ProducerToken();
      slots[i].~ProducerSlot();
    }
    std::free(slots);
  }

  // Stores `item` through a free producer slot; false when storage could not grow (allocation failure).
  bool enqueue(void* item) noexcept {
    const std::size_t start = preferred_slot(slot_count);
    for (std::size_t probe = 0; probe < slot_count; ++probe) {
      ProducerSlot& slot = slots[(start + probe) % slot_count];
      if (slot.held.load(std::memory_order_relaxed) || slot.held.exchange(true, std::memory_order_acquire)) {
        continue;
      }
      bool stored = false;
      if (!slot.has_token) {
        auto* token = new (slot.token_bytes) moodycamel::ProducerToken(queue);
        if (token->valid()) {
          slot.has_token = true;
          slot.used.store(true, std::memory_order_relaxed);
        } else {
          token->~ProducerToken();  // out of memory: this push is rejected; a later one tries again
        }
      }
      if (slot.has_token) stored = queue.enqueue(slot.token(), item);
      slot.held.store(false, std::memory_order_release);
      return stored;
    }
    // Every slot is held at this instant: this thread's own implicit producer (created once per such
    // thread). Never waits for a slot: a holder may be preempted, and push() must not block.
    overflow_pushes.fetch_add(1, std::memory_order_relaxed);
    return queue.enqueue(item);
  }

  PointerQueue queue;
  ProducerSlot* const slots;
  const std::size_t slot_count;
  std::atomic<std::uint64_t> overflow_pushes{0};  // relaxed; pushes that found every slot held
};

}  // namespace reclaim
