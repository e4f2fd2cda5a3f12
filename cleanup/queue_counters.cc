// cleanup/queue_counters.cc — the owner-side counters (queue_counters.h) and the conservation law on a
// CounterSnapshot (reclaim_queue.h), which has the layout of the ABI's reclaim_stats.

#include "cleanup/queue_counters.h"

#include <cstddef>

#include "cleanup/reclaim_queue.h"

namespace reclaim {

namespace {

// Raises `mark` to `seen` unless it is already higher. Any thread.
void raise_high_water(std::atomic<std::uint64_t>& mark, std::uint64_t seen) noexcept {
  std::uint64_t highest = mark.load(std::memory_order_relaxed);
  while (seen > highest && !mark.compare_exchange_weak(highest, seen, std::memory_order_relaxed)) {
  }
}

}  // namespace

void QueueCounters::note_pending(std::uint64_t seen) const noexcept {
  raise_high_water(max_pending_, seen);
  raise_high_water(pending_since_trim_, seen);
}

QueueCounters::DrainBuckets QueueCounters::drain_buckets() const noexcept {
  // released and returned first (acquire), taken last: every item they count was counted as taken
  // before, so the difference never goes below zero, and a settle (one add to released) moves an item
  // from in_drain to released in the same read.
  DrainBuckets buckets;
  buckets.released = released_.load(std::memory_order_acquire);
  const std::uint64_t returned = returned_.load(std::memory_order_acquire);
  const std::uint64_t taken = taken_.load(std::memory_order_relaxed);
  buckets.in_drain = taken > buckets.released + returned ? taken - buckets.released - returned : 0;
  return buckets;
}

void QueueCounters::reset_after_fork(std::uint64_t abandoned) noexcept {
  // A drain of the forking thread that goes on in the child settles what it had taken out of
  // abandoned_after_fork (settle(forked = true)).
  abandoned_after_fork_.store(abandoned, std::memory_order_relaxed);
  taken_.store(released_.load(std::memory_order_relaxed) + returned_.load(std::memory_order_relaxed),
               std::memory_order_relaxed);  // in_drain 0
  pending_since_trim_.store(0, std::memory_order_relaxed);
}

bool CounterSnapshot::conserved() const noexcept {
  const reclaim_stats c = as_c();
  return reclaim_stats_conserved(&c) != 0;
}

reclaim_stats CounterSnapshot::as_c() const noexcept {
  reclaim_stats c;
#define RECLAIM_COPY_FIELD_(name, description) c.name = name;
  RECLAIM_COUNTERS(RECLAIM_COPY_FIELD_)
#undef RECLAIM_COPY_FIELD_
  return c;
}

// CounterSnapshot and reclaim_stats come from one list; this pins that they also share a layout.
#define RECLAIM_SAME_OFFSET_(name, description)                                                  \
  static_assert(offsetof(CounterSnapshot, name) == offsetof(reclaim_stats, name),               \
                "CounterSnapshot and reclaim_stats differ at " #name);
RECLAIM_COUNTERS(RECLAIM_SAME_OFFSET_)
#undef RECLAIM_SAME_OFFSET_
static_assert(sizeof(CounterSnapshot) == sizeof(reclaim_stats), "CounterSnapshot mirrors reclaim_stats");

}  // namespace reclaim
