// cleanup/producer_lane.h — one of a ReclaimQueue's fixed producer lanes (reclaim_queue.h says why lanes):
// a moodycamel explicit producer that one pushing thread holds for the length of a push, and the counters
// of the pushes made through it, so that the steady-state push touches one cache line no other thread
// writes. A lane lives as long as its queue. Internal to cleanup/.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "cleanup/queue_storage.h"

namespace reclaim {

// Where a thread starts looking for a free producer lane: a hash of its thread pointer (the address of
// its thread control block, unique among live threads; what pthread_self() returns on glibc, without the
// call), so that a thread keeps finding the same lane (its producer stays warm) and concurrent threads
// spread out. No thread-local storage: a thread's first TLS access in a dlopen'ed library may allocate.
// `mask` is the lane count minus one (the count is a power of two: a mask, not a division).
inline std::size_t preferred_lane(std::size_t mask) noexcept {
#if !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11 && (defined(__x86_64__) || defined(__aarch64__))
  std::uint64_t h = reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer());
#else
  std::uint64_t h = static_cast<std::uint64_t>(::pthread_self());
#endif
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return static_cast<std::size_t>(h) & mask;
}

// Adds one to a counter that only the holder of its lane writes: a plain load and store, no
// read-modify-write (readers only ever load it).
inline void bump(std::atomic<std::uint64_t>& counter) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// One producer lane: a moodycamel explicit producer that at most one thread uses at a time, and the
// counters of the pushes made through it. Cache-line aligned: a pushing thread owns the line.
struct alignas(64) ProducerLane {
  // Taken with exchange(1, seq_cst) by a pushing thread, freed with store(0, release) after its enqueue:
  // the next holder sees the producer exactly as the last one left it (explicit producers are
  // single-threaded). The exchange is also the push's one full barrier: close(), trim() and the drain
  // that clears the wake-up signal read `taken` after their own seq_cst store, so either they see the
  // lane taken (and wait for it, or re-arm) or the pushing thread sees their store (see ReclaimQueue::push).
  // 1 while taken. A 32-bit word, not a bool: a locked exchange on a byte is slower on x86-64, and this
  // exchange is most of a push (see docs/benchmarks.md).
  std::atomic<std::uint32_t> taken{0};
  // Pushes through this lane admitted while the queue was open (queued or rejected), counted before
  // the enqueue; and pushes that found the queue closed. Written only by the holder (bump), read by
  // snapshot(), close() and the fork reset.
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> leaked{0};
  // The storage whose queue this lane's token (producer) belongs to; null: no token. Written only by the
  // holder (or by trim() while it holds the lane, or by the fork reset); read by producer_use().
  std::atomic<QueueStorage*> token_owner{nullptr};
  alignas(moodycamel::ProducerToken) unsigned char token_bytes[sizeof(moodycamel::ProducerToken)];

  moodycamel::ProducerToken& token() noexcept {
    return *std::launder(reinterpret_cast<moodycamel::ProducerToken*>(token_bytes));
  }

  // Makes this lane's producer one of `storage`'s (creating it on first use, or after a trim replaced
  // the storage). False when the producer cannot be allocated (the push is then rejected; a later one
  // tries again). Only the holder calls it; `storage` and the lane's previous owner are both alive.
  bool bind_to(QueueStorage* storage) noexcept {
    if (token_owner.load(std::memory_order_relaxed) == storage) return true;
    return rebind_to(storage);
  }

  // bind_to()'s rare path, out of line: first use, or the storage was replaced.
  __attribute__((noinline)) bool rebind_to(QueueStorage* storage) noexcept {
    QueueStorage* owner = token_owner.load(std::memory_order_relaxed);
    if (owner != nullptr) token().~ProducerToken();  // its queue is still alive: trim() frees it later
    token_owner.store(nullptr, std::memory_order_relaxed);
    auto* fresh = new (token_bytes) moodycamel::ProducerToken(storage->queue);
    if (!fresh->valid()) {
      fresh->~ProducerToken();
      return false;
    }
    token_owner.store(storage, std::memory_order_relaxed);
    return true;
  }

  // Abandons the token without touching the queue it belongs to (the fork reset: that queue is abandoned).
  void forget_token() noexcept { token_owner.store(nullptr, std::memory_order_relaxed); }

  // Destroys the token if it belongs to `storage` (before `storage` is freed). Holder only.
  void unbind_from(const QueueStorage* storage) noexcept {
    if (token_owner.load(std::memory_order_relaxed) != storage) return;
    token().~ProducerToken();
    token_owner.store(nullptr, std::memory_order_relaxed);
  }
};

}  // namespace reclaim

#include "cleanup/producer_admission.h"

namespace reclaim {

inline ProducerLane* ProducerAdmission::take_lane() noexcept {
  const std::size_t start = preferred_lane(lane_mask_);
  for (std::size_t probe = 0; probe <= lane_mask_; ++probe) {
    ProducerLane& lane = lanes_[(start + probe) & lane_mask_];
    // No load before the exchange: the preferred lane is almost always free, and a load of the line the
    // previous push just stored to only adds a stall before the exchange that must come anyway.
    if (lane.taken.exchange(1, std::memory_order_seq_cst) == 0) return &lane;
  }
  return nullptr;
}

inline ProducerLane& ProducerAdmission::lane(std::size_t index) noexcept { return lanes_[index]; }

}  // namespace reclaim
