// cleanup/wakeup_signal.cc — the wake-up signal's eventfds: see wakeup_signal.h.

#include "cleanup/wakeup_signal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cleanup/fatal.h"

namespace reclaim {

namespace {

int make_eventfd() noexcept {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) die("eventfd() failed");
  return fd;
}

// Puts a fresh eventfd behind the descriptor number `fd` (fork child).
void replace_eventfd(int fd) noexcept {
  const int fresh = make_eventfd();
  if (::dup3(fresh, fd, O_CLOEXEC) < 0) die("dup3() of an eventfd failed after fork");
  ::close(fresh);
}

// Reads a non-blocking eventfd's count, leaving it unreadable (EAGAIN when it already was: fine). The
// result is of no use, but glibc marks read() as not to be ignored, and a cast to void does not silence
// GCC about that.
void empty_eventfd(int fd) noexcept {
  std::uint64_t count;
  const ssize_t got = ::read(fd, &count, sizeof count);
  static_cast<void>(got);
}

bool write_one(int fd) noexcept {
  const std::uint64_t one = 1;
  return ::write(fd, &one, sizeof one) == sizeof one;
}

}  // namespace

WakeupSignal::WakeupSignal() noexcept : wakeup_fd_(make_eventfd()), closed_fd_(make_eventfd()) {}

WakeupSignal::~WakeupSignal() {
  ::close(wakeup_fd_);
  ::close(closed_fd_);
}

void WakeupSignal::count_write() noexcept { writes_.fetch_add(1, std::memory_order_relaxed); }

__attribute__((noinline)) void WakeupSignal::raise() noexcept {
  if (signaled_.exchange(true, std::memory_order_acq_rel)) return;  // another push won the edge
  if (write_one(wakeup_fd_)) count_write();
}

void WakeupSignal::lower() noexcept {
  empty_eventfd(wakeup_fd_);
  signaled_.store(false, std::memory_order_seq_cst);
}

void WakeupSignal::make_unreadable() noexcept { empty_eventfd(wakeup_fd_); }

void WakeupSignal::mark_closed() noexcept { (void)write_one(closed_fd_); }

bool WakeupSignal::wait(int extra_fd, int timeout_ms) const noexcept {
  // poll(2) ignores entries with a negative fd.
  struct pollfd waiters[3] = {{wakeup_fd_, POLLIN, 0}, {closed_fd_, POLLIN, 0}, {extra_fd, POLLIN, 0}};
  if (::poll(waiters, 3, timeout_ms) <= 0) return false;
  for (const pollfd& waiter : waiters) {
    if ((waiter.revents & POLLIN) != 0) return true;
  }
  return false;
}

void WakeupSignal::reset_after_fork() noexcept {
  replace_eventfd(wakeup_fd_);
  replace_eventfd(closed_fd_);
  signaled_.store(false, std::memory_order_relaxed);
}

}  // namespace reclaim
