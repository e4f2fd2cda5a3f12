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

std::uint32_t* futex_address(std::atomic<std::uint32_t>* word) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex is a plain word");
  return reinterpret_cast<std::uint32_t*>(word);
}

}  // namespace

std::int64_t monotonic_ns() noexcept {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::int64_t timeout_to_ns(double seconds) noexcept {
  if (!(seconds >= 0)) return -1;  // negative or NaN
  if (seconds >= 9.2e9) return -1;  // beyond int64 nanoseconds: as good as no limit
  return static_cast<std::int64_t>(seconds * 1e9);
}

HandBackBarrier::HandBackBarrier() noexcept {
  // Epoch 0 counts in slot 0 (current_ is 0).
}

HandBackBarrier::~HandBackBarrier() {
  const int fd = listener_fd_.load(std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
}

int HandBackBarrier::begin() noexcept {
  for (;;) {
    const std::uint64_t seen = current_.load(std::memory_order_seq_cst);
    const int slot = static_cast<int>(seen & kSlotMask);
    counts_[slot].fetch_add(1, std::memory_order_seq_cst);
    // Still current: a switch that follows sees this count (both sides seq_cst). Otherwise a switch came
    // in between and may already have looked at the slot: undo, and count in the new epoch.
    if (current_.load(std::memory_order_seq_cst) == seen) return slot;
    // An undo always lets the waiters look again: a switch may have given the slot to a new epoch, and a
    // waiter that saw this brief count beside the slot's older epochs would otherwise sleep on.
    release(slot, /*undo=*/true);
  }
}

void HandBackBarrier::release(int slot, bool undo) noexcept {
  const std::uint64_t before_current = current_.load(std::memory_order_seq_cst);
  // Never below zero: in a fork child a ticket of the parent may still be ended (by a C API user's own
  // callback, or a driver that runs the parent's), after the reset emptied every slot.
  std::uint64_t count = counts_[slot].load(std::memory_order_relaxed);
  do {
    if (count == 0) return;
  } while (!counts_[slot].compare_exchange_weak(count, count - 1, std::memory_order_seq_cst,
                                                std::memory_order_relaxed));
  if (count != 1) return;
  // The slot emptied. No waiter covers it if, all along, it was the current slot holding only the current
  // epoch (every waiter switches away first and covers older epochs): then no wake-up. Otherwise (an old
  // epoch, a shared slot, or a switch in between) the waiters look again.
  const std::uint64_t after_current = current_.load(std::memory_order_seq_cst);
  if (!undo && before_current == after_current && static_cast<int>(after_current & kSlotMask) == slot &&
      oldest_[slot].load(std::memory_order_relaxed) == (after_current >> kSlotBits)) {
    return;
  }
  if (grace_sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers(&grace_generation_);
  if (listeners_.load(std::memory_order_seq_cst) != 0) write_listener_fd();
}

void HandBackBarrier::end(int ticket, std::atomic<std::uint32_t>* done) noexcept {
  if (ticket >= 0 && ticket < kSlots) release(ticket, /*undo=*/false);
  if (done != nullptr) {
    done->store(1, std::memory_order_seq_cst);
    // From here `done` may be freed; only the barrier's own words are touched.
    if (cell_sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers(&cell_generation_);
  }
}

void HandBackBarrier::wake_sleepers(std::atomic<std::uint32_t>* generation) noexcept {
  futex_wakes_.fetch_add(1, std::memory_order_relaxed);  // counted first, as listener writes are
  generation->fetch_add(1, std::memory_order_seq_cst);
  (void)syscall(SYS_futex, futex_address(generation), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void HandBackBarrier::write_listener_fd() noexcept {
  const int fd = listener_fd_.load(std::memory_order_acquire);
  if (fd < 0) return;
  // Counted first: a listener that wakes on the write and reads the count finds it there.
  listener_writes_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t one = 1;
  ssize_t wrote;
  do {
    wrote = ::write(fd, &one, sizeof one);
  } while (wrote < 0 && errno == EINTR);
}

void HandBackBarrier::switch_epoch_locked() noexcept {
  const std::uint64_t now = current_.load(std::memory_order_seq_cst);
  const std::uint64_t next = (now >> kSlotBits) + 1;
  const int current = static_cast<int>(now & kSlotMask);
  int chosen = -1;
  int youngest = -1;
  for (int slot = 0; slot < kSlots; ++slot) {
    if (slot == current) continue;
    if (counts_[slot].load(std::memory_order_seq_cst) == 0) {
      chosen = slot;
      break;
    }
    if (youngest < 0 ||
        newest_[slot].load(std::memory_order_relaxed) > newest_[youngest].load(std::memory_order_relaxed)) {
      youngest = slot;
    }
  }
  if (chosen >= 0) {
    oldest_[chosen].store(next, std::memory_order_relaxed);
  } else {
    // Every other slot still holds an epoch: share the youngest's (its oldest epoch stays).
    chosen = youngest;
    shared_slots_.fetch_add(1, std::memory_order_relaxed);
  }
  newest_[chosen].store(next, std::memory_order_relaxed);
  current_.store((next << kSlotBits) | static_cast<std::uint64_t>(chosen), std::memory_order_seq_cst);
}

std::uint64_t HandBackBarrier::mark() noexcept {
  std::lock_guard<std::mutex> lock(waiters_mutex_);
  switch_epoch_locked();
  return epoch();
}

HandBackBarrier::Span HandBackBarrier::request(std::uint64_t since) noexcept {
  std::lock_guard<std::mutex> lock(waiters_mutex_);
  const std::uint64_t until = epoch();
  switch_epoch_locked();
  return Span{since, until};
}

bool HandBackBarrier::reached(const Span& span) const noexcept {
  for (int slot = 0; slot < kSlots; ++slot) {
    if (counts_[slot].load(std::memory_order_seq_cst) == 0) continue;
    // The count's acquire ordered the epochs written before the switch that made the slot current.
    if (oldest_[slot].load(std::memory_order_relaxed) <= span.until &&
        newest_[slot].load(std::memory_order_relaxed) >= span.since) {
      return false;
    }
  }
  return true;
}

HandBackBarrier::WaitResult HandBackBarrier::sleep(std::atomic<std::uint32_t>* generation,
                                                   const std::atomic<std::uint32_t>* done, const Span& span,
                                                   std::int64_t timeout_ns) noexcept {
  std::atomic<std::uint32_t>* const sleepers = done != nullptr ? &cell_sleepers_ : &grace_sleepers_;
  const std::int64_t deadline = timeout_ns < 0 ? -1 : monotonic_ns() + timeout_ns;
  const auto is_reached = [&] {
    return done != nullptr ? done->load(std::memory_order_seq_cst) != 0 : reached(span);
  };
  for (;;) {
    if (is_reached()) return WaitResult::kReached;
    if (is_closed()) return WaitResult::kClosed;
    std::int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - monotonic_ns();
      if (left <= 0) return WaitResult::kTimedOut;
    }
    // Announce the sleep, then read the generation, then look again: an end() that comes after the look
    // sees the sleeper and bumps the generation, so the futex wait returns at once.
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = generation->load(std::memory_order_seq_cst);
    long result = 0;
    int error = 0;
    if (!is_reached() && !is_closed()) {
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
      if (is_reached()) return WaitResult::kReached;
      return WaitResult::kInterrupted;
    }
  }
}

HandBackBarrier::WaitResult HandBackBarrier::wait(const Span& span, std::int64_t timeout_ns) noexcept {
  return sleep(&grace_generation_, nullptr, span, timeout_ns);
}

HandBackBarrier::WaitResult HandBackBarrier::wait_cell(const std::atomic<std::uint32_t>& done,
                                                       std::int64_t timeout_ns) noexcept {
  return sleep(&cell_generation_, &done, Span{0, 0}, timeout_ns);
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
  Stats stats{};
  stats.epoch = epoch();
  for (const auto& count : counts_) {
    const std::uint64_t held = count.load(std::memory_order_seq_cst);
    stats.held += held;
    if (held != 0) ++stats.slots_in_use;
  }
  stats.shared_slots = shared_slots_.load(std::memory_order_relaxed);
  stats.sleepers =
      grace_sleepers_.load(std::memory_order_seq_cst) + cell_sleepers_.load(std::memory_order_seq_cst);
  stats.futex_wakes = futex_wakes_.load(std::memory_order_relaxed);
  stats.listener_writes = listener_writes_.load(std::memory_order_relaxed);
  return stats;
}

void HandBackBarrier::reset_after_fork() noexcept {
  forks_.fetch_add(1, std::memory_order_relaxed);
  for (auto& count : counts_) count.store(0, std::memory_order_relaxed);
  // Epochs go on, so that a mark() taken before the fork still means "after it" here; the epoch's slot is 0.
  const std::uint64_t next = epoch() + 1;
  oldest_[0].store(next, std::memory_order_relaxed);
  newest_[0].store(next, std::memory_order_relaxed);
  current_.store(next << kSlotBits, std::memory_order_relaxed);
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
