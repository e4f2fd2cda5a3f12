// cleanup/hand_back_barrier.h — know when CUDA has handed back everything attached before a point, without
// polling: a grace period over attachments (as in RCU), counted where the hand-back happens.
//
// An attachment (a payload given to CUDA that a CUDA thread will hand back later, in any order) takes a
// ticket with begin() before CUDA may run its hand-back, and gives it back with end() in the hand-back.
// Tickets fall into two buckets, the current one and the one of the grace period in progress; one 64-bit
// word holds both counts and which bucket is current, so choosing the bucket and counting into it is one
// atomic step. A waiter starts a grace period by making the other bucket current (only once the previous
// period is over, so that bucket is empty); the period is over when the old bucket's count reaches zero,
// and the end() that takes it there wakes the waiters: a futex wake when a thread sleeps, an eventfd write
// when an event loop listens. Attachments that begin after the switch count in the new bucket and never
// delay it.
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

class HandBackBarrier {
 public:
  // begin()'s answer when a bucket holds kMaxPerBucket tickets: the attachment is not counted (its end()
  // must be given kUncounted) and no grace period waits for it.
  static constexpr int kUncounted = -1;
  static constexpr std::uint64_t kMaxPerBucket = (std::uint64_t{1} << 31) - 1;

  enum class WaitResult { kReached, kTimedOut, kClosed, kInterrupted };

  HandBackBarrier() noexcept = default;
  ~HandBackBarrier();  // closes the listener eventfd, if one was made
  HandBackBarrier(const HandBackBarrier&) = delete;
  HandBackBarrier& operator=(const HandBackBarrier&) = delete;

  // --- attachments: any thread, CUDA's included, also during exit(); lock-free, never allocates --------

  // Counts one attachment in the current bucket; returns its ticket (0 or 1), or kUncounted when the
  // bucket is full. Call before CUDA can run the hand-back. A compare-exchange loop; never blocks.
  int begin() noexcept;

  // The hand-back of `ticket` (or the undo of an attachment that CUDA never took). Stores 1 into `done`
  // (may be null) after the count, so that a thread that sees it also sees the grace period's progress.
  // The caller must not touch `done`'s memory afterwards if the store may let it be freed. Wakes
  // sleepers only when this end() finished a grace period (or stored a done cell that someone waits
  // for): one futex wake, plus one eventfd write when listeners are registered. Never blocks.
  void end(int ticket, std::atomic<std::uint32_t>* done) noexcept;

  // --- waiters: threads that may block (never CUDA's), usually with the GIL released --------------------

  // The grace period whose end means: everything whose begin() returned before this call was handed
  // back. Starts one if none is in progress; otherwise it is the next one (started by whoever sees the
  // current one end). Takes the waiters' mutex briefly (never held across a wait or a callback).
  std::uint64_t request() noexcept;

  // Non-blocking: starts grace period `target` if it is due (the previous one ended); true once it ended.
  bool advance(std::uint64_t target) noexcept;

  // Blocks until grace period `target` ended (kReached), the barrier is closed (kClosed), `timeout_ns`
  // passed (kTimedOut; negative: no limit) or a signal interrupted the sleep (kInterrupted: the caller
  // checks its signals and calls again with what is left of its time). Sleeps on a futex the ending
  // end() wakes: no polling.
  WaitResult wait(std::uint64_t target, std::int64_t timeout_ns) noexcept;

  // As wait(), until `*done` is non-zero (a done cell given to end()).
  WaitResult wait_cell(const std::atomic<std::uint32_t>& done, std::int64_t timeout_ns) noexcept;

  // Closes the barrier: every waiter returns kClosed, now and later. Any thread; never blocks.
  void close() noexcept;
  bool is_closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }

  // --- event loops: Python threads ---------------------------------------------------------------------

  // An eventfd that end() writes when a grace period ends while listeners are registered (made on first
  // call, non-blocking, close-on-exec; the number is stable for the life of the barrier, also across
  // fork). -1 if it cannot be made. Takes the waiters' mutex.
  int listener_fd() noexcept;
  // Registers / unregisters one listener (an event loop with a waiter). Register before checking
  // advance(), so that an end() in between writes the fd. Never blocks.
  void add_listener() noexcept { listeners_.fetch_add(1, std::memory_order_seq_cst); }
  void remove_listener() noexcept { listeners_.fetch_sub(1, std::memory_order_seq_cst); }
  // Empties the eventfd (a listener's read). Never blocks.
  void consume_listener_fd() noexcept;

  // --- diagnostics --------------------------------------------------------------------------------------

  struct Stats {
    std::uint64_t held[2];        // tickets in each bucket now
    int current;                  // the bucket begin() counts into
    std::uint64_t started;        // grace periods started
    std::uint64_t completed;      // grace periods ended
    std::uint64_t futex_wakes;    // futex wake calls made by end() and close()
    std::uint64_t listener_writes;  // eventfd writes made by end() and close()
  };
  // Any thread; never blocks.
  Stats stats() const noexcept;

  // Fork child, single-threaded: no tickets (the parent's attachments are never handed back here), no
  // grace period in progress, open; the listener eventfd is replaced behind the same number.
  void reset_after_fork() noexcept;

 private:
  void start_locked() noexcept;  // the waiters' mutex held; the previous grace period ended
  void grace_period_ended() noexcept;
  void wake_sleepers(std::atomic<std::uint32_t>* generation) noexcept;
  void write_listener_fd() noexcept;
  WaitResult sleep(std::atomic<std::uint32_t>* generation, std::atomic<std::uint32_t>* sleepers,
                   const std::atomic<std::uint32_t>* done, std::uint64_t target, std::int64_t timeout_ns) noexcept;

  // Bits 0–30: bucket 0's count; 31–61: bucket 1's; 63: the current bucket.
  alignas(64) std::atomic<std::uint64_t> word_{0};
  // Grace periods started / ended. started_ is stored before the switch it numbers; completed_ is stored
  // by the end() (or the switch) that finds the old bucket empty. Waiters read both; end() reads started_.
  alignas(64) std::atomic<std::uint64_t> started_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<bool> closed_{false};
  // Futex words (bumped only when someone sleeps) and the number of threads about to sleep on each.
  std::atomic<std::uint32_t> grace_generation_{0};
  std::atomic<std::uint32_t> grace_sleepers_{0};
  std::atomic<std::uint32_t> cell_generation_{0};
  std::atomic<std::uint32_t> cell_sleepers_{0};
  std::atomic<std::uint32_t> listeners_{0};
  std::atomic<int> listener_fd_{-1};
  std::atomic<std::uint64_t> futex_wakes_{0};
  std::atomic<std::uint64_t> listener_writes_{0};
  std::mutex waiters_mutex_;  // serializes grace-period starts and the fd's creation
};

}  // namespace reclaim
