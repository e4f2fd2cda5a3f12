// cleanup/storage_set.cc — creating, counting and replacing a queue's storages: see storage_set.h.

#include "cleanup/storage_set.h"

#include <cstdlib>
#include <new>

#include "cleanup/fatal.h"
#include "cleanup/queue_storage.h"

namespace reclaim {

namespace {

FrontStorage* make_front() noexcept {
  try {
    return new FrontStorage();
  } catch (...) {  // std::bad_alloc: a queue that cannot start is not worth running, as in make_storage
    die("cannot allocate the reclaim queue");
  }
}

}  // namespace

QueueStorage* StorageSet::make_storage(std::size_t reserved_capacity) noexcept {
  // Construction allocates the block pool through QueueTraits::malloc (std::malloc in production); a
  // queue that cannot reserve at start-up is not worth running with.
  void* memory = std::malloc(sizeof(QueueStorage));
  if (memory == nullptr) die("cannot allocate the reclaim queue");
  return new (memory) QueueStorage(reserved_capacity);
}

void StorageSet::free_storage(QueueStorage* storage) noexcept {
  storage->~QueueStorage();
  std::free(storage);
}

StorageSet::StorageSet(std::size_t reserved_capacity) noexcept : current_(make_storage(reserved_capacity)) {
  front_.store(make_front(), std::memory_order_relaxed);
}

StorageSet::~StorageSet() {
  free_storage(current_.load(std::memory_order_relaxed));
  QueueStorage* previous = previous_.load(std::memory_order_relaxed);  // a trim that ran out of memory
  if (previous != nullptr) free_storage(previous);
  delete front_.load(std::memory_order_relaxed);
}

std::size_t StorageSet::stored_count() const noexcept {
  std::size_t count = current_.load(std::memory_order_seq_cst)->queue.size_approx();
  const QueueStorage* previous = previous_.load(std::memory_order_relaxed);
  if (previous != nullptr) count += previous->queue.size_approx();
  return count + front_.load(std::memory_order_relaxed)->size.load(std::memory_order_relaxed);
}

bool StorageSet::begin_trim() noexcept {
  // Only when no reader is in the storage (possibly the caller's own thread, from a release action:
  // waiting for it would wait forever) and no other trim runs.
  std::uint64_t idle = 0;
  return readers_.compare_exchange_strong(idle, kTrimming, std::memory_order_acquire, std::memory_order_relaxed);
}

void StorageSet::reset_after_fork(std::size_t reserved_capacity) noexcept {
  readers_.store(0, std::memory_order_relaxed);  // readers and trims of parent threads are gone
  // So is this thread's own reader, should a finalizer run by its drain have forked: see StorageReader.
  forks_.fetch_add(1, std::memory_order_relaxed);
  previous_.store(nullptr, std::memory_order_relaxed);
  current_.store(make_storage(reserved_capacity), std::memory_order_relaxed);
  front_.store(make_front(), std::memory_order_relaxed);  // the parent's requeued items are abandoned too
}

}  // namespace reclaim
