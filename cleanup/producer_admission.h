// cleanup/producer_admission.h — who may put a pointer into a ReclaimQueue: its fixed producer slots, the
// closed bit, and the admission count of the rare pushes that found every slot held. Internal to
// cleanup/ (a member of ReclaimQueue).
//
// A push that races with close() ends in exactly one bucket: the push takes a slot (an atomic exchange),
// then reads the closed bit; close() sets the bit, then waits until every slot it finds held is given
// back. Both are seq_cst, so either the push sees the bit and only counts a leak, or close() sees the
// slot held and waits for the push's enqueue. A slot-less push's admission (fetch_add, seq_cst) plays the
// part of the exchange; close() and trim() wait for its completion count instead.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace reclaim {

struct ProducerSlot;  // producer_slot.h

// How a queue's producer slots are used (ReclaimQueue::producer_use()).
struct ProducerUse {
  std::size_t slot_count = 0;          // QueueOptions::producer_slots
  std::size_t slots_used = 0;          // slots whose producer exists (each holds its blocks for reuse)
  std::uint64_t overflow_pushes = 0;   // pushes that found every slot held and used a per-thread producer
};

class ProducerAdmission {
 public:
  static constexpr std::uint64_t kClosedBit = std::uint64_t{1} << 63;

  // What the slots counted (see ProducerSlot), summed, and whether one was held during the sum.
  struct SlotTotals {
    std::uint64_t admitted = 0;
    std::uint64_t leaked = 0;
    bool any_held = false;
  };

  // `producer_slots` rounded up to a power of two (at least 1). Allocates; aborts the process if it
  // cannot. Not thread-safe: construct before publishing the queue.
  explicit ProducerAdmission(std::size_t producer_slots) noexcept;
  // Destroys the slots; their tokens must already be unbound (ProducerSlot::unbind_from).
  ~ProducerAdmission();
  ProducerAdmission(const ProducerAdmission&) = delete;
  ProducerAdmission& operator=(const ProducerAdmission&) = delete;

  // A free slot, now held by the caller (taken with exchange, seq_cst: the push's one barrier), or null
  // when every slot is held at this instant (never waits: a holder may be preempted). Defined in
  // producer_slot.h, inlined into push. Any thread; never blocks.
  inline ProducerSlot* take_slot() noexcept;

  // Read by a slot holder right after taking its slot (seq_cst, against close()'s CAS). Any thread.
  bool closed_for_slot_holder() const noexcept {
    return (admissions_.load(std::memory_order_seq_cst) & kClosedBit) != 0;
  }

  // A slot-less push: counts it (overflow_pushes) and admits it; true when the queue was closed (a leak,
  // counted by the admission itself, and never a completion). Any thread; never blocks.
  bool admit_slotless() noexcept;
  // A slot-less push admitted while open is done with the storage (stored or rejected). Release: its
  // bucket updates are visible to whoever acquires the completion count.
  void complete_slotless() noexcept { completions_.fetch_add(1, std::memory_order_release); }

  // Sets the closed bit (idempotent) and records the slot-less admission count at that moment. Closers
  // take turns; pushes never wait on that. Owner threads; may yield.
  void close() noexcept;
  bool is_closed() const noexcept { return (admissions_.load(std::memory_order_acquire) & kClosedBit) != 0; }

  // True when a push may be between its signal check and its enqueue (slot held, or an open slot-less
  // admission not yet complete). For the drain that clears the wake-up signal. Any thread; never blocks.
  bool push_may_be_in_flight() const noexcept;
  // Waits until no push is between its admission check and its enqueue (close). Owner threads; yields
  // only while a push is in flight (pushes never block, so the wait is short).
  void wait_for_pushes_in_flight() noexcept;
  // Waits until every slot-less push admitted before the call is done with the storage it loaded
  // (close, trim). Owner threads; yields only while such a push is in flight.
  void wait_for_slotless_pushes_in_flight() const noexcept;

  // For counter reads. Any thread; never blocks.
  SlotTotals slot_totals() const noexcept;
  std::uint64_t admissions() const noexcept { return admissions_.load(std::memory_order_seq_cst); }
  std::uint64_t slotless_completions() const noexcept { return completions_.load(std::memory_order_acquire); }
  static std::uint64_t slotless_admitted(std::uint64_t admissions) noexcept { return admissions & ~kClosedBit; }
  // Slot-less leaks after close (all closes so far) for the admission word `admissions`, as the caller
  // loaded it; a load that saw the closed bit makes the count recorded at close visible.
  std::uint64_t slotless_leaked(std::uint64_t admissions) const noexcept;
  ProducerUse producer_use() const noexcept;

  // The slots, for trim() (which takes each in turn) and the destructor's unbinding. Any thread.
  std::size_t slot_count() const noexcept { return slot_mask_ + 1; }
  inline ProducerSlot& slot(std::size_t index) noexcept;  // producer_slot.h

  // Fork child, single-threaded: open again, every slot free and without a token (its producer belongs
  // to the abandoned storage), cut-off slot-less pushes done. `slotless_leaked` is slotless_leaked() of
  // the admission word before the reset, which it keeps.
  void reset_after_fork(std::uint64_t slotless_leaked) noexcept;

 private:
  ProducerSlot* slots_;  // slot_mask_ + 1 slots, allocated with the queue, never replaced
  std::size_t slot_mask_;
  // Bit 63 = closed (set by close() with a CAS, seq_cst); the low bits count only the slot-less pushes
  // (fetch_add, seq_cst, so each is ordered before or after the close).
  alignas(64) std::atomic<std::uint64_t> admissions_{0};
  // fetch_add(release) when a slot-less push admitted while open is done; close() and trim() wait until
  // it catches up with the admissions that can complete, never for a count read once.
  alignas(64) std::atomic<std::uint64_t> completions_{0};
  // The slot-less admission count when close() set the closed bit; stored (relaxed) just before the CAS
  // that sets the bit, read by whoever has seen the bit.
  alignas(64) std::atomic<std::uint64_t> admitted_at_close_{0};
  // Held (test_and_set acquire / clear release) by close() while it sets the bit, so that concurrent
  // closers cannot interleave their admitted_at_close_ stores. Never touched by push(). Cleared by the
  // fork reset: a closer of the parent may have held it at the moment of fork.
  std::atomic_flag closing_ = ATOMIC_FLAG_INIT;
  // Slot-less leaks after earlier closes; written only by the fork reset (single-threaded).
  std::atomic<std::uint64_t> slotless_leaked_before_reopen_{0};
  // Relaxed fetch_add by each slot-less push.
  std::atomic<std::uint64_t> overflow_pushes_{0};
};

}  // namespace reclaim
