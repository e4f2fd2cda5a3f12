// tests/handback/barrier_test.cc — reclaim::handback::HandBackBarrier: epochs counted in counts, tickets taken
// with begin() and ended with end() in any order, spans from request() and mark(), the waits on them
// (futex), which end() wakes whom, the count table's growth and the counts shared past its bound, the
// occupied counts that a switch vacates once they empty, the done cells and their buckets, the listener
// eventfd, shut() and the fork reset, and stress runs that check the barrier's promises under concurrency.

#include "handback/barrier.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cleanup/fd_readable.h"

namespace {

using reclaim::handback::HandBackBarrier;
using reclaim::handback::monotonic_ns;
using reclaim::handback::timeout_to_ns;
using WaitResult = HandBackBarrier::WaitResult;
using Span = HandBackBarrier::Span;

constexpr std::int64_t kNoLimit = -1;
// A table bounded at seven counts: the sharing that the default bound (kMaxEpochCounts) keeps out of reach.
constexpr int kSmallTable = 7;
constexpr std::int64_t kLongEnough = std::int64_t{30} * 1000 * 1000 * 1000;  // a hang, not a slow machine

long thread_id() { return syscall(SYS_gettid); }

// True when thread `tid` of this process is blocked in a futex wait (its /proc syscall line starts with
// the futex syscall's number while it is blocked in it).
bool blocked_in_futex(long tid) {
  std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  if (!(file >> number)) return false;
  return number == SYS_futex;
}

// Waits (polling, test side only) until thread `tid` sleeps in a futex, seen three times in a row 1 ms
// apart (so that a passing futex of the thread's start-up is not taken for the wait); false after ~30 s.
bool until_blocked_in_futex(long tid) {
  int in_a_row = 0;
  for (int i = 0; i < 30000; ++i) {
    in_a_row = blocked_in_futex(tid) ? in_a_row + 1 : 0;
    if (in_a_row == 3) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A thread that calls `wait` (or wait_cell) once and keeps what it returned.
class Waiter {
 public:
  template <typename Call>
  explicit Waiter(Call call) : thread_([this, call] {
      tid_.store(thread_id());
      result_.store(static_cast<int>(call()));
      returned_.store(true);
    }) {}
  ~Waiter() {
    if (thread_.joinable()) thread_.join();
  }
  // Blocks until the thread sleeps in its futex wait.
  bool until_asleep() {
    while (tid_.load() == 0) std::this_thread::yield();
    return until_blocked_in_futex(tid_.load());
  }
  WaitResult join() {
    thread_.join();
    return static_cast<WaitResult>(result_.load());
  }
  bool returned() const { return returned_.load(); }

 private:
  std::atomic<long> tid_{0};
  std::atomic<int> result_{-1};
  std::atomic<bool> returned_{false};
  std::thread thread_;
};

TEST(HandBackBarrier, NothingHeldIsReachedAtOnce) {
  HandBackBarrier barrier;
  EXPECT_EQ(barrier.epoch(), 0u);
  const Span span = barrier.request(0);
  EXPECT_EQ(span.since, 0u);
  EXPECT_EQ(span.until, 0u);  // the epoch current when it came
  EXPECT_EQ(barrier.epoch(), 1u);  // request() switched
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kReached);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.epoch, 1u);
  EXPECT_EQ(stats.held, 0u);
  EXPECT_EQ(stats.counts_in_use, 0);
  EXPECT_EQ(stats.shared_counts, 0u);
  EXPECT_EQ(stats.sleepers, 0u);
  EXPECT_EQ(stats.futex_wakes, 0u);
  EXPECT_EQ(stats.listener_writes, 0u);
}

TEST(HandBackBarrier, EndsOutOfOrderReachOnlyWithTheLast) {
  HandBackBarrier barrier;
  const int first = barrier.begin();
  const int second = barrier.begin();
  ASSERT_EQ(first, 0);  // epoch 0 counts in count 0
  ASSERT_EQ(second, 0);
  EXPECT_EQ(barrier.stats().held, 2u);
  EXPECT_EQ(barrier.stats().counts_in_use, 1);
  const Span span = barrier.request(0);
  EXPECT_FALSE(barrier.reached(span));

  barrier.end(second, nullptr);
  EXPECT_FALSE(barrier.reached(span));
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kTimedOut);
  EXPECT_EQ(barrier.stats().held, 1u);

  barrier.end(first, nullptr);
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().held, 0u);
  EXPECT_EQ(barrier.stats().counts_in_use, 0);
}

TEST(HandBackBarrier, BeginAfterRequestDoesNotDelayIt) {
  HandBackBarrier barrier;
  const int before = barrier.begin();
  const Span span = barrier.request(0);
  const int after = barrier.begin();
  EXPECT_NE(before, after);  // the new epoch's count
  EXPECT_EQ(barrier.stats().counts_in_use, 2);
  barrier.end(before, nullptr);
  EXPECT_TRUE(barrier.reached(span));  // `after` is still held
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().held, 1u);
  barrier.end(after, nullptr);
  EXPECT_EQ(barrier.stats().held, 0u);
}

// A wait begun while another one is in progress covers what was attached before it began, and nothing
// attached after: two waiters asleep on spans requested at different times, an attachment after the
// second request, and both reach while it is still held.
TEST(HandBackBarrier, AWaitBegunDuringAnotherDoesNotCoverLaterAttachments) {
  HandBackBarrier barrier;
  const int first = barrier.begin();
  const Span early = barrier.request(0);
  const int second = barrier.begin();
  const Span late = barrier.request(0);
  const int third = barrier.begin();  // after both requests
  EXPECT_EQ(late.until, early.until + 1);
  EXPECT_EQ(barrier.stats().counts_in_use, 3);

  Waiter early_waiter([&] { return barrier.wait(early, kLongEnough); });
  Waiter late_waiter([&] { return barrier.wait(late, kLongEnough); });
  ASSERT_TRUE(early_waiter.until_asleep());
  ASSERT_TRUE(late_waiter.until_asleep());

  barrier.end(first, nullptr);
  EXPECT_EQ(early_waiter.join(), WaitResult::kReached);
  EXPECT_FALSE(barrier.reached(late));  // `second` began before the late request
  EXPECT_FALSE(late_waiter.returned());

  barrier.end(second, nullptr);
  EXPECT_EQ(late_waiter.join(), WaitResult::kReached);
  EXPECT_TRUE(barrier.reached(early));
  EXPECT_TRUE(barrier.reached(late));
  EXPECT_EQ(barrier.stats().held, 1u);  // `third`, which neither waited for
  barrier.end(third, nullptr);
}

// since = mark(): a span that waits only for what was attached after the mark.
TEST(HandBackBarrier, SinceAMarkExcludesEarlierAttachments) {
  HandBackBarrier barrier;
  const int kept = barrier.begin();  // held for good
  const std::uint64_t since = barrier.mark();
  EXPECT_EQ(since, barrier.epoch());
  EXPECT_EQ(since, 1u);
  const int after = barrier.begin();
  EXPECT_NE(after, kept);
  const Span span = barrier.request(since);
  EXPECT_EQ(span.since, since);
  EXPECT_EQ(span.until, since);
  const Span everything = barrier.request(0);
  EXPECT_FALSE(barrier.reached(span));

  Waiter waiter([&] { return barrier.wait(span, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  barrier.end(after, nullptr);
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_FALSE(barrier.reached(everything));  // `kept` is still held
  EXPECT_EQ(barrier.wait(everything, 0), WaitResult::kTimedOut);
  EXPECT_EQ(barrier.stats().held, 1u);
}

// Each epoch holds a ticket, eight of them in a table bounded at seven counts: an epoch shares a count, and
// every wait still ends once everything has ended.
TEST(HandBackBarrier, EightEpochsEachHoldingATicketShareASlotPastTheBound) {
  constexpr int kEpochs = 8;
  static_assert(kEpochs > kSmallTable, "more epochs than epoch counts");
  HandBackBarrier barrier(kSmallTable);
  int tickets[kEpochs];
  Span spans[kEpochs];
  for (int i = 0; i < kEpochs; ++i) {
    tickets[i] = barrier.begin();
    spans[i] = barrier.request(0);
  }
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_GE(stats.shared_counts, 1u);
  EXPECT_EQ(stats.counts_in_use, kSmallTable);
  EXPECT_EQ(stats.held, static_cast<std::uint64_t>(kEpochs));
  for (int i = 0; i < kEpochs; ++i) {
    EXPECT_GE(tickets[i], 0);
    EXPECT_LT(tickets[i], kSmallTable);
    EXPECT_FALSE(barrier.reached(spans[i]));
  }

  Waiter waiter([&] { return barrier.wait(spans[kEpochs - 1], kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  for (int i = kEpochs - 1; i >= 0; --i) barrier.end(tickets[i], nullptr);
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  for (int i = 0; i < kEpochs; ++i) EXPECT_EQ(barrier.wait(spans[i], kLongEnough), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().held, 0u);
  EXPECT_EQ(barrier.stats().counts_in_use, 0);

  // With the counts free again, a new epoch takes a count of its own.
  const std::uint64_t shared = barrier.stats().shared_counts;
  const int ticket = barrier.begin();
  const Span span = barrier.request(0);
  EXPECT_EQ(barrier.stats().shared_counts, shared);
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.reached(span));
}

// A count shared by two epochs holds a span that covers either of them until both have ended: reached() is
// false for an epoch in the span while a ticket of the shared count is held, even one of an epoch outside it.
TEST(HandBackBarrier, ReachedIsFalseWhileATicketOfASharedSlotIsHeld) {
  HandBackBarrier barrier(kSmallTable);
  constexpr int kFull = kSmallTable;
  int tickets[kFull];
  Span spans[kFull];
  for (int i = 0; i < kFull; ++i) {
    tickets[i] = barrier.begin();  // epoch i in count i
    spans[i] = barrier.request(i);  // that epoch alone
    EXPECT_EQ(spans[i].since, static_cast<std::uint64_t>(i));
    EXPECT_EQ(spans[i].until, static_cast<std::uint64_t>(i));
  }
  EXPECT_EQ(barrier.stats().shared_counts, 1u);  // the last request found every count taken
  const std::uint64_t shared_epoch = barrier.epoch();
  const int shared = barrier.begin();
  const int sharing = [&] {
    for (int i = 0; i < kFull; ++i) {
      if (tickets[i] == shared) return i;
    }
    return -1;
  }();
  ASSERT_GE(sharing, 0);  // the new epoch counts in a count that still holds an older one
  // The count after it ends first, so that the next switch finds a free count and nothing else is shared.
  const int last = kFull - 1;
  ASSERT_NE(sharing, last);
  barrier.end(tickets[last], nullptr);
  const Span span = barrier.request(shared_epoch);
  EXPECT_EQ(barrier.stats().shared_counts, 1u);
  EXPECT_EQ(span.since, shared_epoch);
  EXPECT_EQ(span.until, shared_epoch);

  barrier.end(shared, nullptr);  // the span's only attachment
  EXPECT_FALSE(barrier.reached(span));  // the older epoch's ticket still holds the shared count
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kTimedOut);
  EXPECT_FALSE(barrier.reached(spans[sharing]));

  barrier.end(tickets[sharing], nullptr);
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_TRUE(barrier.reached(spans[sharing]));
  for (int i = 0; i < kFull; ++i) {
    if (i == sharing || i == last) continue;
    EXPECT_FALSE(barrier.reached(spans[i]));
    barrier.end(tickets[i], nullptr);
    EXPECT_TRUE(barrier.reached(spans[i]));
  }
  EXPECT_EQ(barrier.stats().held, 0u);
  EXPECT_TRUE(barrier.reached(spans[last]));
}

// The end() that empties the current count, which holds only the current epoch, wakes nobody: every waiter
// covers older epochs only. A sleeper on an old epoch sees no wake while tickets of the current epoch come
// and go, and one when its own ticket ends.
TEST(HandBackBarrier, NoWakeWhenTheCurrentSlotEmpties) {
  HandBackBarrier barrier;
  const int fd = barrier.listener_fd();
  ASSERT_GE(fd, 0);
  barrier.add_listener();
  const int old = barrier.begin();
  const Span span = barrier.request(0);
  Waiter waiter([&] { return barrier.wait(span, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  const HandBackBarrier::Stats before = barrier.stats();
  EXPECT_EQ(before.sleepers, 1u);

  for (int i = 0; i < 100; ++i) {
    const int ticket = barrier.begin();
    EXPECT_NE(ticket, old);
    barrier.end(ticket, nullptr);
  }
  int tickets[3];
  for (int& ticket : tickets) ticket = barrier.begin();
  for (const int ticket : tickets) barrier.end(ticket, nullptr);

  const HandBackBarrier::Stats after = barrier.stats();
  EXPECT_EQ(after.futex_wakes, before.futex_wakes);
  EXPECT_EQ(after.listener_writes, before.listener_writes);
  EXPECT_EQ(after.epoch, before.epoch);
  EXPECT_FALSE(reclaim_test::readable(fd));
  EXPECT_FALSE(waiter.returned());

  barrier.end(old, nullptr);  // empties an old count: one wake, one listener write
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().futex_wakes, before.futex_wakes + 1);
  EXPECT_EQ(barrier.stats().listener_writes, before.listener_writes + 1);
  EXPECT_TRUE(reclaim_test::readable(fd));
  barrier.remove_listener();
}

// The case that the rule above must not catch: a waiter sleeps on count A's old epoch, switches choose A
// again as the current count (every count taken, so the new epoch shares A), and then A's last ticket, of
// the old epoch, ends while A is current. That end() empties the current count, but not one that held only
// the current epoch: the waiter must wake.
TEST(HandBackBarrier, ASleeperOnAnOldEpochWakesWhenItsSlotIsCurrentAgain) {
  HandBackBarrier barrier(kSmallTable);
  constexpr int kFull = kSmallTable;
  // Epochs 0 .. kFull - 2, a ticket each, in counts of their own; the youngest of them is A's.
  int tickets[kFull];
  for (int i = 0; i + 1 < kFull; ++i) {
    tickets[i] = barrier.begin();
    if (i + 2 < kFull) barrier.mark();
  }
  const int a = tickets[kFull - 2];
  const std::uint64_t a_epoch = barrier.epoch();
  const Span span = barrier.request(a_epoch);  // A's epoch alone
  EXPECT_EQ(span.until, a_epoch);
  tickets[kFull - 1] = barrier.begin();  // the last free count
  EXPECT_NE(tickets[kFull - 1], a);
  EXPECT_EQ(barrier.stats().counts_in_use, kFull);

  Waiter waiter([&] { return barrier.wait(span, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  const std::uint64_t wakes = barrier.stats().futex_wakes;

  barrier.mark();  // every count taken: the new epoch shares the youngest other count, A
  EXPECT_EQ(barrier.stats().shared_counts, 1u);
  const int probe = barrier.begin();
  ASSERT_EQ(probe, a);  // A is the current count again
  barrier.end(probe, nullptr);
  EXPECT_FALSE(waiter.returned());

  barrier.end(a, nullptr);  // A's last ticket, of the old epoch, while A is current
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().futex_wakes, wakes + 1);
  for (int i = 0; i < kFull; ++i) {
    if (tickets[i] != a) barrier.end(tickets[i], nullptr);
  }
  EXPECT_EQ(barrier.stats().held, 0u);
}

TEST(HandBackBarrier, WaitTimesOut) {
  HandBackBarrier barrier;
  const int ticket = barrier.begin();
  const Span span = barrier.request(0);
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kTimedOut);
  EXPECT_EQ(barrier.wait(span, 20 * 1000 * 1000), WaitResult::kTimedOut);  // 20 ms, through the futex
  barrier.end(ticket, nullptr);
  EXPECT_EQ(barrier.wait(span, 0), WaitResult::kReached);
}

TEST(HandBackBarrier, ShutWakesAWaiterWithShut) {
  HandBackBarrier barrier;
  const Span empty = barrier.request(0);  // reached before the shut
  const int ticket = barrier.begin();
  const Span span = barrier.request(0);
  Waiter waiter([&] { return barrier.wait(span, kNoLimit); });
  ASSERT_TRUE(waiter.until_asleep());
  EXPECT_FALSE(waiter.returned());
  barrier.shut();
  EXPECT_EQ(waiter.join(), WaitResult::kShut);
  EXPECT_TRUE(barrier.is_shut());
  EXPECT_EQ(barrier.wait(span, kNoLimit), WaitResult::kShut);  // later waits too
  std::atomic<std::uint32_t> cell{0};
  EXPECT_EQ(barrier.wait_cell(cell, kNoLimit), WaitResult::kShut);
  EXPECT_EQ(barrier.wait(empty, kNoLimit), WaitResult::kReached);  // already reached: still reached
  barrier.end(ticket, &cell);
  EXPECT_EQ(barrier.wait(span, kNoLimit), WaitResult::kReached);
  EXPECT_EQ(barrier.wait_cell(cell, kNoLimit), WaitResult::kReached);
}

TEST(HandBackBarrier, WaitCellReturnsWhenEndStoresTheCell) {
  HandBackBarrier barrier;
  std::atomic<std::uint32_t> done{0};
  const int ticket = barrier.begin();
  EXPECT_EQ(barrier.wait_cell(done, 0), WaitResult::kTimedOut);
  Waiter waiter([&] { return barrier.wait_cell(done, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  barrier.end(ticket, &done);
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  EXPECT_EQ(done.load(), 1u);
  EXPECT_EQ(barrier.stats().futex_wakes, 1u);  // the cell's sleeper; the current count emptied
  EXPECT_EQ(barrier.wait_cell(done, 0), WaitResult::kReached);
}

TEST(HandBackBarrier, NoFutexWakeWithoutASleeper) {
  HandBackBarrier barrier;
  std::atomic<std::uint32_t> done{0};
  const int ticket = barrier.begin();
  const Span span = barrier.request(0);
  barrier.end(ticket, &done);  // empties an old count, but nobody sleeps or listens
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_EQ(done.load(), 1u);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.futex_wakes, 0u);
  EXPECT_EQ(stats.listener_writes, 0u);
  EXPECT_EQ(stats.held, 0u);
  EXPECT_EQ(stats.epoch, 1u);
}

TEST(HandBackBarrier, OneSleeperGetsExactlyOneWake) {
  HandBackBarrier barrier;
  const int ticket = barrier.begin();
  const Span span = barrier.request(0);
  Waiter waiter([&] { return barrier.wait(span, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  EXPECT_EQ(barrier.stats().sleepers, 1u);
  barrier.end(ticket, nullptr);
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.futex_wakes, 1u);
  EXPECT_EQ(stats.listener_writes, 0u);
  EXPECT_EQ(stats.sleepers, 0u);
  EXPECT_EQ(stats.held, 0u);
}

TEST(HandBackBarrier, ListenerFdIsWrittenOnlyWithAListener) {
  HandBackBarrier barrier;
  const int fd = barrier.listener_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(barrier.listener_fd(), fd);  // stable

  // No listener registered: an old count empties, the fd stays quiet.
  int ticket = barrier.begin();
  Span span = barrier.request(0);
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_FALSE(reclaim_test::readable(fd));
  EXPECT_EQ(barrier.stats().listener_writes, 0u);

  // One listener: readable once the old count empties, not before.
  barrier.add_listener();
  ticket = barrier.begin();
  span = barrier.request(0);
  EXPECT_FALSE(reclaim_test::readable(fd));
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(reclaim_test::readable(fd));
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_EQ(barrier.stats().listener_writes, 1u);
  barrier.consume_listener_fd();
  EXPECT_FALSE(reclaim_test::readable(fd));
  barrier.remove_listener();

  // Unregistered again: quiet again.
  ticket = barrier.begin();
  span = barrier.request(0);
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.reached(span));
  EXPECT_FALSE(reclaim_test::readable(fd));
  EXPECT_EQ(barrier.stats().listener_writes, 1u);
}

TEST(HandBackBarrier, ResetAfterForkLeavesNoTicketsAndAnOpenBarrier) {
  HandBackBarrier barrier;
  const int fd = barrier.listener_fd();
  ASSERT_GE(fd, 0);
  barrier.add_listener();
  barrier.begin();
  barrier.begin();
  const Span span = barrier.request(0);
  barrier.begin();  // in the new epoch's count
  const std::uint64_t since = barrier.mark();  // taken before the fork, used after it
  barrier.shut();
  EXPECT_TRUE(reclaim_test::readable(fd));  // shut() wrote it
  EXPECT_EQ(barrier.forks(), 0u);

  barrier.reset_after_fork();  // called directly: this process stands in for the child

  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.held, 0u);
  EXPECT_EQ(stats.counts_in_use, 0);
  EXPECT_EQ(stats.sleepers, 0u);
  EXPECT_GT(stats.epoch, since);  // epochs go on from the parent's
  EXPECT_EQ(barrier.forks(), 1u);
  EXPECT_FALSE(barrier.is_shut());
  EXPECT_EQ(barrier.listener_fd(), fd);      // same number
  EXPECT_FALSE(reclaim_test::readable(fd));  // a fresh eventfd behind it
  EXPECT_TRUE(barrier.reached(span));
  const Span next = barrier.request(0);
  EXPECT_TRUE(barrier.reached(next));
  EXPECT_EQ(barrier.wait(next, 0), WaitResult::kReached);
  // The barrier still works: a new ticket holds a new span, also one since the parent's mark.
  const int ticket = barrier.begin();
  const Span held = barrier.request(0);
  const Span since_mark = barrier.request(since);
  EXPECT_FALSE(barrier.reached(held));
  EXPECT_FALSE(barrier.reached(since_mark));
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.reached(held));
  EXPECT_TRUE(barrier.reached(since_mark));
}

TEST(HandBackBarrier, TimeoutToNs) {
  EXPECT_EQ(timeout_to_ns(-1.0), -1);
  EXPECT_EQ(timeout_to_ns(std::nan("")), -1);
  EXPECT_EQ(timeout_to_ns(1e12), -1);
  EXPECT_EQ(timeout_to_ns(0.0), 0);
  EXPECT_EQ(timeout_to_ns(1.5), 1500000000);
}

// Several threads begin and end tickets in random order while a waiter requests and waits: every wait
// that returns kReached must come after the end() of every ticket whose begin() returned before its
// request(). A ticket's number is taken after its begin() returned and its flag is set before its end().
// The waiter also marks now and then and waits since the mark: then every ticket whose begin() was called
// after the mark returned (the producer saw the mark's count first) must have ended.
TEST(HandBackBarrier, StressEveryReachedWaitFollowsTheEndsBeforeItsRequest) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25000;
  constexpr int kTickets = kThreads * kPerThread;
  HandBackBarrier barrier;
  std::unique_ptr<std::atomic<bool>[]> ended(new std::atomic<bool>[kTickets]);
  for (int i = 0; i < kTickets; ++i) ended[i].store(false);
  std::unique_ptr<std::atomic<int>[]> marks_seen(new std::atomic<int>[kTickets]);
  for (int i = 0; i < kTickets; ++i) marks_seen[i].store(-1);  // -1: not written yet
  std::atomic<int> numbered{0};
  std::atomic<int> marks{0};  // marks that returned
  std::atomic<int> producers_left{kThreads};

  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      std::minstd_rand random(static_cast<unsigned>(t) + 1);
      struct Held {
        int ticket;
        int number;
      };
      std::vector<Held> held;
      for (int i = 0; i < kPerThread; ++i) {
        const int seen = marks.load();
        const int ticket = barrier.begin();
        const int number = numbered.fetch_add(1);
        marks_seen[number].store(seen);
        held.push_back({ticket, number});
        // End a random held ticket now and then, so that ends come in any order.
        while (!held.empty() && random() % 3 != 0) {
          const std::size_t pick = random() % held.size();
          const Held back = held[pick];
          held[pick] = held.back();
          held.pop_back();
          ended[back.number].store(true);
          barrier.end(back.ticket, nullptr);
        }
        if (random() % 64 == 0) std::this_thread::yield();
      }
      for (const Held& back : held) {
        ended[back.number].store(true);
        barrier.end(back.ticket, nullptr);
      }
      producers_left.fetch_sub(1);
    });
  }

  int reached = 0;
  int violations = 0;
  int verified = 0;  // tickets [0, verified) were all seen ended; flags are never cleared
  int not_reached = 0;
  std::minstd_rand random(99);
  while (producers_left.load() != 0) {
    // Now and then a span since a mark: it covers the tickets begun after the mark returned; the ones
    // begun before it may still be held.
    const bool since_mark = random() % 4 == 0;
    std::uint64_t since = 0;
    int mark = 0;
    if (since_mark) {
      since = barrier.mark();
      mark = marks.fetch_add(1) + 1;
    }
    const int before = numbered.load();
    const Span span = barrier.request(since);
    WaitResult result;
    if (random() % 2 == 0) {
      result = barrier.wait(span, kLongEnough);
    } else {
      while (!barrier.reached(span)) std::this_thread::yield();
      result = WaitResult::kReached;
    }
    if (result != WaitResult::kReached) {
      ++not_reached;
      continue;
    }
    ++reached;
    while (verified < before && ended[verified].load()) ++verified;
    for (int i = verified; i < before; ++i) {
      if (ended[i].load()) continue;
      if (since_mark && marks_seen[i].load() < mark) continue;  // begun before the mark, or not known
      ++violations;
    }
  }
  for (std::thread& producer : producers) producer.join();

  EXPECT_EQ(not_reached, 0);
  EXPECT_EQ(violations, 0);
  EXPECT_GT(reached, 0);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.held, 0u);
  EXPECT_EQ(stats.counts_in_use, 0);
  EXPECT_EQ(stats.sleepers, 0u);
  const Span last = barrier.request(0);
  EXPECT_EQ(barrier.wait(last, kLongEnough), WaitResult::kReached);
}

// A hundred epochs, each still holding an attachment (a graph held for good, one flush apart): a mark
// taken after them has a count of its own, so a wait since the mark never waits for them. The table grows
// past its inline chunk and no count is shared.
TEST(HandBackBarrier, SinceAMarkNeverWaitsForAHundredLongLivedEpochsBeforeIt) {
  constexpr int kEpochs = 100;
  HandBackBarrier barrier;
  std::vector<int> held;
  for (int i = 0; i < kEpochs; ++i) {
    held.push_back(barrier.begin());
    barrier.request(0);  // a flush's switch: the next attachment counts in a new epoch
  }
  const std::uint64_t mark = barrier.mark();
  const int after = barrier.begin();
  for (const int ticket : held) EXPECT_NE(ticket, after);
  const Span since_mark = barrier.request(mark);
  const Span everything = barrier.request(0);
  EXPECT_FALSE(barrier.reached(since_mark));
  barrier.end(after, nullptr);
  EXPECT_TRUE(barrier.reached(since_mark));
  EXPECT_EQ(barrier.wait(since_mark, 0), WaitResult::kReached);
  EXPECT_EQ(barrier.wait(barrier.request(mark), 0), WaitResult::kReached);  // a later wait since the mark
  EXPECT_FALSE(barrier.reached(everything));
  HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.shared_counts, 0u);
  EXPECT_EQ(stats.held, static_cast<std::uint64_t>(kEpochs));
  EXPECT_EQ(stats.counts_in_use, kEpochs);
  EXPECT_GT(stats.counts_used, kEpochs);

  // The tickets are distinct counts; a sleeper since the mark is not woken by them, one on everything is.
  std::vector<int> sorted = held;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  Waiter waiter([&] { return barrier.wait(everything, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  for (const int ticket : held) barrier.end(ticket, nullptr);
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  stats = barrier.stats();
  EXPECT_EQ(stats.held, 0u);
  EXPECT_EQ(stats.counts_in_use, 0);

  // The free counts are used again: the table does not grow for a new round of as many epochs.
  const int used = stats.counts_used;
  for (int i = 0; i < kEpochs; ++i) {
    held[static_cast<std::size_t>(i)] = barrier.begin();
    barrier.request(0);
  }
  EXPECT_EQ(barrier.stats().counts_used, used);
  for (const int ticket : held) barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.reached(barrier.request(0)));
}

// Each of many epochs (across several chunks of the table) holds one ticket: the span of each epoch alone
// is reached exactly when its own ticket ends, whatever the order of the ends.
TEST(HandBackBarrier, EachOfManyEpochsIsReachedWhenItsOwnTicketEnds) {
  constexpr int kEpochs = 300;
  HandBackBarrier barrier;
  std::vector<int> tickets;
  std::vector<Span> spans;
  for (int i = 0; i < kEpochs; ++i) {
    const std::uint64_t since = barrier.epoch();
    tickets.push_back(barrier.begin());
    spans.push_back(barrier.request(since));
  }
  EXPECT_EQ(barrier.stats().shared_counts, 0u);
  std::vector<int> order(kEpochs);
  for (int i = 0; i < kEpochs; ++i) order[static_cast<std::size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), std::minstd_rand(7));
  std::vector<bool> ended(kEpochs, false);
  for (const int which : order) {
    barrier.end(tickets[static_cast<std::size_t>(which)], nullptr);
    ended[static_cast<std::size_t>(which)] = true;
    for (int i = 0; i < kEpochs; i += 37) {
      EXPECT_EQ(barrier.reached(spans[static_cast<std::size_t>(i)]), ended[static_cast<std::size_t>(i)]) << i;
    }
    EXPECT_TRUE(barrier.reached(spans[static_cast<std::size_t>(which)]));
  }
  EXPECT_EQ(barrier.stats().held, 0u);
}

// A wait that returns kReached finds the done cell of every attachment it covers set: end() stores the
// cell before it ends the ticket (and before the wake and the listener write that ending it may make; a
// listener is registered, so that each ending of an old count makes that write).
TEST(HandBackBarrier, AReachedWaitFindsEveryCoveredCellSet) {
  constexpr int kRounds = 2000;
  HandBackBarrier barrier;
  ASSERT_GE(barrier.listener_fd(), 0);
  barrier.add_listener();
  std::atomic<std::uint32_t> cells[2];
  std::atomic<int> handed{-1};  // the round whose ticket the other thread ends, -1: none yet
  std::atomic<int> ticket_of_round{-1};
  std::atomic<bool> stop{false};
  std::thread hand_back([&] {
    int round = 0;
    while (!stop.load()) {
      if (handed.load() != round) {
        std::this_thread::yield();
        continue;
      }
      barrier.end(ticket_of_round.load(), &cells[round % 2]);
      ++round;
    }
  });
  int unset = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<std::uint32_t>& cell = cells[round % 2];
    cell.store(0);
    ticket_of_round.store(barrier.begin());
    const Span span = barrier.request(0);
    handed.store(round);
    const WaitResult result = round % 2 == 0 ? barrier.wait(span, kLongEnough) : [&] {
      while (!barrier.reached(span)) {
      }
      return WaitResult::kReached;
    }();
    ASSERT_EQ(result, WaitResult::kReached);
    if (cell.load() == 0) ++unset;
    while (cell.load() == 0) {
    }  // the other thread finishes its end() before the cell is used again
  }
  stop.store(true);
  hand_back.join();
  barrier.remove_listener();
  EXPECT_EQ(unset, 0) << "waits that returned kReached before the covered cell was set, of " << kRounds;
}

// Four threads wait for four cells that stay held while a thousand other attachments are handed back with
// cells of their own: a cell sleeper wakes for its own cell's bucket only, never for every hand-back.
TEST(HandBackBarrier, ACellSleeperIsNotWokenByOtherCellsHandBacks) {
  constexpr int kWaiters = 4;
  constexpr int kOthers = 1000;
  HandBackBarrier barrier;
  std::atomic<std::uint32_t> mine[kWaiters];
  int my_tickets[kWaiters];
  for (int i = 0; i < kWaiters; ++i) {
    mine[i].store(0);
    my_tickets[i] = barrier.begin();
  }
  std::vector<std::unique_ptr<Waiter>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::make_unique<Waiter>([&, i] { return barrier.wait_cell(mine[i], kLongEnough); }));
  }
  for (auto& waiter : waiters) ASSERT_TRUE(waiter->until_asleep());
  const HandBackBarrier::Stats before = barrier.stats();
  EXPECT_EQ(before.sleepers, static_cast<std::uint32_t>(kWaiters));

  std::unique_ptr<std::atomic<std::uint32_t>[]> others(new std::atomic<std::uint32_t>[kOthers]);
  for (int i = 0; i < kOthers; ++i) {
    others[i].store(0);
    barrier.end(barrier.begin(), &others[i]);
    EXPECT_EQ(others[i].load(), 1u);
  }
  const HandBackBarrier::Stats after = barrier.stats();
  for (auto& waiter : waiters) EXPECT_FALSE(waiter->returned());
  // A shared bucket wakes a sleeper now and then (about kWaiters * kOthers / kCellBuckets in all); a
  // shared word would wake each of them once per hand-back.
  EXPECT_LT(after.cell_wakeups - before.cell_wakeups, 40u);
  EXPECT_LT(after.futex_wakes - before.futex_wakes, 40u);

  for (int i = 0; i < kWaiters; ++i) barrier.end(my_tickets[i], &mine[i]);
  for (auto& waiter : waiters) EXPECT_EQ(waiter->join(), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().sleepers, 0u);
  EXPECT_EQ(barrier.stats().held, 0u);
}

// A burst of held epochs (a graph each, attached in its own epoch) and what it leaves once it ends. While
// held, a wait since a later mark reads the word of the mark's count alone, not the burst. Once every ticket
// ended, the next switch vacates the burst's counts: one count stays occupied (the current one), a wait on a
// fresh span reads one word and one count past the group words, and new epochs take the lowest counts again.
// The table's high-water mark stays where the burst left it.
TEST(HandBackBarrier, AnEndedBurstOfHeldEpochsLeavesOneOccupiedCount) {
  constexpr int kBurst = 10000;
  // Group words that cover kBurst + 2 counts (4,096 counts each): what reached() reads before any count.
  constexpr std::uint64_t kGroups = (kBurst + 2 + 4095) / 4096;
  HandBackBarrier barrier;
  std::vector<int> held;
  for (int i = 0; i < kBurst; ++i) {
    held.push_back(barrier.begin());
    barrier.request(0);
  }
  HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.counts_in_use, kBurst);
  EXPECT_EQ(stats.counts_occupied, kBurst + 1);  // and the current count
  EXPECT_EQ(stats.shared_counts, 0u);

  const std::uint64_t mark = barrier.mark();
  const int after = barrier.begin();
  const Span since_mark = barrier.request(mark);
  EXPECT_FALSE(barrier.reached(since_mark));
  barrier.end(after, nullptr);
  HandBackBarrier::Stats before = barrier.stats();
  EXPECT_TRUE(barrier.reached(since_mark));
  HandBackBarrier::Stats read = barrier.stats();
  EXPECT_LE(read.reached_words - before.reached_words, kGroups + 1);
  EXPECT_LE(read.reached_counts - before.reached_counts, 64u);  // the counts of one word at most
  EXPECT_FALSE(barrier.reached(barrier.request(0)));  // the burst is still held

  for (const int ticket : held) barrier.end(ticket, nullptr);
  const Span fresh = barrier.request(0);  // the switch that vacates the burst's counts
  stats = barrier.stats();
  EXPECT_EQ(stats.held, 0u);
  EXPECT_EQ(stats.counts_in_use, 0);
  EXPECT_EQ(stats.counts_occupied, 1);
  EXPECT_GT(stats.counts_used, kBurst);  // the high-water mark does not shrink
  before = barrier.stats();
  EXPECT_TRUE(barrier.reached(fresh));
  read = barrier.stats();
  EXPECT_LE(read.reached_words - before.reached_words, kGroups + 1);
  EXPECT_LE(read.reached_counts - before.reached_counts, 1u);

  // New epochs take the lowest counts, and a span over them reads their word alone.
  const int first = barrier.begin();
  const Span one = barrier.request(0);
  const int second = barrier.begin();
  const Span two = barrier.request(0);
  EXPECT_LT(first, 64);
  EXPECT_LT(second, 64);
  EXPECT_NE(first, second);
  EXPECT_EQ(barrier.stats().counts_occupied, 3);
  barrier.end(second, nullptr);
  EXPECT_FALSE(barrier.reached(one));
  EXPECT_FALSE(barrier.reached(two));  // `two` covers `first`'s epoch too
  barrier.end(first, nullptr);
  EXPECT_TRUE(barrier.reached(one));
  EXPECT_TRUE(barrier.reached(two));
  barrier.mark();
  EXPECT_EQ(barrier.stats().counts_occupied, 1);
}

// The fork reset leaves count 0 current and the only occupied count, whatever the parent held; epochs,
// marks and the table's size go on.
TEST(HandBackBarrier, ResetAfterForkLeavesSlotZeroTheOnlyOccupiedSlot) {
  constexpr int kEpochs = 200;
  HandBackBarrier barrier;
  for (int i = 0; i < kEpochs; ++i) {
    barrier.begin();
    barrier.request(0);
  }
  const std::uint64_t since = barrier.mark();
  barrier.reset_after_fork();
  HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.counts_occupied, 1);
  EXPECT_EQ(stats.held, 0u);
  EXPECT_GT(stats.counts_used, kEpochs);
  EXPECT_EQ(barrier.begin(), 0);  // two tickets of the epoch after the reset, in count 0
  EXPECT_EQ(barrier.begin(), 0);
  const Span held = barrier.request(since);
  EXPECT_FALSE(barrier.reached(held));
  const int later = barrier.begin();
  EXPECT_EQ(later, 1);  // the lowest free count
  barrier.end(0, nullptr);
  barrier.end(0, nullptr);
  EXPECT_TRUE(barrier.reached(held));
  barrier.end(later, nullptr);
  barrier.request(0);
  EXPECT_EQ(barrier.stats().counts_occupied, 1);
}

// Producers begin and end tickets in random order, one in 64 held for long (up to 32 per producer, across
// many epochs), while two waiters mark now and then, request, wait or spin on reached(), and look again at
// the last spans they requested: counts empty, are vacated and taken again all the time, and a span that is
// reached never covers a ticket still held (one whose begin() returned before its request).
TEST(HandBackBarrier, StressNoReachedSpanWhileSlotsAreVacatedAndTakenAgain) {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 25000;
  constexpr int kTickets = kProducers * kPerProducer;
  constexpr int kWaiters = 2;
  HandBackBarrier barrier;
  std::unique_ptr<std::atomic<bool>[]> ended(new std::atomic<bool>[kTickets]);
  for (int i = 0; i < kTickets; ++i) ended[i].store(false);
  std::atomic<int> numbered{0};
  std::atomic<int> producers_left{kProducers};
  std::atomic<int> violations{0};
  std::atomic<int> not_reached{0};
  std::atomic<int> reached{0};

  std::vector<std::thread> threads;
  for (int t = 0; t < kProducers; ++t) {
    threads.emplace_back([&, t] {
      std::minstd_rand random(static_cast<unsigned>(t) + 11);
      struct Held {
        int ticket;
        int number;
      };
      std::vector<Held> brief;
      std::vector<Held> long_lived;
      const auto end_one = [&](std::vector<Held>& held, std::size_t pick) {
        const Held back = held[pick];
        held[pick] = held.back();
        held.pop_back();
        ended[back.number].store(true);
        barrier.end(back.ticket, nullptr);
      };
      for (int i = 0; i < kPerProducer; ++i) {
        const int ticket = barrier.begin();
        const Held held{ticket, numbered.fetch_add(1)};
        (random() % 64 == 0 ? long_lived : brief).push_back(held);
        while (!brief.empty() && random() % 3 != 0) end_one(brief, random() % brief.size());
        if (long_lived.size() > 32) end_one(long_lived, random() % long_lived.size());
        if (random() % 64 == 0) std::this_thread::yield();
      }
      while (!brief.empty()) end_one(brief, brief.size() - 1);
      while (!long_lived.empty()) end_one(long_lived, long_lived.size() - 1);
      producers_left.fetch_sub(1);
    });
  }
  for (int w = 0; w < kWaiters; ++w) {
    threads.emplace_back([&, w] {
      std::minstd_rand random(static_cast<unsigned>(w) + 101);
      int verified = 0;  // tickets [0, verified) were all seen ended; flags are never cleared
      // A span found reached: every ticket numbered below `before` (taken before its request) has ended.
      const auto check = [&](int before) {
        while (verified < before && ended[verified].load()) ++verified;
        for (int i = verified; i < before; ++i) {
          if (!ended[i].load()) violations.fetch_add(1);
        }
      };
      struct Requested {
        Span span;
        int before;
      };
      std::vector<Requested> earlier;  // the last spans requested, looked at again each round
      while (producers_left.load() != 0) {
        if (random() % 4 == 0) barrier.mark();  // two switches in a row
        const int before = numbered.load();
        const Span span = barrier.request(0);
        for (const Requested& old : earlier) {
          if (barrier.reached(old.span)) check(old.before);
        }
        if (earlier.size() == 16) earlier.erase(earlier.begin());
        earlier.push_back({span, before});
        bool ok;
        if (random() % 2 == 0) {
          ok = barrier.wait(span, kLongEnough) == WaitResult::kReached;
        } else {
          const std::int64_t deadline = monotonic_ns() + kLongEnough;
          while (!(ok = barrier.reached(span)) && monotonic_ns() < deadline) std::this_thread::yield();
        }
        if (!ok) {
          not_reached.fetch_add(1);
          continue;
        }
        reached.fetch_add(1);
        check(before);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(not_reached.load(), 0);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(reached.load(), 0);
  EXPECT_EQ(barrier.stats().held, 0u);
  const Span last = barrier.request(0);
  EXPECT_EQ(barrier.wait(last, kLongEnough), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().counts_occupied, 1);
}

// shut() wakes cell sleepers whatever their bucket.
TEST(HandBackBarrier, ShutWakesCellSleepersOfEveryBucket) {
  constexpr int kWaiters = 8;
  HandBackBarrier barrier;
  std::atomic<std::uint32_t> cells[kWaiters];
  for (auto& cell : cells) cell.store(0);
  std::vector<std::unique_ptr<Waiter>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::make_unique<Waiter>([&, i] { return barrier.wait_cell(cells[i], kNoLimit); }));
  }
  for (auto& waiter : waiters) ASSERT_TRUE(waiter->until_asleep());
  barrier.shut();
  for (auto& waiter : waiters) EXPECT_EQ(waiter->join(), WaitResult::kShut);
  EXPECT_EQ(barrier.stats().sleepers, 0u);
}

}  // namespace
