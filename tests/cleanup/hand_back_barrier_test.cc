// tests/cleanup/hand_back_barrier_test.cc — reclaim::HandBackBarrier: grace periods over tickets taken with
// begin() and given back with end() in any order, the waits on them (futex), the listener eventfd, close()
// and the fork reset, and a stress run that checks the barrier's promise under concurrency.

#include "cleanup/hand_back_barrier.h"

#include <sys/syscall.h>
#include <unistd.h>

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

using reclaim::HandBackBarrier;
using WaitResult = HandBackBarrier::WaitResult;

constexpr std::int64_t kNoLimit = -1;
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
  const std::uint64_t target = barrier.request();
  EXPECT_EQ(target, 1u);
  EXPECT_TRUE(barrier.advance(target));
  EXPECT_EQ(barrier.wait(target, 0), WaitResult::kReached);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.started, 1u);
  EXPECT_EQ(stats.completed, 1u);
  EXPECT_EQ(stats.held[0], 0u);
  EXPECT_EQ(stats.held[1], 0u);
}

TEST(HandBackBarrier, EndsOutOfOrderReachOnlyWithTheLast) {
  HandBackBarrier barrier;
  const int first = barrier.begin();
  const int second = barrier.begin();
  ASSERT_EQ(first, 0);
  ASSERT_EQ(second, 0);
  EXPECT_EQ(barrier.stats().held[0], 2u);
  const std::uint64_t target = barrier.request();
  EXPECT_FALSE(barrier.advance(target));
  EXPECT_EQ(barrier.stats().current, 1);

  barrier.end(second, nullptr);
  EXPECT_FALSE(barrier.advance(target));
  EXPECT_EQ(barrier.wait(target, 0), WaitResult::kTimedOut);
  EXPECT_EQ(barrier.stats().held[0], 1u);

  barrier.end(first, nullptr);
  EXPECT_TRUE(barrier.advance(target));
  EXPECT_EQ(barrier.wait(target, 0), WaitResult::kReached);
  EXPECT_EQ(barrier.stats().held[0], 0u);
}

TEST(HandBackBarrier, BeginAfterRequestDoesNotDelayIt) {
  HandBackBarrier barrier;
  const int before = barrier.begin();
  const std::uint64_t target = barrier.request();
  const int after = barrier.begin();
  EXPECT_NE(before, after);  // the new bucket
  barrier.end(before, nullptr);
  EXPECT_TRUE(barrier.advance(target));  // `after` is still held
  EXPECT_EQ(barrier.stats().held[after], 1u);
  barrier.end(after, nullptr);
}

TEST(HandBackBarrier, RequestDuringAPeriodIsTheNextOneStartedByAdvance) {
  HandBackBarrier barrier;
  const int first = barrier.begin();
  const std::uint64_t target = barrier.request();
  const int second = barrier.begin();  // after the first request: in the new bucket
  const std::uint64_t next = barrier.request();
  EXPECT_EQ(next, target + 1);
  EXPECT_EQ(barrier.stats().started, target);  // the next one is not started yet

  barrier.end(first, nullptr);
  EXPECT_TRUE(barrier.advance(target));
  EXPECT_EQ(barrier.stats().started, target);
  EXPECT_FALSE(barrier.advance(next));  // starts it: `second` began before the second request
  EXPECT_EQ(barrier.stats().started, next);

  const int third = barrier.begin();  // after the next period started: does not delay it
  barrier.end(second, nullptr);
  EXPECT_TRUE(barrier.advance(next));
  EXPECT_EQ(barrier.stats().completed, next);
  barrier.end(third, nullptr);
}

TEST(HandBackBarrier, WaitTimesOut) {
  HandBackBarrier barrier;
  const int ticket = barrier.begin();
  const std::uint64_t target = barrier.request();
  EXPECT_EQ(barrier.wait(target, 0), WaitResult::kTimedOut);
  EXPECT_EQ(barrier.wait(target, 20 * 1000 * 1000), WaitResult::kTimedOut);  // 20 ms, through the futex
  barrier.end(ticket, nullptr);
  EXPECT_EQ(barrier.wait(target, 0), WaitResult::kReached);
}

TEST(HandBackBarrier, CloseWakesAWaiterWithClosed) {
  HandBackBarrier barrier;
  const int ticket = barrier.begin();
  const std::uint64_t target = barrier.request();
  Waiter waiter([&] { return barrier.wait(target, kNoLimit); });
  ASSERT_TRUE(waiter.until_asleep());
  EXPECT_FALSE(waiter.returned());
  barrier.close();
  EXPECT_EQ(waiter.join(), WaitResult::kClosed);
  EXPECT_TRUE(barrier.is_closed());
  EXPECT_EQ(barrier.wait(target, kNoLimit), WaitResult::kClosed);  // later waits too
  std::atomic<std::uint32_t> cell{0};
  EXPECT_EQ(barrier.wait_cell(cell, kNoLimit), WaitResult::kClosed);
  barrier.end(ticket, nullptr);
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
  EXPECT_EQ(barrier.stats().futex_wakes, 1u);  // the cell's sleeper; no grace period ended
  EXPECT_EQ(barrier.wait_cell(done, 0), WaitResult::kReached);
}

TEST(HandBackBarrier, NoFutexWakeWithoutASleeper) {
  HandBackBarrier barrier;
  std::atomic<std::uint32_t> done{0};
  const int ticket = barrier.begin();
  const std::uint64_t target = barrier.request();
  barrier.end(ticket, &done);
  EXPECT_TRUE(barrier.advance(target));
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.futex_wakes, 0u);
  EXPECT_EQ(stats.listener_writes, 0u);
  EXPECT_EQ(stats.started, 1u);
  EXPECT_EQ(stats.completed, 1u);
}

TEST(HandBackBarrier, OneSleeperGetsExactlyOneWake) {
  HandBackBarrier barrier;
  const int ticket = barrier.begin();
  const std::uint64_t target = barrier.request();
  Waiter waiter([&] { return barrier.wait(target, kLongEnough); });
  ASSERT_TRUE(waiter.until_asleep());
  barrier.end(ticket, nullptr);
  EXPECT_EQ(waiter.join(), WaitResult::kReached);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.futex_wakes, 1u);
  EXPECT_EQ(stats.completed, 1u);
  EXPECT_EQ(stats.listener_writes, 0u);
}

TEST(HandBackBarrier, ListenerFdIsWrittenOnlyWithAListener) {
  HandBackBarrier barrier;
  const int fd = barrier.listener_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(barrier.listener_fd(), fd);  // stable

  // No listener registered: a period ends, the fd stays quiet.
  int ticket = barrier.begin();
  std::uint64_t target = barrier.request();
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.advance(target));
  EXPECT_FALSE(reclaim_test::readable(fd));
  EXPECT_EQ(barrier.stats().listener_writes, 0u);

  // One listener: readable once the period ends, not before.
  barrier.add_listener();
  ticket = barrier.begin();
  target = barrier.request();
  EXPECT_FALSE(reclaim_test::readable(fd));
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(reclaim_test::readable(fd));
  EXPECT_TRUE(barrier.advance(target));
  EXPECT_EQ(barrier.stats().listener_writes, 1u);
  barrier.consume_listener_fd();
  EXPECT_FALSE(reclaim_test::readable(fd));
  barrier.remove_listener();

  // Unregistered again: quiet again.
  ticket = barrier.begin();
  target = barrier.request();
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.advance(target));
  EXPECT_FALSE(reclaim_test::readable(fd));
}

TEST(HandBackBarrier, ResetAfterForkLeavesNoTicketsAndAnOpenBarrier) {
  HandBackBarrier barrier;
  const int fd = barrier.listener_fd();
  ASSERT_GE(fd, 0);
  barrier.add_listener();
  barrier.begin();
  barrier.begin();
  const std::uint64_t target = barrier.request();
  barrier.begin();  // in the other bucket
  barrier.close();
  EXPECT_TRUE(reclaim_test::readable(fd));  // close() wrote it

  barrier.reset_after_fork();  // called directly: this process stands in for the child

  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.held[0], 0u);
  EXPECT_EQ(stats.held[1], 0u);
  EXPECT_EQ(stats.completed, stats.started);  // no period in progress
  EXPECT_FALSE(barrier.is_closed());
  EXPECT_EQ(barrier.listener_fd(), fd);        // same number
  EXPECT_FALSE(reclaim_test::readable(fd));    // a fresh eventfd behind it
  EXPECT_TRUE(barrier.advance(target));
  const std::uint64_t next = barrier.request();
  EXPECT_TRUE(barrier.advance(next));
  EXPECT_EQ(barrier.wait(next, 0), WaitResult::kReached);
  // The barrier still works: a new ticket holds a new period.
  const int ticket = barrier.begin();
  const std::uint64_t held = barrier.request();
  EXPECT_FALSE(barrier.advance(held));
  barrier.end(ticket, nullptr);
  EXPECT_TRUE(barrier.advance(held));
}

TEST(HandBackBarrier, TimeoutToNs) {
  EXPECT_EQ(reclaim::timeout_to_ns(-1.0), -1);
  EXPECT_EQ(reclaim::timeout_to_ns(std::nan("")), -1);
  EXPECT_EQ(reclaim::timeout_to_ns(1e12), -1);
  EXPECT_EQ(reclaim::timeout_to_ns(0.0), 0);
  EXPECT_EQ(reclaim::timeout_to_ns(1.5), 1500000000);
}

// Several threads begin and end tickets in random order while a waiter requests and waits: every wait
// that returns kReached must come after the end() of every ticket whose begin() returned before its
// request(). A ticket's number is taken after its begin() returned and its flag is set before its end().
TEST(HandBackBarrier, StressEveryReachedWaitFollowsTheEndsBeforeItsRequest) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25000;
  constexpr int kTickets = kThreads * kPerThread;
  HandBackBarrier barrier;
  std::unique_ptr<std::atomic<bool>[]> ended(new std::atomic<bool>[kTickets]);
  for (int i = 0; i < kTickets; ++i) ended[i].store(false);
  std::atomic<int> numbered{0};
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
        const int ticket = barrier.begin();
        held.push_back({ticket, numbered.fetch_add(1)});
        // Give back a random held ticket now and then, so that ends come in any order.
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
    const int before = numbered.load();
    const std::uint64_t target = barrier.request();
    WaitResult result;
    if (random() % 2 == 0) {
      result = barrier.wait(target, kLongEnough);
    } else {
      while (!barrier.advance(target)) std::this_thread::yield();
      result = WaitResult::kReached;
    }
    if (result != WaitResult::kReached) {
      ++not_reached;
      continue;
    }
    ++reached;
    while (verified < before && ended[verified].load()) ++verified;
    for (int i = verified; i < before; ++i) {
      if (!ended[i].load()) ++violations;
    }
  }
  for (std::thread& producer : producers) producer.join();

  EXPECT_EQ(not_reached, 0);
  EXPECT_EQ(violations, 0);
  EXPECT_GT(reached, 0);
  const HandBackBarrier::Stats stats = barrier.stats();
  EXPECT_EQ(stats.held[0], 0u);
  EXPECT_EQ(stats.held[1], 0u);
  const std::uint64_t last = barrier.request();
  EXPECT_EQ(barrier.wait(last, kLongEnough), WaitResult::kReached);
}

}  // namespace
