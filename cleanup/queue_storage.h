// cleanup/queue_storage.h — where a ReclaimQueue keeps its pointers. Internal to cleanup/; exported only
// through queue_drain.h (an owner that compiles its quiet release into the drain loop).
//
// Two parts with different lifetimes:
//   - ProducerSlot: the queue's fixed set of producer slots (see reclaim_queue.h for why slots). A slot
//     lives as long as its queue, and carries the push counters of the pushes made through it, so that
//     the steady-state push touches one cache line that no other thread writes.
//   - QueueStorage: the moodycamel queue itself. Replaced by trim() (the old one is freed once no thread can
//     reach it) and by the fork reset (the old one is abandoned, never freed).
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
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

struct QueueStorage {
  explicit QueueStorage(std::size_t reserved_capacity) : queue(reserved_capacity) {}
  PointerQueue queue;
};

// What drains gave back (ReleaseBatch::stop, ReclaimQueue::give_back, an unwinding release), in the order
// it must be taken again: a deque under a mutex rather than a moodycamel queue, whose order holds only per
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

  // Puts items[0 ... count) ahead of what is there (`first`: the rest of a dequeue, older than anything
  // given back since) or behind it, in their order. False, storing nothing, when out of memory.
  bool put(void* const* put_items, std::size_t count, bool first) noexcept {
    const std::lock_guard<std::mutex> lock(mutex);
    try {
      if (first) {
        items.insert(items.begin(), put_items, put_items + count);
      } else {
        items.insert(items.end(), put_items, put_items + count);
      }
    } catch (...) {  // std::bad_alloc: deque's insert at either end leaves it unchanged
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
        Items().swap(items);  // a burst given back keeps no blocks (an empty deque still holds one)
      } catch (...) {  // out of memory for the empty one: keep the old blocks
      }
    }
    size.store(items.size(), std::memory_order_relaxed);
    return taken;
  }
};

// Where a thread starts looking for a free producer slot: a hash of its thread pointer (the address of
// its thread control block, unique among live threads; what pthread_self() returns on glibc, without the
// call), so that a thread keeps finding the same slot (its producer stays warm) and concurrent threads
// spread out. No thread-local storage: a thread's first TLS access in a dlopen'ed library may allocate.
// `mask` is the slot count minus one (the count is a power of two: a mask, not a division).
inline std::size_t preferred_slot(std::size_t mask) noexcept {
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

// Adds one to a counter that only the holder of its slot writes: a plain load and store, no
// read-modify-write (readers only ever load it).
inline void bump(std::atomic<std::uint64_t>& counter) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// One producer slot: a moodycamel explicit producer that at most one thread uses at a time, and the
// counters of the pushes made through it. Cache-line aligned: a pushing thread owns the line.
struct alignas(64) ProducerSlot {
  // Taken with exchange(1, seq_cst) by a pushing thread, given back with store(0, release) after its enqueue:
  // the next holder sees the producer exactly as the last one left it (explicit producers are
  // single-threaded). The exchange is also the push's one full barrier: close(), trim() and the drain
  // that clears the wake-up signal read `held` after their own seq_cst store, so either they see the
  // slot held (and wait for it, or re-arm) or the pushing thread sees their store (see reclaim_queue.cc).
  // 1 while held. A 32-bit word, not a bool: a locked exchange on a single byte measured about twice as
  // slow as on a word on x86-64 (AMD), and this exchange is most of a push.
  std::atomic<std::uint32_t> held{0};
  // Pushes through this slot admitted while the queue was open (queued or rejected), counted before
  // the enqueue; and pushes that found the queue closed. Written only by the holder (bump), read by
  // snapshot(), close() and the fork reset.
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> leaked{0};
  // The storage whose queue this slot's token (producer) belongs to; null: no token. Written only by the
  // holder (or by trim() while it holds the slot, or by the fork reset); read by producer_use().
  std::atomic<QueueStorage*> token_owner{nullptr};
  alignas(moodycamel::ProducerToken) unsigned char token_bytes[sizeof(moodycamel::ProducerToken)];

  moodycamel::ProducerToken& token() noexcept {
    return *std::launder(reinterpret_cast<moodycamel::ProducerToken*>(token_bytes));
  }

  // Makes this slot's producer one of `storage`'s (creating it on first use, or after a trim replaced
  // the storage). False when the producer cannot be allocated (the push is then rejected; a later one
  // tries again). Only the holder calls it; `storage` and the slot's previous owner are both alive.
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

  // Drops the token without touching the queue it belongs to (the fork reset: that queue is abandoned).
  void forget_token() noexcept { token_owner.store(nullptr, std::memory_order_relaxed); }

  // Destroys the token if it belongs to `storage` (before `storage` is freed). Holder only.
  void unbind_from(const QueueStorage* storage) noexcept {
    if (token_owner.load(std::memory_order_relaxed) != storage) return;
    token().~ProducerToken();
    token_owner.store(nullptr, std::memory_order_relaxed);
  }
};

// --- shared by the files of the queue (reclaim_queue.cc, queue_trim.cc, queue_counters.cc) -------------

// Pointers taken off the queue per bulk dequeue; a drain's stack holds one batch.
constexpr std::size_t kDrainBatch = 512;  // 4 KiB of stack per drain, nested drains included

// Prints `what` and errno, then aborts: for a queue that cannot be created at all.
[[noreturn]] void die(const char* what) noexcept;

// A new non-blocking, close-on-exec eventfd; dies if none can be made.
int make_eventfd() noexcept;

// Puts a fresh eventfd behind the descriptor number `fd` (fork child: the inherited object is shared with
// the parent and must not wake either side for the other; an event loop may have registered the number).
void replace_eventfd(int fd) noexcept;

// A drain, close or counter read inside the storage: counted in readers_, so that trim() never frees a
// storage someone is reading. Waits (yielding) while a trim replaces it: a trim runs no callback and its
// only wait is for a producer slot's holder, who never blocks, so the wait is short.
// A reader that outlives a fork (a finalizer run by its drain called fork(), and the child went on) was
// wiped out of readers_ by the child's reset: in the child it leaves without counting itself out.
struct StorageReader {
  explicit StorageReader(const ReclaimQueue& queue) noexcept
      : readers(queue.readers_), fork_generation(queue.fork_generation_),
        generation(fork_generation.load(std::memory_order_relaxed)) {
    for (;;) {
      const std::uint64_t before = readers.fetch_add(1, std::memory_order_acquire);
      if ((before & ReclaimQueue::kTrimming) == 0) return;
      readers.fetch_sub(1, std::memory_order_relaxed);
      while ((readers.load(std::memory_order_acquire) & ReclaimQueue::kTrimming) != 0) sched_yield();
    }
  }
  ~StorageReader() {
    if (!forked()) readers.fetch_sub(1, std::memory_order_release);
  }
  StorageReader(const StorageReader&) = delete;
  StorageReader& operator=(const StorageReader&) = delete;

  // True in a fork child that was made while this reader was in: the storages it loaded are abandoned
  // (never to be read again) and readers_ no longer counts it. Only the forking thread exists in the
  // child, so a relaxed load sees the reset.
  bool forked() const noexcept { return fork_generation.load(std::memory_order_relaxed) != generation; }

  std::atomic<std::uint64_t>& readers;
  const std::atomic<std::uint64_t>& fork_generation;
  const std::uint64_t generation;
};

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
  // `item` is moodycamel's own slot of the pointer (it moves from it), so `&item + 1` is the next slot.
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

// Takes up to `want` pointers off `queue` into `batch`. Flattened: moodycamel's bulk dequeue takes the
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
