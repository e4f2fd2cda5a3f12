// cleanup/wakeup_signal.h — a ReclaimQueue's wake-up signal: an eventfd readable while work is pending,
// set on the empty→non-empty edge (one write per edge), and a second eventfd readable for good once the
// queue is closed. Internal to cleanup/ (a member of ReclaimQueue; reclaim_queue.h says what each edge
// promises to users).
//
// The flag `signaled` and the fd move together except during a linger: the fd is emptied while the flag
// stays set, so that pushes skip the write until the lingering owner drains again. Clearing is a Dekker
// handshake with the push (the push's lane exchange is its barrier): lower() stores the flag, then the
// queue checks for pushes in flight and for stored items and re-raises (ReclaimQueue::clear_signal).
#pragma once

#include <atomic>
#include <cstdint>

namespace reclaim {

class WakeupSignal {
 public:
  // Creates both eventfds (non-blocking, close-on-exec); aborts the process if it cannot. Allocates.
  // Not thread-safe: construct before publishing the queue.
  WakeupSignal() noexcept;
  // Closes both eventfds. Only once no thread can reach the queue.
  ~WakeupSignal();
  WakeupSignal(const WakeupSignal&) = delete;
  WakeupSignal& operator=(const WakeupSignal&) = delete;

  // The flag as an empty drain reads it: false means nothing was signalled since the last clear.
  // Any thread; never blocks.
  bool is_set() const noexcept { return signaled_.load(std::memory_order_acquire); }

  // The flag as a push reads it, after its lane exchange (seq_cst: one side of the Dekker handshake).
  // Any thread; never blocks.
  bool seen_by_push() const noexcept { return signaled_.load(std::memory_order_seq_cst); }

  // Sets the flag and, if this call set it, writes the eventfd (the edge). Out of line: the push's rare
  // path. Any thread; never blocks (an eventfd write of 1 blocks only near a count of 2^64).
  void raise() noexcept;

  // Empties the eventfd, then clears the flag (seq_cst). The caller then checks for work that raced with
  // it and calls raise() if there is some. Owner threads; never blocks.
  void lower() noexcept;

  // Empties the eventfd and leaves the flag set (a linger: pushes skip the write). Owner threads.
  void make_unreadable() noexcept;

  // Makes the closed eventfd readable for good, so that every waiter returns. Any thread; never blocks.
  void mark_closed() noexcept;

  // poll(2) on the wake-up fd, the closed fd and `extra_fd` (negative: none) for up to `timeout_ms`
  // (negative: no limit). True when one is readable; false on timeout or EINTR.
  // Any thread; blocks up to `timeout_ms`.
  bool wait(int extra_fd, int timeout_ms) const noexcept;

  // The wake-up eventfd; stable for the life of the signal, across fork. Any thread.
  int fd() const noexcept { return wakeup_fd_; }

  // Writes to the wake-up fd so far (one per edge). Any thread; never blocks.
  std::uint64_t writes() const noexcept { return writes_.load(std::memory_order_relaxed); }

  // Fork child, single-threaded: new eventfds behind the same descriptor numbers (an event loop in the
  // child may have registered them; the inherited objects would wake the parent's waiters), flag clear.
  void reset_after_fork() noexcept;

 private:
  void count_write() noexcept;

  int wakeup_fd_;
  int closed_fd_;
  // True while the eventfd has been written and not yet cleared. Set by exchange on the edge (raise);
  // cleared by the draining owner (lower).
  alignas(64) std::atomic<bool> signaled_{false};
  // Relaxed fetch_add by whoever wrote the eventfd.
  std::atomic<std::uint64_t> writes_{0};
};

}  // namespace reclaim
