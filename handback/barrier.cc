// handback/barrier.cc — see barrier.h: tickets, waits, wake-ups, the listener fd, fork (the epochs and
// their count table: epochs.cc).

#include "handback/barrier.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <new>

namespace reclaim::handback {
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

HandBackBarrier::HandBackBarrier(int max_counts) noexcept
    : max_counts_(max_counts < 2 ? 2 : (max_counts > kMaxEpochCounts ? kMaxEpochCounts : max_counts)) {
  // Epoch 0 counts in count 0 (current_ is 0; count 0's epochs are 0), the one occupied count.
  occupied_.words[0].store(1, std::memory_order_relaxed);
  occupied_.groups[0].store(1, std::memory_order_relaxed);
}

HandBackBarrier::~HandBackBarrier() {
  const int fd = listener_fd_.load(std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
  for (int chunk = 1; chunk < kChunks; ++chunk) delete[] chunks_[chunk].load(std::memory_order_relaxed);
}

std::size_t HandBackBarrier::bucket_of(const void* cell) noexcept {
  // Fibonacci hashing of the word's address (4-byte aligned): neighbouring cells land far apart.
  static_assert((kCellBuckets & (kCellBuckets - 1)) == 0, "a power of two");
  constexpr int kBucketBits = __builtin_ctz(kCellBuckets);
  const std::uint64_t word = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(cell)) >> 2;
  return static_cast<std::size_t>((word * 0x9E3779B97F4A7C15ull) >> (64 - kBucketBits));
}

int HandBackBarrier::begin() noexcept {
  for (;;) {
    const std::uint64_t seen = current_.load(std::memory_order_seq_cst);
    const int index = static_cast<int>(seen & kCountMask);
    count_at(index).tickets.fetch_add(1, std::memory_order_seq_cst);
    // Still current: a switch that follows sees this count (both sides seq_cst). Otherwise a switch came
    // in between and may already have looked at the count: undo, and count in the new epoch.
    if (current_.load(std::memory_order_seq_cst) == seen) return index;
    // An undo always lets the waiters look again: a switch may have given the count to a new epoch, and a
    // waiter that saw this brief count beside the count's older epochs would otherwise sleep on.
    end_count(index, /*undo=*/true);
  }
}

void HandBackBarrier::end_count(int index, bool undo) noexcept {
  EpochCount& counter = count_at(index);
  const std::uint64_t before_current = current_.load(std::memory_order_seq_cst);
  // Never below zero: in a fork child a ticket of the parent may still be ended (by a C API user's own
  // callback, or a driver that runs the parent's), after the reset emptied every count.
  std::uint64_t count = counter.tickets.load(std::memory_order_relaxed);
  do {
    if (count == 0) return;
  } while (!counter.tickets.compare_exchange_weak(count, count - 1, std::memory_order_seq_cst,
                                             std::memory_order_relaxed));
  if (count != 1) return;
  // The count emptied. Not current: reported, so that the next switch vacates it. Current: the switch that
  // leaves it reads its count after storing current_, so it sees this decrement (this load of current_
  // came first) and vacates it then.
  const std::uint64_t after_current = current_.load(std::memory_order_seq_cst);
  const bool is_current = static_cast<int>(after_current & kCountMask) == index;
  if (!is_current) report_emptied(index);
  // No waiter covers it if, all along, it was the current count holding only the current epoch (every
  // waiter switches away first and covers older epochs): then no wake-up. Otherwise (an old epoch, a
  // shared count, or a switch in between) the waiters look again. A switch after the second load makes
  // epoch_ newer than the count's oldest (a switch never picks the current count): a wake, as it must.
  if (!undo && before_current == after_current && is_current &&
      counter.oldest.load(std::memory_order_relaxed) == epoch_.load(std::memory_order_seq_cst)) {
    return;
  }
  if (epoch_sleepers_.load(std::memory_order_seq_cst) != 0) wake_sleepers(&epoch_wake_word_);
  if (listeners_.load(std::memory_order_seq_cst) != 0) write_listener_fd();
}

void HandBackBarrier::end(int ticket, std::atomic<std::uint32_t>* done) noexcept {
  if (done != nullptr) {
    CellBucket& bucket = cell_buckets_[bucket_of(done)];  // from the address, before the store
    done->store(1, std::memory_order_seq_cst);
    // From here `done` may be freed; only the barrier's own words are touched. The bucket's sleepers and
    // the cell are the two sides of a seq_cst handshake with sleep(): one of them sees the other.
    if (bucket.sleepers.load(std::memory_order_seq_cst) != 0) wake_sleepers(&bucket.wake_word);
  }
  // After the cell: a waiter that sees this ticket ended (its count's acquire) sees the cell set.
  if (ticket >= 0 && ticket < counts_used_.load(std::memory_order_acquire)) end_count(ticket, /*undo=*/false);
}

void HandBackBarrier::wake_sleepers(std::atomic<std::uint32_t>* wake_word) noexcept {
  futex_wakes_.fetch_add(1, std::memory_order_relaxed);  // counted first, as listener writes are
  wake_word->fetch_add(1, std::memory_order_seq_cst);
  (void)syscall(SYS_futex, futex_address(wake_word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
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


HandBackBarrier::WaitResult HandBackBarrier::sleep(std::atomic<std::uint32_t>* wake_word,
                                                   std::atomic<std::uint32_t>* sleepers,
                                                   std::atomic<std::uint64_t>* wakeups,
                                                   const std::atomic<std::uint32_t>* done, const Span& span,
                                                   std::int64_t timeout_ns) noexcept {
  const std::int64_t deadline = timeout_ns < 0 ? -1 : monotonic_ns() + timeout_ns;
  const auto is_reached = [&] {
    return done != nullptr ? done->load(std::memory_order_seq_cst) != 0 : reached(span);
  };
  for (;;) {
    if (is_reached()) return WaitResult::kReached;
    if (is_shut()) return WaitResult::kShut;
    std::int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - monotonic_ns();
      if (left <= 0) return WaitResult::kTimedOut;
    }
    // Announce the sleep, then read the wake_word, then look again: an end() that comes after the look
    // sees the sleeper and bumps the wake_word, so the futex wait returns at once.
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    if (done != nullptr) cell_sleepers_.fetch_add(1, std::memory_order_relaxed);
    const std::uint32_t seen = wake_word->load(std::memory_order_seq_cst);
    long result = 0;
    int error = 0;
    if (!is_reached() && !is_shut()) {
      timespec relative;
      timespec* timeout = nullptr;
      if (left >= 0) {
        relative.tv_sec = static_cast<time_t>(left / 1000000000);
        relative.tv_nsec = static_cast<long>(left % 1000000000);
        timeout = &relative;
      }
      result = syscall(SYS_futex, futex_address(wake_word), FUTEX_WAIT_PRIVATE, seen, timeout, nullptr, 0);
      error = result < 0 ? errno : 0;
      // Woken, or the word moved before the sleep began: a wake-up either way.
      if (result == 0 || error == EAGAIN) wakeups->fetch_add(1, std::memory_order_relaxed);
    }
    if (done != nullptr) cell_sleepers_.fetch_sub(1, std::memory_order_relaxed);
    sleepers->fetch_sub(1, std::memory_order_seq_cst);
    if (result < 0 && error == EINTR) {
      if (is_reached()) return WaitResult::kReached;
      return WaitResult::kInterrupted;
    }
  }
}

HandBackBarrier::WaitResult HandBackBarrier::wait(const Span& span, std::int64_t timeout_ns) noexcept {
  return sleep(&epoch_wake_word_, &epoch_sleepers_, &epoch_wakeups_, nullptr, span, timeout_ns);
}

HandBackBarrier::WaitResult HandBackBarrier::wait_cell(const std::atomic<std::uint32_t>& done,
                                                       std::int64_t timeout_ns) noexcept {
  CellBucket& bucket = cell_buckets_[bucket_of(&done)];
  return sleep(&bucket.wake_word, &bucket.sleepers, &cell_wakeups_, &done, Span{0, 0}, timeout_ns);
}

void HandBackBarrier::shut() noexcept {
  shut_.store(true, std::memory_order_seq_cst);
  wake_sleepers(&epoch_wake_word_);
  // A bucket whose sleeper count reads 0 here has no sleeper that could miss the shut: one that announces
  // itself later reads shut_ before it sleeps (both sides seq_cst).
  for (CellBucket& bucket : cell_buckets_) {
    if (bucket.sleepers.load(std::memory_order_seq_cst) != 0) wake_sleepers(&bucket.wake_word);
  }
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
  const int used = counts_used_.load(std::memory_order_acquire);
  for (int word = 0; word < (used + 63) / 64; ++word) {
    for (std::uint64_t bits = occupied_.words[word].load(std::memory_order_seq_cst); bits != 0;
         bits &= bits - 1) {
      const std::uint64_t held = count_at(word * 64 + __builtin_ctzll(bits)).tickets.load(std::memory_order_seq_cst);
      stats.held += held;
      if (held != 0) ++stats.counts_in_use;
      ++stats.counts_occupied;
    }
  }
  stats.counts_used = used;
  stats.shared_counts = shared_counts_.load(std::memory_order_relaxed);
  stats.sleepers =
      epoch_sleepers_.load(std::memory_order_seq_cst) + cell_sleepers_.load(std::memory_order_relaxed);
  stats.futex_wakes = futex_wakes_.load(std::memory_order_relaxed);
  stats.listener_writes = listener_writes_.load(std::memory_order_relaxed);
  stats.epoch_wakeups = epoch_wakeups_.load(std::memory_order_relaxed);
  stats.cell_wakeups = cell_wakeups_.load(std::memory_order_relaxed);
  stats.reached_words = reached_words_.load(std::memory_order_relaxed);
  stats.reached_counts = reached_counts_.load(std::memory_order_relaxed);
  return stats;
}

void HandBackBarrier::reset_after_fork() noexcept {
  forks_.fetch_add(1, std::memory_order_relaxed);
  const int used = counts_used_.load(std::memory_order_relaxed);
  // Every count ever used: one that is not occupied may hold the transient count of a parent's begin()
  // that never undoes it here.
  for (int index = 0; index < used; ++index) count_at(index).tickets.store(0, std::memory_order_relaxed);
  // The bitmaps anew (a parent's switch may have been halfway through them): count 0 alone occupied.
  for (int word = 0; word < (used + 63) / 64; ++word) {
    occupied_.words[word].store(0, std::memory_order_relaxed);
    emptied_.words[word].store(0, std::memory_order_relaxed);
  }
  for (int group = 0; group < kWordGroups; ++group) {
    occupied_.groups[group].store(0, std::memory_order_relaxed);
    emptied_.groups[group].store(0, std::memory_order_relaxed);
    full_[group] = 0;
  }
  previous_ = 0;
  // Epochs go on, so that a mark() taken before the fork still means "after it" here; the epoch's count is 0.
  const std::uint64_t next = epoch() + 1;
  first_chunk_[0].oldest.store(next, std::memory_order_relaxed);
  first_chunk_[0].newest.store(next, std::memory_order_relaxed);
  occupy_locked(0, next);
  epoch_.store(next, std::memory_order_relaxed);
  current_.store(next << kCountBits, std::memory_order_relaxed);
  shut_.store(false, std::memory_order_relaxed);
  epoch_sleepers_.store(0, std::memory_order_relaxed);
  for (CellBucket& bucket : cell_buckets_) bucket.sleepers.store(0, std::memory_order_relaxed);
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

}  // namespace reclaim::handback
