// cleanup/queue_counters.h — the counters a ReclaimQueue's owner side writes (drains, close, trim, the
// fork reset) and the rare-path `rejected`; the push counters live in the producer lanes. Internal to
// cleanup/ (a member of ReclaimQueue); ReclaimQueue::snapshot() sums both into a CounterSnapshot.
//
// in_drain is derived, taken - released - returned, so that settling (released += n) is one step a
// snapshot cannot catch half-way: taken counts what drains dequeued (relaxed, after the dequeue),
// returned what they requeued unreleased. released and returned are written with release and read
// (acquire) before taken, so a reader never sees more settled than taken.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace reclaim {

class QueueCounters {
 public:
  // released and in_drain, read together (see the header comment).
  struct DrainBuckets {
    std::uint64_t released = 0;
    std::uint64_t in_drain = 0;
  };

  // Every function: any thread (the fork reset: the fork child only); never blocks; never allocates.

  // Pushes (or requeues) whose pointers could not be stored.
  void count_rejected(std::uint64_t count) noexcept { rejected_.fetch_add(count, std::memory_order_relaxed); }
  std::uint64_t rejected() const noexcept { return rejected_.load(std::memory_order_relaxed); }

  // A drain's dequeue: `count` taken (a non-empty drain is counted apart, count_nonempty_drain()).
  void count_taken(std::uint64_t count) noexcept { taken_.fetch_add(count, std::memory_order_relaxed); }
  void count_nonempty_drain() noexcept { nonempty_drains_.fetch_add(1, std::memory_order_relaxed); }

  // Takes `count` taken items out of in_drain, as released (`released` true) or returned unreleased; or,
  // when a fork reset came in between (`forked`: it counted them as abandoned), out of
  // abandoned_after_fork.
  void settle(std::uint64_t count, bool forked, bool released) noexcept {
    if (forked) {
      // The reset set in_drain to 0: out of abandoned, and taken keeps in_drain at 0 (released or
      // returned grows by as much). Out of abandoned first: never in two buckets.
      abandoned_after_fork_.fetch_sub(count, std::memory_order_relaxed);
      taken_.fetch_add(count, std::memory_order_relaxed);
    }
    (released ? released_ : returned_).fetch_add(count, std::memory_order_release);
  }

  // Raises max_pending and the high-water mark since the last trim to `seen`.
  void note_pending(std::uint64_t seen) const noexcept;
  // True when pending exceeded `capacity` since the last trim (trim_would_help).
  bool exceeded_since_trim(std::size_t capacity) const noexcept {
    return pending_since_trim_.load(std::memory_order_relaxed) > capacity;
  }
  // A trim moved everything into a fresh storage: the high-water mark starts again; then count it.
  void forget_pending_since_trim() noexcept { pending_since_trim_.store(0, std::memory_order_relaxed); }
  void count_trim() noexcept { trims_.fetch_add(1, std::memory_order_relaxed); }

  DrainBuckets drain_buckets() const noexcept;
  std::uint64_t released_relaxed() const noexcept { return released_.load(std::memory_order_relaxed); }
  std::uint64_t abandoned_after_fork() const noexcept {
    return abandoned_after_fork_.load(std::memory_order_relaxed);
  }
  std::uint64_t nonempty_drains() const noexcept { return nonempty_drains_.load(std::memory_order_relaxed); }
  std::uint64_t max_pending() const noexcept { return max_pending_.load(std::memory_order_relaxed); }
  std::uint64_t trims() const noexcept { return trims_.load(std::memory_order_relaxed); }

  // Fork child, single-threaded: `abandoned` becomes abandoned_after_fork (what the parent had accepted
  // and not released or leaked, in_drain included), in_drain becomes 0, and the trim mark starts again.
  void reset_after_fork(std::uint64_t abandoned) noexcept;

 private:
  // Rare path: relaxed fetch_add by whoever could not store.
  alignas(64) std::atomic<std::uint64_t> rejected_{0};
  // Owner side: written by drains, close and the fork reset (see the header comment for the orderings).
  alignas(64) std::atomic<std::uint64_t> released_{0};
  std::atomic<std::uint64_t> taken_{0};
  std::atomic<std::uint64_t> returned_{0};
  std::atomic<std::uint64_t> nonempty_drains_{0};
  std::atomic<std::uint64_t> abandoned_after_fork_{0};
  std::atomic<std::uint64_t> trims_{0};
  // High-water marks, raised (relaxed CAS) by drains, close and counter reads.
  mutable std::atomic<std::uint64_t> max_pending_{0};
  mutable std::atomic<std::uint64_t> pending_since_trim_{0};
};

}  // namespace reclaim
