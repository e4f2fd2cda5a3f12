// cleanup/hand_back_barrier.cc — see hand_back_barrier.h.

#include "cleanup/hand_back_barrier.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <new>

namespace reclaim {
namespace {

constexpr int kCountBits = 31;
constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;
constexpr std::uint64_t kCurrentBit = std::uint64_t{1} << 63;

int current_of(std::uint64_t word) noexcept { return (word & kCurrentBit) != 0 ? 1 : 0; }
std::uint64_t count_of(std::uint64_t word, int bucket) noexcept {
  return (word >> (bucket * kCountBits)) & kCountMask;
}
std::uint64_t unit_of(int bucket) noexcept { return std::uint64_t{1} << (bucket * kCountBits); }

std::uint32_t* futex_address(std::atomic<std::uint32_t>* word) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex is a plain word");
  return reinterpret_cast<std::uint32_t*>(word);
}

std::int64_t now_ns() noexcept {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

}  // namespace

std::int64_t timeout_to_ns(double seconds) noexcept {
  if (!(seconds >= 0)) return -1;  // negative or NaN
  if (seconds >= 9.2e9) return -1;  // beyond int64 nanoseconds: as good as no limit
  return static_cast<std::int64_t>(seconds * 1e9);
}

HandBackBarrier::~HandBackBarrier() {
  const int fd = listener_fd_.load(std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
}

int HandBackBarrier::begin() noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  for (;;) {
    const int bucket = current_of(word);
    if (count_of(word, bucket) == kMaxPerBucket) return kUncounted;
    if (word_.compare_exchange_weak(word, word + unit_of(bucket), std::memory_order_seq_cst,
                                    std::memory_order_relaxed)) {
      return bucket;
    }
  }
}

void HandBackBarrier::end(int ticket, std::atomic<std::uint32_t>* done) noexcept {
  bool ended = false;
  if (ticket == 0 || ticket == 1) {
    const std::uint64_t before = word_.fetch_sub(unit_of(ticket), std::memory_order_seq_cst);
    // The old bucket (not the current one) emptied: the grace period in progress is over. Nobody can
    // start another before completed_ is stored below, so started_ still numbers this one.
    ended = current_of(before) != ticket && count_of(before, ticket) == 1;
    if (ended) completed_.store(started_.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  }
  if (done != nullptr) {
    done->store(1, std::memory_order_seq_cst);
    // From here `done` may be freed; only the barrier's own words are touched.
    if (cell_sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers(&cell_generation_);
  }
  if (ended) grace_period_ended();
}

void HandBackBarrier::grace_period_ended() noexcept {
  if (grace_sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers(&grace_generation_);
  if (listeners_.load(std::memory_order_seq_cst) != 0) write_listener_fd();
}

void HandBackBarrier::wake_sleepers(std::atomic<std::uint32_t>* generation) noexcept {
  generation->fetch_add(1, std::memory_order_seq_cst);
  futex_wakes_.fetch_add(1, std::memory_order_relaxed);
  (void)syscall(SYS_futex, futex_address(generation), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void HandBackBarrier::write_listener_fd() noexcept {
  const int fd = listener_fd_.load(std::memory_order_acquire);
  if (fd < 0) return;
  const std::uint64_t one = 1;
  ssize_t wrote;
  do {
    wrote = ::write(fd, &one, sizeof one);
  } while (wrote < 0 && errno == EINTR);
  listener_writes_.fetch_add(1, std::memory_order_relaxed);
}

void HandBackBarrier::start_locked() noexcept {
  const std::uint64_t next = started_.load(std::memory_order_relaxed) + 1;
  started_.store(next, std::memory_order_seq_cst);
  const std::uint64_t before = word_.fetch_xor(kCurrentBit, std::memory_order_seq_cst);
  if (count_of(before, current_of(before)) == 0) {
    // Nothing was held in the bucket that became old: the period ends as it starts.
    completed_.store(next, std::memory_order_seq_cst);
    grace_period_ended();
  }
}

std::uint64_t HandBackBarrier::request() noexcept {
  std::lock_guard<std::mutex> lock(waiters_mutex_);
  const std::uint64_t started = started_.load(std::memory_order_seq_cst);
  if (completed_.load(std::memory_order_seq_cst) == started) {
    start_locked();
    return started + 1;
  }
  // A period is in progress: what began since it started is in the current bucket, so the next one.
  return started + 1;
}

bool HandBackBarrier::advance(std::uint64_t target) noexcept {
  if (completed_.load(std::memory_order_seq_cst) >= target) return true;
  const auto due = [&] {
    const std::uint64_t started = started_.load(std::memory_order_seq_cst);
    return started < target && completed_.load(std::memory_order_seq_cst) == started;
  };
  if (due()) {
    std::lock_guard<std::mutex> lock(waiters_mutex_);
    if (due()) start_locked();
  }
  return completed_.load(std::memory_order_seq_cst) >= target;
}

HandBackBarrier::WaitResult HandBackBarrier::sleep(std::atomic<std::uint32_t>* generation,
                                                   std::atomic<std::uint32_t>* sleepers,
                                                   const std::atomic<std::uint32_t>* done, std::uint64_t target,
                                                   std::int64_t timeout_ns) noexcept {
  const std::int64_t deadline = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
  const auto reached = [&] {
    return done != nullptr ? done->load(std::memory_order_seq_cst) != 0 : advance(target);
  };
  for (;;) {
    if (reached()) return WaitResult::kReached;
    if (is_closed()) return WaitResult::kClosed;
    std::int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - now_ns();
      if (left <= 0) return WaitResult::kTimedOut;
    }
    // Announce the sleep, then read the generation, then look again: an end() that comes after the look
    // sees the sleeper and bumps the generation, so the futex wait returns at once.
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = generation->load(std::memory_order_seq_cst);
    long result = 0;
    int error = 0;
    const std::uint64_t started = started_.load(std::memory_order_seq_cst);
    const bool due = done == nullptr && started < target && completed_.load(std::memory_order_seq_cst) == started;
    if (!due && !reached() && !is_closed()) {
      timespec relative;
      timespec* timeout = nullptr;
      if (left >= 0) {
        relative.tv_sec = static_cast<time_t>(left / 1000000000);
        relative.tv_nsec = static_cast<long>(left % 1000000000);
        timeout = &relative;
      }
      result = syscall(SYS_futex, futex_address(generation), FUTEX_WAIT_PRIVATE, seen, timeout, nullptr, 0);
      error = result < 0 ? errno : 0;
    }
    sleepers->fetch_sub(1, std::memory_order_seq_cst);
    if (result < 0 && error == EINTR) {
      if (reached()) return WaitResult::kReached;
      return WaitResult::kInterrupted;
    }
  }
}

HandBackBarrier::WaitResult HandBackBarrier::wait(std::uint64_t target, std::int64_t timeout_ns) noexcept {
  return sleep(&grace_generation_, &grace_sleepers_, nullptr, target, timeout_ns);
}

HandBackBarrier::WaitResult HandBackBarrier::wait_cell(const std::atomic<std::uint32_t>& done,
                                                       std::int64_t timeout_ns) noexcept {
  return sleep(&cell_generation_, &cell_sleepers_, &done, 0, timeout_ns);
}

void HandBackBarrier::close() noexcept {
  closed_.store(true, std::memory_order_seq_cst);
  wake_sleepers(&grace_generation_);
  wake_sleepers(&cell_generation_);
  write_listener_fd();
}

int HandBackBarrier::listener_fd() noexcept {
  std::lock_guard<std::mutex> lock(waiters_mutex_);
  int fd = listener_fd_.load(std::memory_order_relaxed);
  if (fd < 0) {
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0) listener_fd_.store(fd, std::memory_order_release);
  }
  return fd;
}

void HandBackBarrier::consume_listener_fd() noexcept {
  const int fd = listener_fd_.load(std::memory_order_acquire);
  if (fd < 0) return;
  std::uint64_t value;
  while (::read(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

HandBackBarrier::Stats HandBackBarrier::stats() const noexcept {
  Stats stats;
  const std::uint64_t word = word_.load(std::memory_order_seq_cst);
  stats.held[0] = count_of(word, 0);
  stats.held[1] = count_of(word, 1);
  stats.current = current_of(word);
  stats.started = started_.load(std::memory_order_seq_cst);
  stats.completed = completed_.load(std::memory_order_seq_cst);
  stats.futex_wakes = futex_wakes_.load(std::memory_order_relaxed);
  stats.listener_writes = listener_writes_.load(std::memory_order_relaxed);
  return stats;
}

void HandBackBarrier::reset_after_fork() noexcept {
  word_.store(0, std::memory_order_relaxed);
  completed_.store(started_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  closed_.store(false, std::memory_order_relaxed);
  grace_sleepers_.store(0, std::memory_order_relaxed);
  cell_sleepers_.store(0, std::memory_order_relaxed);
  listeners_.store(0, std::memory_order_relaxed);
  // Another parent thread may have held the mutex at fork: the child's copy is made anew.
  new (&waiters_mutex_) std::mutex();
  const int fd = listener_fd_.load(std::memory_order_relaxed);
  if (fd >= 0) {
    // Same number, new eventfd: an event loop in the child may have registered the number, and the
    // inherited object is shared with the parent (its writes would wake the child's loop).
    const int fresh = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fresh >= 0) {
      (void)dup3(fresh, fd, O_CLOEXEC);
      ::close(fresh);
    }
  }
}

}  // namespace reclaim
