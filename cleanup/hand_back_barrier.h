// cleanup/hand_back_barrier.h — know when CUDA has handed back what was attached, without polling: epochs
// of attachments (as in RCU's grace periods), counted where the hand-back happens.
//
// An attachment (a payload given to CUDA that a CUDA thread will hand back later, in any order) takes a
// ticket with begin() before CUDA may run its hand-back, and gives it back with end() in the hand-back.
// Attachments are counted by epoch, in kSlots slots: the current epoch's slot takes new tickets. A waiter
// switches to a new epoch (a free slot) and waits until every slot holding an epoch it covers is empty;
// attachments made after the switch count in the new epoch and never delay it. A waiter covers the epochs
// up to the one current when it came, from `since` on (0: all; a mark() for "attached after the mark").
// When every slot is taken (kSlots epochs each still holding an attachment), a new epoch shares the
// youngest slot: a waiter covering that slot then also waits for what shares it (correct, maybe later).
// The end() that empties a slot other than the current one wakes the waiters: a futex wake when a thread
// sleeps, an eventfd write when an event loop listens; nothing when nobody waits.
//
// A done cell (a uint32_t in the attachment's own memory, 0 until handed back) lets one attachment be
// waited for alone: end() stores 1 into it and wakes the cells' sleepers, if any.
//
// One instance per ReclaimQueue (its close() closes the barrier; its fork reset resets it). Linux only
// (futex, eventfd).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace reclaim {

// Seconds as a barrier timeout: negative or NaN is no limit, and anything past about 292 years is too.
// Never blocks.
std::int64_t timeout_to_ns(double seconds) noexcept;

// CLOCK_MONOTONIC in nanoseconds: the clock of every barrier deadline. Any thread; never blocks.
std::int64_t monotonic_ns() noexcept;

class HandBackBarrier {
 public:
  // Tickets are slot numbers 0 .. kSlots - 1 (three bits with "none": graph/ carries them in a pointer's
  // low bits). kUncounted: an end() that counts nothing (a pointer that never got a ticket).
  static constexpr int kSlots = 7;
  static constexpr int kUncounted = -1;

  enum class WaitResult { kReached, kTimedOut, kClosed, kInterrupted };

  // What a waiter waits for: every attachment of an epoch in [since, until].
  struct Span {
    std::uint64_t since;
    std::uint64_t until;
  };

  HandBackBarrier() noexcept;
  ~HandBackBarrier();  // closes the listener eventfd, if one was made
  HandBackBarrier(const HandBackBarrier&) = delete;
  HandBackBarrier& operator=(const HandBackBarrier&) = delete;

  // --- attachments: any thread, CUDA's included, also during exit(); lock-free, never allocates --------

  // Counts one attachment in the current epoch; returns its ticket. Call before CUDA can run the
  // hand-back. Retries if a waiter switches epochs meanwhile; never blocks.
  int begin() noexcept;

  // The hand-back of `ticket` (or the undo of an attachment that CUDA never took); a slot already at zero
  // stays there (a fork child's parent ticket). Stores 1 into `done`
  // (may be null) after the count, so that a thread that sees it also sees the count. The caller must not
  // touch `done`'s memory afterwards if the store may let it be freed. Wakes sleepers only when this end()
  // empties a slot other than the current one (or stores a done cell that someone waits for): one futex
  // wake, plus one eventfd write when listeners are registered. Never blocks.
  void end(int ticket, std::atomic<std::uint32_t>* done) noexcept;

  // --- waiters: threads that may block (never CUDA's), usually with the GIL released --------------------

  // The current epoch, after switching to a new one: attachments whose begin() returns after this call
  // have this number or a higher one. Pass it as `since` to wait only for them. Takes the waiters' mutex
  // briefly (never held across a wait or a callback).
  std::uint64_t mark() noexcept;

  // Switches to a new epoch and returns what to wait for: everything whose begin() returned before this
  // call, from epoch `since` on. Takes the waiters' mutex briefly.
  Span request(std::uint64_t since) noexcept;

  // Non-blocking: true once no slot holds an attachment of an epoch in `span`.
  bool reached(const Span& span) const noexcept;

  // Blocks until `span` is reached (kReached), the barrier is closed (kClosed), `timeout_ns` passed
  // (kTimedOut; negative: no limit) or a signal interrupted the sleep (kInterrupted: the caller checks its
  // signals and calls again with what is left of its time). Sleeps on a futex that the emptying end()
  // wakes: no polling.
  WaitResult wait(const Span& span, std::int64_t timeout_ns) noexcept;

  // As wait(), until `*done` is non-zero (a done cell given to end()).
  WaitResult wait_cell(const std::atomic<std::uint32_t>& done, std::int64_t timeout_ns) noexcept;

  // Closes the barrier: every waiter whose wait is not over returns kClosed, now and later (a wait whose
  // span or done cell was already reached still returns kReached). Any thread; never blocks.
  void close() noexcept;
  bool is_closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }

  // The epoch that new attachments count in. Any thread; never blocks.
  std::uint64_t epoch() const noexcept { return current_.load(std::memory_order_seq_cst) >> kSlotBits; }

  // --- event loops: Python threads ---------------------------------------------------------------------

  // An eventfd that end() writes when it empties a slot while listeners are registered (made on first
  // call, non-blocking, close-on-exec; the number is stable for the life of the barrier, also across fork).
  // -1 if it cannot be made. Takes the waiters' mutex.
  int listener_fd() noexcept;
  // Registers / unregisters one listener (an event loop with a waiter). Register before checking
  // reached(), so that an end() in between writes the fd. Never blocks.
  void add_listener() noexcept { listeners_.fetch_add(1, std::memory_order_seq_cst); }
  void remove_listener() noexcept { listeners_.fetch_sub(1, std::memory_order_seq_cst); }
  // Empties the eventfd (a listener's read). Never blocks.
  void consume_listener_fd() noexcept;

  // --- diagnostics --------------------------------------------------------------------------------------

  struct Stats {
    std::uint64_t epoch;            // the current epoch
    std::uint64_t held;             // tickets not yet ended, all slots
    int slots_in_use;               // slots holding a ticket, the current one included
    std::uint64_t shared_slots;     // epochs that had to share a slot (every slot was taken)
    std::uint32_t sleepers;         // threads inside wait() or wait_cell() now
    std::uint64_t futex_wakes;      // futex wake calls made by end() and close()
    std::uint64_t listener_writes;  // eventfd writes made by end() and close()
  };
  // Any thread; never blocks.
  Stats stats() const noexcept;

  // How many fork resets this barrier's process has been through: an attachment made under another
  // number belongs to an ancestor process and is never handed back here. Any thread; never blocks.
  std::uint64_t forks() const noexcept { return forks_.load(std::memory_order_relaxed); }

  // Fork child, single-threaded: no tickets (the parent's attachments are never handed back here), open;
  // epochs go on from the parent's; the listener eventfd is replaced behind the same number.
  void reset_after_fork() noexcept;

 private:
  static constexpr int kSlotBits = 3;
  static constexpr std::uint64_t kSlotMask = (std::uint64_t{1} << kSlotBits) - 1;

  void switch_epoch_locked() noexcept;  // the waiters' mutex held
  // One ticket of `slot` ended (or, `undo`, a begin() that lost a race took its count back); wakes the
  // waiters if that emptied the slot, unless the slot was the current one holding only the current epoch.
  void release(int slot, bool undo) noexcept;
  void wake_sleepers(std::atomic<std::uint32_t>* generation) noexcept;
  void write_listener_fd() noexcept;
  WaitResult sleep(std::atomic<std::uint32_t>* generation, const std::atomic<std::uint32_t>* done,
                   const Span& span, std::int64_t timeout_ns) noexcept;

  // (epoch << kSlotBits) | slot: the current epoch and the slot that counts it. Stored by a switch
  // (seq_cst, the mutex held); begin() reads it before and after counting into the slot.
  alignas(64) std::atomic<std::uint64_t> current_{0};
  // Per slot: tickets not yet ended, and the oldest / newest epoch counted in it (written under the mutex
  // before the switch that makes the slot current; the oldest only when the slot was free).
  alignas(64) std::atomic<std::uint64_t> counts_[kSlots] = {};
  std::atomic<std::uint64_t> oldest_[kSlots] = {};
  std::atomic<std::uint64_t> newest_[kSlots] = {};
  std::atomic<bool> closed_{false};
  // Futex words (bumped only when someone sleeps) and the number of threads about to sleep.
  std::atomic<std::uint32_t> grace_generation_{0};
  std::atomic<std::uint32_t> cell_generation_{0};
  std::atomic<std::uint32_t> grace_sleepers_{0};
  std::atomic<std::uint32_t> cell_sleepers_{0};
  std::atomic<std::uint32_t> listeners_{0};
  std::atomic<int> listener_fd_{-1};
  std::atomic<std::uint64_t> futex_wakes_{0};
  std::atomic<std::uint64_t> listener_writes_{0};
  std::atomic<std::uint64_t> shared_slots_{0};
  std::atomic<std::uint64_t> forks_{0};
  std::mutex waiters_mutex_;  // serializes epoch switches and the fd's creation
};

}  // namespace reclaim
