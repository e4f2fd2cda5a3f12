// trim(): giving back the memory a burst left behind. Nothing queued is lost or released by a trim, the
// counters do not change, pushes and drains on other threads go on meanwhile, a trim from inside a
// release action is refused rather than waiting for itself, and an allocation failure while moving keeps
// every pointer reachable.
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cleanup/queue_allocation.h"
#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "tests/cleanup/parked_allocations.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::CounterSnapshot;
using reclaim::PushStatus;
using reclaim::QueueOptions;
using reclaim::ReclaimQueue;
using reclaim::TrimStatus;
using reclaim_test::each_item;
using reclaim_test::item_for;
using reclaim_test::ParkedAllocations;
using reclaim_test::ReleaseRecorder;

QueueOptions small_reserve() {
  QueueOptions options;
  options.reserved_capacity = 1024;
  return options;
}

// Pushes ids [first, first + count) from a thread of its own (a producer lane other than the test's).
void push_from_thread(ReclaimQueue& queue, std::size_t first, std::size_t count) {
  std::thread producer([&] {
    for (std::size_t i = first; i < first + count; ++i) ASSERT_EQ(queue.push(item_for(i)), PushStatus::kQueued);
  });
  producer.join();
}

void expect_same_counters(const CounterSnapshot& a, const CounterSnapshot& b) {
  EXPECT_EQ(a.handed_over, b.handed_over);
  EXPECT_EQ(a.released, b.released);
  EXPECT_EQ(a.pending, b.pending);
  EXPECT_EQ(a.leaked_after_close, b.leaked_after_close);
  EXPECT_EQ(a.rejected, b.rejected);
}

TEST(Trim, NothingToFreeBelowTheReservedCapacity) {
  ReclaimQueue queue(small_reserve());
  EXPECT_EQ(queue.trim(), TrimStatus::kNotNeeded);
  ReleaseRecorder recorder(100);
  push_from_thread(queue, 0, 100);
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_FALSE(queue.trim_would_help());
  EXPECT_EQ(queue.trim(), TrimStatus::kNotNeeded);
}

TEST(Trim, AfterABurstMovesWhatIsPendingAndKeepsTheCounters) {
  ReclaimQueue queue(small_reserve());
  constexpr std::size_t kBurst = 50000, kLeft = 300;
  ReleaseRecorder recorder(kBurst + 10);
  push_from_thread(queue, 0, kBurst);
  ASSERT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder, kBurst - kLeft), kBurst - kLeft);
  ASSERT_TRUE(queue.trim_would_help());
  const CounterSnapshot before = queue.snapshot();
  EXPECT_EQ(queue.trim(), TrimStatus::kTrimmed);
  const CounterSnapshot after = queue.snapshot();
  expect_same_counters(before, after);
  EXPECT_TRUE(after.conserved());
  EXPECT_EQ(after.pending, kLeft);
  EXPECT_FALSE(queue.trim_would_help());
  // Pushes after the trim land in the new storage; a drain releases old and new alike, each once.
  push_from_thread(queue, kBurst, 10);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), kLeft + 10);
  for (std::size_t id = 0; id < kBurst + 10; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(Trim, FreesTheHeap) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator does not report through mallinfo2()";
#endif
  ReclaimQueue queue(small_reserve());
  constexpr std::size_t kBurst = 1 << 20;
  ReleaseRecorder recorder(kBurst);  // before the baseline: 4 MiB of its own
  const std::size_t baseline = mallinfo2().uordblks + mallinfo2().hblkhd;
  push_from_thread(queue, 0, kBurst);
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  const std::size_t drained = mallinfo2().uordblks + mallinfo2().hblkhd;
  ASSERT_EQ(queue.trim(), TrimStatus::kTrimmed);
  const std::size_t trimmed = mallinfo2().uordblks + mallinfo2().hblkhd;
  // A burst of 2^20 pointers holds about 8 MiB of blocks; after the trim, what stays is the reserve and
  // the producers of the lanes used since.
  EXPECT_GT(drained - baseline, std::size_t{7} << 20);
  EXPECT_LT(trimmed - baseline, std::size_t{1} << 20);
}

TEST(Trim, FromInsideAReleaseActionIsRefused) {
  ReclaimQueue queue(small_reserve());
  push_from_thread(queue, 0, 5000);
  struct Context {
    ReclaimQueue* queue;
    TrimStatus status = TrimStatus::kNotNeeded;
    std::size_t released = 0;
  } context{&queue};
  queue.drain(
      [](reclaim::ReleaseBatch* batch, void* self) {
        auto* c = static_cast<Context*>(self);
        for (; batch->next < batch->count; ++batch->next) {
          if (c->released++ == 0) c->status = c->queue->trim();
        }
      },
      &context);
  EXPECT_EQ(context.status, TrimStatus::kBusy);
  EXPECT_EQ(context.released, 5000u);
  EXPECT_EQ(queue.trim(), TrimStatus::kTrimmed);  // afterwards, from outside
}

TEST(Trim, ClosedQueueHasNothingToTrim) {
  ReclaimQueue queue(small_reserve());
  ReleaseRecorder recorder(5000);
  push_from_thread(queue, 0, 5000);
  queue.close(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_EQ(queue.trim(), TrimStatus::kNotNeeded);
}

TEST(Trim, OutOfMemoryWhileMovingKeepsEveryPointerReachable) {
  ReclaimQueue queue(small_reserve());
  constexpr std::size_t kBurst = 20000;
  ReleaseRecorder recorder(kBurst + 1);
  push_from_thread(queue, 0, kBurst);  // nothing drained: all of it must move
  // The new storage's block pool is its first allocation and succeeds; every allocation after it (the
  // moving producer, the blocks beyond the 1024 reserved pointers) fails.
  static std::atomic<int> allowed;
  allowed = 1;
  reclaim::set_queue_allocator_for_testing([](std::size_t size) noexcept -> void* {
    return allowed.fetch_sub(1) > 0 ? std::malloc(size) : nullptr;
  });
  const TrimStatus first = queue.trim();
  reclaim::set_queue_allocator_for_testing(nullptr);
  EXPECT_EQ(first, TrimStatus::kBusy);
  EXPECT_EQ(queue.pending(), kBurst);  // split between the previous storage and the new one
  EXPECT_TRUE(queue.snapshot().conserved());
  // A later trim finishes the move; every pointer is released once.
  EXPECT_EQ(queue.trim(), TrimStatus::kTrimmed);
  push_from_thread(queue, kBurst, 1);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), kBurst + 1);
  for (std::size_t id = 0; id <= kBurst; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
}

TEST(Trim, RacesWithProducersAndDrainsLoseNothing) {
  ReclaimQueue queue(small_reserve());
  constexpr std::size_t kThreads = 4, kPerThread = 200000;
  ReleaseRecorder recorder(kThreads * kPerThread);
  std::atomic<bool> producing{true};
  std::vector<std::thread> producers;
  for (std::size_t t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (std::size_t i = 0; i < kPerThread; ++i) queue.push(item_for(t * kPerThread + i));
    });
  }
  std::thread drainer([&] {
    while (producing.load()) queue.drain(each_item<ReleaseRecorder::release>, &recorder, 4096);
  });
  std::size_t trims = 0;
  while (recorder.total() < kThreads * kPerThread / 2) {
    if (queue.trim() == TrimStatus::kTrimmed) ++trims;
    std::this_thread::yield();
  }
  for (auto& producer : producers) producer.join();
  producing = false;
  drainer.join();
  queue.close(each_item<ReleaseRecorder::release>, &recorder);
  const CounterSnapshot counters = queue.snapshot();
  EXPECT_TRUE(counters.conserved());
  EXPECT_EQ(counters.released, kThreads * kPerThread);
  for (std::size_t id = 0; id < kThreads * kPerThread; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  std::printf("trims that freed memory during the race: %zu\n", trims);
}

// One producer lane and one block reserved: a burst of two blocks is worth trimming, and a second pusher
// finds the lane taken and takes the lane-less path.
QueueOptions one_lane_one_block() {
  QueueOptions options;
  options.reserved_capacity = 256;
  options.producer_lanes = 1;
  return options;
}

enum Role { kHolder, kLaneless, kTrimmer };

// Two blocks pending through the one lane: a burst worth trimming.
void push_two_blocks(ReclaimQueue& queue) {
  for (std::size_t i = 0; i < 512; ++i) ASSERT_EQ(queue.push(item_for(i)), PushStatus::kQueued);
}

// A thread that plays `role` (parks at its first allocation inside the queue) and pushes item `id`.
std::thread push_playing(ReclaimQueue& queue, Role role, std::size_t id) {
  return std::thread([&queue, role, id] {
    ParkedAllocations::play(role);
    EXPECT_EQ(queue.push(item_for(id)), PushStatus::kQueued);
  });
}

// A lane-less push admitted before a trim and still enqueueing into the old storage keeps that storage
// alive, even when a lane-less push admitted after the trim's exchange (into the new storage) completes
// first: the trim waits for the pushes in flight, not for a count of completions to reach a number.
TEST(Trim, WaitsForALanelessPushAdmittedBeforeItEvenWhenALaterOneCompletesFirst) {
  ReclaimQueue queue(one_lane_one_block());
  ReleaseRecorder recorder(600);
  ASSERT_NO_FATAL_FAILURE(push_two_blocks(queue));
  ParkedAllocations parked;
  // The holder takes the lane and parks allocating a third block.
  std::thread holder = push_playing(queue, kHolder, 512);
  ASSERT_TRUE(ParkedAllocations::wait_parked(kHolder));
  // This push finds the lane taken: lane-less, admitted while open, parked inside the current storage
  // while its implicit producer is made.
  std::thread early = push_playing(queue, kLaneless, 513);
  ASSERT_TRUE(ParkedAllocations::wait_parked(kLaneless));
  std::atomic<bool> trimmed{false};
  std::thread trimmer([&] {
    EXPECT_EQ(queue.trim(), TrimStatus::kTrimmed);
    trimmed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the trim exchanges, then waits for the lane
  ParkedAllocations::release(kHolder);  // the trim takes the lane and keeps it to move what is pending
  holder.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The lane is the trim's now: another lane-less push, admitted after the exchange, completes at once.
  std::thread late([&] { EXPECT_EQ(queue.push(item_for(514)), PushStatus::kQueued); });
  late.join();
  EXPECT_FALSE(ParkedAllocations::wait_for(trimmed, 300)) << "the old storage was freed under a push";
  ParkedAllocations::release(kLaneless);
  early.join();
  trimmer.join();
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 515u);
  for (std::size_t i = 0; i < 515; ++i) ASSERT_EQ(recorder.count(i), 1) << "item " << i;
  const CounterSnapshot counters = queue.snapshot();
  EXPECT_TRUE(counters.conserved());
  EXPECT_EQ(counters.released, 515u);
}

// A close() that comes in while a trim makes its new storage, and a push after it that finds every lane
// taken (CUDA's thread at exit): that push is a leak, which never completes, and the trim must not wait for
// it (it would wait for ever, and every drain, close and counter read with it).
TEST(Trim, ACloseAndALateLanelessPushDuringATrimDoNotHoldItUp) {
  ReclaimQueue queue(one_lane_one_block());
  ASSERT_NO_FATAL_FAILURE(push_two_blocks(queue));
  ParkedAllocations parked;
  std::thread holder = push_playing(queue, kHolder, 512);
  ASSERT_TRUE(ParkedAllocations::wait_parked(kHolder));
  // The trim finds the queue open and worth trimming, then parks making its new storage.
  std::atomic<bool> trimmed{false};
  std::thread trimmer([&] {
    ParkedAllocations::play(kTrimmer);
    (void)queue.trim();
    trimmed = true;
  });
  ASSERT_TRUE(ParkedAllocations::wait_parked(kTrimmer));
  std::thread closer([&] { queue.close_without_release(); });
  while (!queue.is_closed()) std::this_thread::yield();
  EXPECT_EQ(queue.push(item_for(600)), PushStatus::kLeakedAfterClose);  // the lane is taken: lane-less
  ParkedAllocations::release(kHolder);
  holder.join();
  closer.join();
  ParkedAllocations::release(kTrimmer);
  ASSERT_TRUE(ParkedAllocations::wait_for(trimmed, 5000)) << "the trim waits for a leak to complete";
  trimmer.join();
  const CounterSnapshot counters = queue.snapshot();
  EXPECT_TRUE(counters.conserved());
  EXPECT_EQ(counters.leaked_after_close, 1u);
  EXPECT_EQ(counters.pending, 513u);
}

}  // namespace
