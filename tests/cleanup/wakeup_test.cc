// The wake-up eventfd: readable iff work is pending, one write per empty→non-empty edge, cleared by the
// drain that empties the queue, and a blocking wait with a timeout.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "tests/cleanup/fd_readable.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::ReclaimQueue;
using reclaim_test::each_item;
using reclaim_test::item_for;
using reclaim_test::readable;
using reclaim_test::ReleaseRecorder;

TEST(WakeupFd, NotReadableWhileEmpty) {
  ReclaimQueue queue;
  EXPECT_GE(queue.wakeup_fd(), 0);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
  EXPECT_FALSE(queue.wait_for_work(0));
}

TEST(WakeupFd, ReadableAfterPushAndClearedByEmptyingDrain) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1);
  queue.push(item_for(0));
  EXPECT_TRUE(readable(queue.wakeup_fd()));
  EXPECT_TRUE(queue.wait_for_work(0));
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
}

TEST(WakeupFd, OneWritePerEmptyToNonEmptyEdge) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(300);
  for (std::size_t i = 0; i < 100; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.snapshot().eventfd_writes, 1u);
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
  for (std::size_t i = 100; i < 300; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.snapshot().eventfd_writes, 2u);
  // The eventfd counter itself holds exactly one write for the 200 pushes of this edge.
  std::uint64_t count = 0;
  ASSERT_EQ(::read(queue.wakeup_fd(), &count, sizeof count), static_cast<ssize_t>(sizeof count));
  EXPECT_EQ(count, 1u);
}

TEST(WakeupFd, StaysReadableWhenBudgetLeavesWork) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(10);
  for (std::size_t i = 0; i < 10; ++i) queue.push(item_for(i));
  queue.drain(each_item<ReleaseRecorder::release>, &recorder, 4);
  EXPECT_TRUE(readable(queue.wakeup_fd()));
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
}

TEST(WakeupFd, WaitReturnsWhenAnotherThreadPushes) {
  ReclaimQueue queue;
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    queue.push(item_for(0));
  });
  // A generous limit: the wait must end because of the push, not the timeout.
  EXPECT_TRUE(queue.wait_for_work(30000));
  producer.join();
  EXPECT_EQ(queue.pending(), 1u);
}

TEST(WakeupFd, WaitTimesOutWhenNothingArrives) {
  ReclaimQueue queue;
  EXPECT_FALSE(queue.wait_for_work(20));
}

TEST(WakeupFd, LingeringDrainLetsLaterPushesSkipTheWriteUntilTheNextDrain) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(300);
  queue.push(item_for(0));
  EXPECT_EQ(queue.snapshot().eventfd_writes, 1u);
  EXPECT_EQ(queue.drain_and_linger(each_item<ReleaseRecorder::release>, &recorder), 1u);
  EXPECT_FALSE(readable(queue.wakeup_fd())) << "an event loop watching the fd goes quiet";
  EXPECT_TRUE(queue.maybe_pending()) << "the signal stays set while lingering";
  for (std::size_t i = 1; i < 200; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.snapshot().eventfd_writes, 1u) << "pushes while lingering make no eventfd write";
  EXPECT_EQ(queue.drain_and_linger(each_item<ReleaseRecorder::release>, &recorder), 199u);
  // Nothing arrived since: this drain releases nothing and clears the signal for real.
  EXPECT_EQ(queue.drain_and_linger(each_item<ReleaseRecorder::release>, &recorder), 0u);
  EXPECT_FALSE(queue.maybe_pending());
  queue.push(item_for(200));
  EXPECT_EQ(queue.snapshot().eventfd_writes, 2u) << "after the clear, the next edge writes again";
  EXPECT_TRUE(readable(queue.wakeup_fd()));
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 1u);
  for (std::size_t i = 0; i <= 200; ++i) EXPECT_EQ(recorder.count(i), 1);
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(WakeupFd, LingeringDrainThatLeavesWorkKeepsTheFdReadable) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(10);
  for (std::size_t i = 0; i < 10; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.drain_and_linger(each_item<ReleaseRecorder::release>, &recorder, 4), 4u);
  EXPECT_TRUE(readable(queue.wakeup_fd()));
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 6u);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
}

TEST(WakeupFd, ClosingDrainClearsTheFd) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(3);
  for (std::size_t i = 0; i < 3; ++i) queue.push(item_for(i));
  queue.close(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
  queue.push(item_for(0));  // leaked after close: no work, so no wake-up.
  EXPECT_FALSE(readable(queue.wakeup_fd()));
}

TEST(WakeupFd, EndLingerWithWorkPendingMakesTheFdReadable) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(3);
  queue.push(item_for(0));
  EXPECT_EQ(queue.drain_and_linger(each_item<ReleaseRecorder::release>, &recorder), 1u);
  queue.push(item_for(1));  // skips the write: the signal is still set
  queue.push(item_for(2));
  EXPECT_FALSE(readable(queue.wakeup_fd()));
  queue.end_linger();  // a stopping drain thread will not drain again
  EXPECT_TRUE(readable(queue.wakeup_fd())) << "pending work must stay visible to other drainers";
  EXPECT_TRUE(queue.maybe_pending());
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 2u);
  EXPECT_FALSE(readable(queue.wakeup_fd()));
}

TEST(WakeupFd, EndLingerWithNothingPendingClearsTheSignalSoTheNextPushWrites) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(2);
  queue.push(item_for(0));
  EXPECT_EQ(queue.drain_and_linger(each_item<ReleaseRecorder::release>, &recorder), 1u);
  EXPECT_TRUE(queue.maybe_pending());
  queue.end_linger();
  EXPECT_FALSE(queue.maybe_pending());
  EXPECT_FALSE(readable(queue.wakeup_fd()));
  const auto before = queue.snapshot().eventfd_writes;
  queue.push(item_for(1));
  EXPECT_EQ(queue.snapshot().eventfd_writes, before + 1) << "no lost wake-up after a linger ends";
  EXPECT_TRUE(readable(queue.wakeup_fd()));
}

TEST(WakeupFd, CloseWakesABlockedWaiterAndEveryLaterWait) {
  ReclaimQueue queue;
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_TRUE(queue.wait_for_work(-1));  // no limit: only close() can end it
    returned = true;
  });
  queue.close_without_release();
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_TRUE(queue.wait_for_work(-1)) << "a wait after close returns at once";
  EXPECT_FALSE(readable(queue.wakeup_fd())) << "the public fd still means work, not closed";
}

TEST(WakeupFd, WaitAlsoReturnsForTheExtraFd) {
  ReclaimQueue queue;
  ReclaimQueue other;  // its wake-up fd stands in for a drain thread's stop signal
  EXPECT_FALSE(queue.wait_for_work_or(other.wakeup_fd(), 0));
  other.push(item_for(0));
  EXPECT_TRUE(queue.wait_for_work_or(other.wakeup_fd(), -1));
  EXPECT_FALSE(readable(queue.wakeup_fd()));
  ReleaseRecorder recorder(1);
  EXPECT_EQ(other.drain(each_item<ReleaseRecorder::release>, &recorder), 1u);
}

}  // namespace

namespace {

// A drain that clears the signal races with pushes that read it as still set and skip their write: the
// drain must then see the push's lane taken or its item, and re-arm. With two producers pushing one item
// at a time and an owner that sleeps in wait_for_work() between emptying drains, a lost wake-up shows as
// work pending while the fd stays silent (a wait that times out with items queued, and no write on the
// way). Every wait here is bounded; nothing is timed.
TEST(WakeupFd, EmptyingDrainsRacingWithPushesNeverLoseTheWakeup) {
  ReclaimQueue queue;
  constexpr std::size_t kPerProducer = 20000;
  ReleaseRecorder recorder(2 * kPerProducer);
  std::atomic<int> producers_left{2};
  auto produce = [&](std::size_t first) {
    for (std::size_t i = first; i < first + kPerProducer; ++i) {
      queue.push(item_for(i));
      if (i % 64 == 0) std::this_thread::yield();  // let the owner empty the queue now and then
    }
    producers_left.fetch_sub(1);
  };
  std::thread a(produce, 0), b(produce, kPerProducer);
  std::size_t lost = 0;
  while (recorder.total() < 2 * kPerProducer) {
    if (!queue.wait_for_work(200)) {
      // Timed out. Items may be pending only if a push is between its enqueue and its write: give it time
      // to write, then it must have.
      if (queue.pending() != 0 && !queue.wait_for_work(2000) && queue.pending() != 0) ++lost;
    }
    queue.drain(each_item<ReleaseRecorder::release>, &recorder);
    if (producers_left.load() == 0 && queue.pending() == 0 && recorder.total() < 2 * kPerProducer) break;
  }
  a.join();
  b.join();
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(recorder.total(), 2 * kPerProducer);
}

}  // namespace
