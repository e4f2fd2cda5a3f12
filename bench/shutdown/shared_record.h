// bench/shutdown/shared_record.h — what one child of the shutdown comparison saw, kept in a file-backed
// MAP_SHARED page that outlives the child however it dies: the harness (torture.py) reads it back with
// `_torture.read_shared(path)` after the child is gone.
//
// Every field is a relaxed atomic: the child updates them from any thread (native threads, exit handlers)
// and the harness reads them after the child exited. No Python here.

#pragma once

#include <atomic>
#include <cstdint>

namespace reclaim_shutdown {

constexpr int kMaxSlots = 64;

// One native thread's calls. Written only by that thread; read by the exit check in the same process and
// by the harness after the process is gone.
struct Slot {
  std::atomic<std::int64_t> pid;         // owner process; 0 = unused
  std::atomic<std::uint64_t> entered;    // calls begun
  std::atomic<std::uint64_t> returned;   // calls that came back
  std::atomic<std::uint64_t> finished;   // 1 once the thread ran out of items and returned normally
};

// The record's plain counters, each with the key read_shared() gives it.
#define RECLAIM_SHUTDOWN_COUNTERS(X)                                                             \
  X(given)          /* references handed to native threads (GIL held) */                         \
  X(released)       /* Token objects deallocated (any strategy) */                               \
  X(skipped)        /* B/C/D: calls that declined to touch Python (silent leak) */               \
  X(d_scheduled)    /* D: Py_AddPendingCall calls that succeeded */                              \
  X(d_drains)       /* D: pending-call drains that ran */                                        \
  X(burst_given)    /* exit burst: references armed */                                          \
  X(burst_entered)  /* exit burst: calls begun after Py_Finalize */                              \
  X(burst_returned) /* exit burst: calls that came back */                                       \
  X(killed)         /* threads that ended inside a call (unwound, not aborted) */                \
  X(stuck)          /* threads still inside one call after the exit grace period */             \
  X(exit_checked)   /* 1 once the exit check ran (exit() reached the C handlers) */

// cuda-reclaim's counters as of the end of Py_Finalize (strategy R), in this order.
constexpr const char* kFinalizedStatsKeys[] = {"handed_over", "released", "pending", "leaked_after_close",
                                               "abandoned_after_fork", "in_drain"};
constexpr int kFinalizedStats = sizeof kFinalizedStatsKeys / sizeof kFinalizedStatsKeys[0];

struct SharedRecord {
#define RECLAIM_SHUTDOWN_DECLARE(name) std::atomic<std::uint64_t> name;
  RECLAIM_SHUTDOWN_COUNTERS(RECLAIM_SHUTDOWN_DECLARE)
#undef RECLAIM_SHUTDOWN_DECLARE
  std::atomic<std::int64_t> fork_child_status;       // fork scenario: os.waitpid status of the child + 1
  std::atomic<std::uint64_t> finalized_stats_valid;  // R: 1 once finalized_stats is written
  std::atomic<std::uint64_t> finalized_stats[kFinalizedStats];
  std::atomic<std::uint32_t> next_slot;
  Slot slots[kMaxSlots];
};

// Maps the record file at `path` (created by the harness; grown here to the record's size, so a new file
// reads as all zeros). Returns nullptr with errno set on failure. Not thread-safe.
SharedRecord* map_shared_record(const char* path) noexcept;

// Unmaps a record from map_shared_record(). Not thread-safe.
void unmap_shared_record(SharedRecord* record) noexcept;

// Claims a free slot for the calling thread in `record` (nullptr when all are taken). Any thread.
Slot* claim_slot(SharedRecord* record) noexcept;

// The slots claimed so far (at most kMaxSlots). Any thread.
std::uint32_t slots_used(const SharedRecord& record) noexcept;

}  // namespace reclaim_shutdown
