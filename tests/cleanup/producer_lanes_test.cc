// Producer lanes: memory and drain cost stay bounded however many distinct threads ever pushed, every
// item is released exactly once when more threads push at once than there are lanes (overflow path), and
// a thread keeps reusing its lane.
#include <atomic>
#include <thread>
#include <vector>

#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::QueueOptions;
using reclaim::ReclaimQueue;
using reclaim_test::each_item;
using reclaim_test::item_for;
using reclaim_test::ReleaseRecorder;

// Under ThreadSanitizer or AddressSanitizer a thread start costs ~50x more: 10^4 threads there, 10^5 in
// the plain build.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kShortLivedThreads = 10000;
#else
constexpr std::size_t kShortLivedThreads = 100000;
#endif

TEST(ProducerLanes, HundredThousandShortLivedThreadsUseNoMoreThanTheLanes) {
  constexpr std::size_t kThreads = kShortLivedThreads;
  constexpr std::size_t kAlive = 64;  // threads alive at a time, as a thread pool per batch would have
  ReclaimQueue queue;
  ReleaseRecorder recorder(kThreads);
  std::size_t next = 0;
  while (next < kThreads) {
    std::vector<std::thread> wave;
    for (std::size_t i = 0; i < kAlive && next < kThreads; ++i, ++next) {
      wave.emplace_back([&queue, id = next] { queue.push(item_for(id)); });
    }
    for (std::thread& thread : wave) thread.join();
    queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  }
  const reclaim::ProducerUse use = queue.producer_use();
  EXPECT_LE(use.lanes_used, use.lane_count);
  EXPECT_EQ(use.lane_count, QueueOptions().producer_lanes);
  // Each overflow push may add one per-thread producer; there can be no more of them than pushes.
  EXPECT_LE(use.overflow_pushes, kThreads);
  EXPECT_EQ(recorder.total(), kThreads);
  for (std::size_t id = 0; id < kThreads; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  EXPECT_TRUE(queue.snapshot().conserved());
  std::printf("[ measured ] %zu threads: %zu of %zu producer lanes used, %llu overflow pushes\n", kThreads,
              use.lanes_used, use.lane_count, static_cast<unsigned long long>(use.overflow_pushes));
}

TEST(ProducerLanes, OneThreadKeepsOneLane) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1000);
  for (std::size_t i = 0; i < 1000; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.producer_use().lanes_used, 1u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 1000u);
}

TEST(ProducerLanes, MoreConcurrentPushersThanLanesLoseNothing) {
  QueueOptions options;
  options.producer_lanes = 1;  // every concurrent push beyond one takes the overflow path
  ReclaimQueue queue(options);
  constexpr std::size_t kThreads = 8, kEach = 20000;
  ReleaseRecorder recorder(kThreads * kEach);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (std::size_t i = 0; i < kEach; ++i) queue.push(item_for(t * kEach + i));
    });
  }
  go = true;
  std::size_t released = 0;
  while (released < kThreads * kEach) released += queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(queue.producer_use().lanes_used, 1u);
  for (std::size_t id = 0; id < kThreads * kEach; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(ProducerLanes, ZeroLanesMeansOne) {
  QueueOptions options;
  options.producer_lanes = 0;
  ReclaimQueue queue(options);
  ReleaseRecorder recorder(1);
  EXPECT_EQ(queue.push(item_for(0)), reclaim::PushStatus::kQueued);
  EXPECT_EQ(queue.producer_use().lane_count, 1u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 1u);
}

}  // namespace
