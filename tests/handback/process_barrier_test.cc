// tests/handback/process_barrier_test.cc — the process's hand-back barrier (handback/process_barrier.h),
// linked without the queue: its own fork child handler resets it, its entry points count in it, a signal
// ends its wait, and its shut ends a wait that is asleep. The shut is for good, so the test that shuts runs
// last in this binary.

#include "handback/process_barrier.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "gtest/gtest.h"

namespace {

using reclaim::handback::HandBackBarrier;
using reclaim::handback::process_barrier;

TEST(ProcessBarrier, EntriesCountInTheProcessBarrier) {
  const std::uint64_t held = process_barrier().stats().held;
  const int ticket = reclaim::handback::hand_back_begin();
  ASSERT_GE(ticket, 0);
  EXPECT_EQ(process_barrier().stats().held, held + 1);
  EXPECT_EQ(reclaim::handback::wait_handed_back(0.0), 0) << "a held ticket: not handed back";
  std::uint32_t done = 0;
  reclaim::handback::hand_back_end(ticket, &done);
  EXPECT_EQ(done, 1u);
  EXPECT_EQ(process_barrier().stats().held, held);
  EXPECT_EQ(reclaim::handback::wait_handed_back(0.0), 1);
}

void note_signal(int) {}

// A signal ends the entry's wait with -1 (the caller checks its signals: a C program's Ctrl-C must end a wait
// for a stream that never hands back), and while it lasts the wait covers only what was attached before it.
TEST(ProcessBarrier, ASignalEndsTheWaitWithMinusOneAndAWaitNeverCoversWhatCameDuringIt) {
  struct sigaction action = {};
  action.sa_handler = note_signal;  // no SA_RESTART: the futex wait returns EINTR
  struct sigaction previous;
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  const int before = reclaim::handback::hand_back_begin();
  std::atomic<int> result{-2};
  std::thread waiter([&result] { result = reclaim::handback::wait_handed_back(30.0); });
  while (process_barrier().stats().sleepers == 0) std::this_thread::yield();
  while (result == -2) {  // the first signal may land before the futex wait: send until one ends it
    pthread_kill(waiter.native_handle(), SIGUSR1);
    std::this_thread::yield();
  }
  waiter.join();
  EXPECT_EQ(result, -1) << "a signal ends the wait";
  result = -2;
  std::thread second([&result] { result = reclaim::handback::wait_handed_back(30.0); });
  while (process_barrier().stats().sleepers == 0) std::this_thread::yield();
  const int during = reclaim::handback::hand_back_begin();  // after the wait began: not covered
  reclaim::handback::hand_back_end(before, nullptr);
  second.join();
  EXPECT_EQ(result, 1) << "the wait covers what was attached before it, not what came during it";
  reclaim::handback::hand_back_end(during, nullptr);
  ASSERT_EQ(sigaction(SIGUSR1, &previous, nullptr), 0);
}

// No queue is linked into this binary: the reset comes from the barrier's own pthread_atfork handler.
TEST(ProcessBarrier, AForkChildStartsWithNoTicketsAndAnOpenBarrier) {
  const int ticket = reclaim::handback::hand_back_begin();
  const std::uint64_t forks = process_barrier().forks();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes name the first check that failed.
    const HandBackBarrier::Stats stats = process_barrier().stats();
    if (process_barrier().forks() != forks + 1) _exit(10);
    if (stats.held != 0) _exit(11);
    if (process_barrier().is_shut()) _exit(12);
    if (reclaim::handback::wait_handed_back(0.0) != 1) _exit(13);  // the parent's ticket is not waited for
    reclaim::handback::hand_back_end(ticket, nullptr);               // a parent's ticket ends nothing here
    if (process_barrier().stats().held != 0) _exit(14);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(process_barrier().forks(), forks);
  EXPECT_EQ(process_barrier().stats().held, 1u) << "the parent keeps its ticket";
  reclaim::handback::hand_back_end(ticket, nullptr);
}

// Last in this binary: the shut is for good.
TEST(ProcessBarrier, ShutEndsAWaitAsleepAndEveryLaterOneWithZero) {
  const int ticket = reclaim::handback::hand_back_begin();
  std::atomic<int> result{-2};
  std::thread waiter([&] { result.store(reclaim::handback::wait_handed_back(-1.0)); });
  // The condition itself: the waiter is asleep on the barrier's futex.
  while (process_barrier().stats().sleepers == 0) std::this_thread::yield();
  reclaim::handback::shut_process_barrier();
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_TRUE(process_barrier().is_shut());
  EXPECT_EQ(reclaim::handback::wait_handed_back(-1.0), 0);  // no limit: still 0 at once
  reclaim::handback::hand_back_end(ticket, nullptr);
  EXPECT_EQ(reclaim::handback::wait_handed_back(0.0), 0);  // nothing held, but shut
}

}  // namespace
