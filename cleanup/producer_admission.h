// cleanup/producer_admission.h — who may put a pointer into a ReclaimQueue: its fixed producer lanes, the
// closed bit, and the admission count of the rare pushes that found every lane taken. Internal to
// cleanup/ (a member of ReclaimQueue).
//
// A push that races with close() ends in exactly one bucket: the push takes a lane (an atomic exchange),
// then reads the closed bit; close() sets the bit, then waits until every lane it finds taken is free
// again. Both are seq_cst, so either the push sees the bit and only counts a leak, or close() sees the
// lane taken and waits for the push's enqueue. A lane-less push's admission (fetch_add, seq_cst) plays the
// part of the exchange; close() and trim() wait for its completion count instead.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace reclaim {

struct ProducerLane;  // producer_lane.h

// How a queue's producer lanes are used (ReclaimQueue::producer_use()).
struct ProducerUse {
  std::size_t lane_count = 0;          // QueueOptions::producer_lanes
  std::size_t lanes_used = 0;          // lanes whose producer exists (each holds its blocks for reuse)
  std::uint64_t overflow_pushes = 0;   // pushes that found every lane taken and used a per-thread producer
};

class ProducerAdmission {
 public:
  static constexpr std::uint64_t kClosedBit = std::uint64_t{1} << 63;

  // What the lanes counted (see ProducerLane), summed, and whether one was taken during the sum.
  struct LaneTotals {
    std::uint64_t admitted = 0;
    std::uint64_t leaked = 0;
    bool any_taken = false;
  };

  // `producer_lanes` rounded up to a power of two (at least 1). Allocates; aborts the process if it
  // cannot. Not thread-safe: construct before publishing the queue.
  explicit ProducerAdmission(std::size_t producer_lanes) noexcept;
  // Destroys the lanes; their tokens must already be unbound (ProducerLane::unbind_from).
  ~ProducerAdmission();
  ProducerAdmission(const ProducerAdmission&) = delete;
  ProducerAdmission& operator=(const ProducerAdmission&) = delete;

  // A free lane, now the caller's (taken with exchange, seq_cst: the push's one barrier), or null
  // when every lane is taken at this instant (never waits: a holder may be preempted). Defined in
  // producer_lane.h, inlined into push. Any thread; never blocks.
  inline ProducerLane* take_lane() noexcept;

  // Read by a lane holder right after taking its lane (seq_cst, against close()'s CAS). Any thread.
  bool closed_for_lane_holder() const noexcept {
    return (admissions_.load(std::memory_order_seq_cst) & kClosedBit) != 0;
  }

  // A lane-less push: counts it (overflow_pushes) and admits it; true when the queue was closed (a leak,
  // counted by the admission itself, and never a completion). Any thread; never blocks.
  bool admit_laneless() noexcept;
  // A lane-less push admitted while open is done with the storage (stored or rejected). Release: its
  // bucket updates are visible to whoever acquires the completion count.
  void complete_laneless() noexcept { completions_.fetch_add(1, std::memory_order_release); }

  // Sets the closed bit (idempotent) and records the lane-less admission count at that moment. Closers
  // take turns; pushes never wait on that. Owner threads; may yield.
  void close() noexcept;
  bool is_closed() const noexcept { return (admissions_.load(std::memory_order_acquire) & kClosedBit) != 0; }

  // True when a push may be between its signal check and its enqueue (lane taken, or an open lane-less
  // admission not yet complete). For the drain that clears the wake-up signal. Any thread; never blocks.
  bool push_may_be_in_flight() const noexcept;
  // Waits until no push is between its admission check and its enqueue (close). Owner threads; yields
  // only while a push is in flight (pushes never block, so the wait is short).
  void wait_for_pushes_in_flight() noexcept;
  // Waits until every lane-less push admitted before the call is done with the storage it loaded
  // (close, trim). Owner threads; yields only while such a push is in flight.
  void wait_for_laneless_pushes_in_flight() const noexcept;

  // For counter reads. Any thread; never blocks.
  LaneTotals lane_totals() const noexcept;
  std::uint64_t admissions() const noexcept { return admissions_.load(std::memory_order_seq_cst); }
  std::uint64_t laneless_completions() const noexcept { return completions_.load(std::memory_order_acquire); }
  static std::uint64_t laneless_admitted(std::uint64_t admissions) noexcept { return admissions & ~kClosedBit; }
  // Lane-less leaks after close (all closes so far) for the admission word `admissions`, as the caller
  // loaded it; a load that saw the closed bit makes the count recorded at close visible.
  std::uint64_t laneless_leaked(std::uint64_t admissions) const noexcept;
  ProducerUse producer_use() const noexcept;

  // The lanes, for trim() (which takes each in turn) and the destructor's unbinding. Any thread.
  std::size_t lane_count() const noexcept { return lane_mask_ + 1; }
  inline ProducerLane& lane(std::size_t index) noexcept;  // producer_lane.h

  // Fork child, single-threaded: open again, every lane free and without a token (its producer belongs
  // to the abandoned storage), cut-off lane-less pushes done. `laneless_leaked` is laneless_leaked() of
  // the admission word before the reset, which it keeps.
  void reset_after_fork(std::uint64_t laneless_leaked) noexcept;

 private:
  ProducerLane* lanes_;  // lane_mask_ + 1 lanes, allocated with the queue, never replaced
  std::size_t lane_mask_;
  // Bit 63 = closed (set by close() with a CAS, seq_cst); the low bits count only the lane-less pushes
  // (fetch_add, seq_cst, so each is ordered before or after the close).
  alignas(64) std::atomic<std::uint64_t> admissions_{0};
  // fetch_add(release) when a lane-less push admitted while open is done; close() and trim() wait until
  // it catches up with the admissions that can complete, never for a count read once.
  alignas(64) std::atomic<std::uint64_t> completions_{0};
  // The lane-less admission count when close() set the closed bit; stored (relaxed) just before the CAS
  // that sets the bit, read by whoever has seen the bit.
  alignas(64) std::atomic<std::uint64_t> admitted_at_close_{0};
  // Held (test_and_set acquire / clear release) by close() while it sets the bit, so that concurrent
  // closers cannot interleave their admitted_at_close_ stores. Never touched by push(). Cleared by the
  // fork reset: a closer of the parent may have held it at the moment of fork.
  std::atomic_flag closing_ = ATOMIC_FLAG_INIT;
  // Lane-less leaks after earlier closes; written only by the fork reset (single-threaded).
  std::atomic<std::uint64_t> laneless_leaked_before_reopen_{0};
  // Relaxed fetch_add by each lane-less push.
  std::atomic<std::uint64_t> overflow_pushes_{0};
};

}  // namespace reclaim
