// cleanup/storage_set.h — the storages a ReclaimQueue's drains read (the current one, the previous one a
// failed trim left, the front of what drains requeued) and the guard that keeps trim() from freeing one that is
// being read (StorageReader). Internal to cleanup/ (a member of ReclaimQueue).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace reclaim {

struct QueueStorage;  // queue_storage.h
struct FrontStorage;  // queue_storage.h

class StorageSet {
 public:
  // Set in readers_ while a trim() replaces a storage.
  static constexpr std::uint64_t kTrimming = std::uint64_t{1} << 63;

  // A current storage of `reserved_capacity` pointers and an empty front. Allocates; aborts the process
  // if it cannot. Not thread-safe: construct before publishing the queue.
  explicit StorageSet(std::size_t reserved_capacity) noexcept;
  // Frees every storage. Only once no thread can reach the queue (and the lanes' tokens are unbound).
  ~StorageSet();
  StorageSet(const StorageSet&) = delete;
  StorageSet& operator=(const StorageSet&) = delete;

  // The current storage as a push loads it, after taking its lane (seq_cst, against trim()'s exchange:
  // the push sees the new storage, or trim() waits for its lane). Any thread; never blocks.
  QueueStorage* current_for_push() const noexcept { return current_.load(std::memory_order_seq_cst); }
  // For a reader (neither storage changes while it is in). Any thread; never blocks.
  QueueStorage* current() const noexcept { return current_.load(std::memory_order_relaxed); }
  QueueStorage* previous() const noexcept { return previous_.load(std::memory_order_relaxed); }
  FrontStorage* front() const noexcept { return front_.load(std::memory_order_relaxed); }

  // Pointers in every storage (approximate while pushes and drains run). For a reader. Any thread.
  std::size_t stored_count() const noexcept;

  // trim(): true when the caller is now the only one in the storages (no reader, no other trim); then
  // readers wait until end_trim(). Any thread; never blocks.
  bool begin_trim() noexcept;
  void end_trim() noexcept { readers_.fetch_and(~kTrimming, std::memory_order_release); }
  // Inside a trim: makes `fresh` current (exchange, seq_cst) and returns the old one.
  QueueStorage* replace_current(QueueStorage* fresh) noexcept {
    return current_.exchange(fresh, std::memory_order_seq_cst);
  }
  // Inside a trim: the storage it could not empty (null: none). Drains and counts read it too.
  void set_previous(QueueStorage* storage) noexcept { previous_.store(storage, std::memory_order_relaxed); }

  // A storage of `reserved_capacity` pointers; aborts the process if it cannot allocate one. Any thread;
  // allocates, so never on the producer path.
  static QueueStorage* make_storage(std::size_t reserved_capacity) noexcept;
  // Frees a storage that no reader can reach any more (a trim's, after its readers left). Any thread.
  static void free_storage(QueueStorage* storage) noexcept;

  // How many fork resets this set has had. Any thread.
  std::uint64_t forks() const noexcept { return forks_.load(std::memory_order_relaxed); }

  // Fork child, single-threaded: the parent's storages and front are abandoned (never freed, never read:
  // a parent thread may have stopped anywhere inside them) and replaced by fresh ones; readers and trims
  // of parent threads are forgotten, and so is this thread's own reader (see StorageReader).
  void reset_after_fork(std::size_t reserved_capacity) noexcept;

 private:
  friend struct StorageReader;

  // Read by every push; replaced by trim() and by the fork reset.
  std::atomic<QueueStorage*> current_;
  // Bit 63 = a trim() is replacing a storage; the low bits count drains, closes and counter reads inside
  // the storages. A reader waits while the bit is set; trim() sets it only when no reader is in.
  alignas(64) mutable std::atomic<std::uint64_t> readers_{0};
  // A storage a trim() could not empty (out of memory while moving), until a later trim() empties and
  // frees it. Written only by trim() (readers excluded) and the fork reset; null almost always.
  std::atomic<QueueStorage*> previous_{nullptr};
  // What drains requeued: taken before the storages, so it keeps its place ahead of what arrived later.
  // Replaced (the old one abandoned: a parent thread may have held its lock) by the fork reset.
  std::atomic<FrontStorage*> front_{nullptr};
  // Bumped by the fork reset; read by readers (on a line of its own, not readers_', which every reader
  // writes).
  alignas(64) std::atomic<std::uint64_t> forks_{0};
};

// A drain, close or counter read inside the storage: counted in readers_, so that trim() never frees a
// storage someone is reading. Waits (yielding) while a trim replaces it: a trim runs no callback and its
// only wait is for a producer lane's holder, who never blocks, so the wait is short.
// A reader that outlives a fork (a finalizer run by its drain called fork(), and the child went on) was
// wiped out of readers_ by the child's reset: in the child it leaves without counting itself out.
struct StorageReader {
  explicit StorageReader(const StorageSet& storages) noexcept
      : readers(storages.readers_), forks_now(storages.forks_),
        forks(forks_now.load(std::memory_order_relaxed)) {
    for (;;) {
      const std::uint64_t before = readers.fetch_add(1, std::memory_order_acquire);
      if ((before & StorageSet::kTrimming) == 0) return;
      readers.fetch_sub(1, std::memory_order_relaxed);
      while ((readers.load(std::memory_order_acquire) & StorageSet::kTrimming) != 0) sched_yield();
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
  bool forked() const noexcept { return forks_now.load(std::memory_order_relaxed) != forks; }

  std::atomic<std::uint64_t>& readers;
  const std::atomic<std::uint64_t>& forks_now;
  const std::uint64_t forks;  // the fork resets before this reader came in
};

}  // namespace reclaim
