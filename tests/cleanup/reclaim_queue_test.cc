// Behaviour of ReclaimQueue on one thread: push, drain, budget, close, leak counting, re-entrancy.
#include "cleanup/reclaim_queue.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "cleanup/queue_allocation.h"
#include "gtest/gtest.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::PushStatus;
using reclaim::ReclaimQueue;
using reclaim_test::each_item;
using reclaim_test::item_for;
using reclaim_test::ReleaseRecorder;

TEST(ReclaimQueue, NewQueueIsOpenEmptyAndConserved) {
  ReclaimQueue queue;
  EXPECT_FALSE(queue.is_closed());
  EXPECT_EQ(queue.pending(), 0u);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.handed_over, 0u);
  EXPECT_TRUE(counters.conserved());
}

TEST(ReclaimQueue, PushThenDrainReleasesEachItemOnce) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1000);
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(queue.push(item_for(i)), PushStatus::kQueued);
  EXPECT_EQ(queue.pending(), 1000u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 1000u);
  for (std::size_t i = 0; i < 1000; ++i) EXPECT_EQ(recorder.count(i), 1) << "item " << i;
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.handed_over, 1000u);
  EXPECT_EQ(counters.released, 1000u);
  EXPECT_EQ(counters.pending, 0u);
  EXPECT_EQ(counters.nonempty_drains, 1u);
  EXPECT_EQ(counters.max_pending, 1000u);
  EXPECT_TRUE(counters.conserved());
}

TEST(ReclaimQueue, EmptyDrainReturnsZeroWithoutCountingACall) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 0u);
  EXPECT_EQ(queue.snapshot().nonempty_drains, 0u);
  EXPECT_EQ(recorder.total(), 0u);
}

TEST(ReclaimQueue, NullPushIsInvalidAndCountsNothing) {
  ReclaimQueue queue;
  EXPECT_EQ(queue.push(nullptr), PushStatus::kInvalidArgument);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.handed_over, 0u);
  EXPECT_EQ(counters.rejected, 0u);
  EXPECT_EQ(counters.pending, 0u);
}

TEST(ReclaimQueue, DrainHonoursBudget) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1000);
  for (std::size_t i = 0; i < 1000; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder, 100), 100u);
  EXPECT_EQ(recorder.total(), 100u);
  EXPECT_EQ(queue.pending(), 900u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder, 1), 1u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder, 0), 0u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 899u);
  for (std::size_t i = 0; i < 1000; ++i) EXPECT_EQ(recorder.count(i), 1);
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(ReclaimQueue, CloseReleasesWhatIsQueued) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(10);
  for (std::size_t i = 0; i < 10; ++i) queue.push(item_for(i));
  EXPECT_EQ(queue.close(each_item<ReleaseRecorder::release>, &recorder), 10u);
  EXPECT_TRUE(queue.is_closed());
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(recorder.count(i), 1);
  EXPECT_EQ(queue.pending(), 0u);
}

TEST(ReclaimQueue, PushAfterCloseCountsLeakAndNeverReleases) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(3);
  queue.close(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_EQ(queue.push(item_for(0)), PushStatus::kLeakedAfterClose);
  EXPECT_EQ(queue.push(item_for(1)), PushStatus::kLeakedAfterClose);
  EXPECT_EQ(queue.pending(), 0u);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 0u);
  EXPECT_EQ(queue.close(each_item<ReleaseRecorder::release>, &recorder), 0u);
  EXPECT_EQ(recorder.total(), 0u);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.handed_over, 2u);
  EXPECT_EQ(counters.leaked_after_close, 2u);
  EXPECT_EQ(counters.released, 0u);
  EXPECT_TRUE(counters.conserved());
}

TEST(ReclaimQueue, CloseIsIdempotent) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1);
  queue.push(item_for(0));
  EXPECT_EQ(queue.close(each_item<ReleaseRecorder::release>, &recorder), 1u);
  EXPECT_EQ(queue.close(each_item<ReleaseRecorder::release>, &recorder), 0u);
  EXPECT_TRUE(queue.is_closed());
  EXPECT_EQ(recorder.count(0), 1);
}

TEST(ReclaimQueue, CloseWithoutReleaseLeavesItemsPendingAndConserved) {
  ReclaimQueue queue;
  for (std::size_t i = 0; i < 5; ++i) queue.push(item_for(i));
  queue.close_without_release();
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.pending, 5u);
  EXPECT_EQ(counters.released, 0u);
  EXPECT_TRUE(counters.conserved());
}

// A release action that, like a Python __del__, hands over more work and drains again.
struct ReentrantOwner {
  ReclaimQueue* queue;
  ReleaseRecorder* recorder;
  std::size_t next_id;
  std::size_t limit;
  int depth = 0;
  int max_depth = 0;

  static void release(void* item, void* self) noexcept {
    auto* owner = static_cast<ReentrantOwner*>(self);
    ReleaseRecorder::release(item, owner->recorder);
    if (owner->next_id < owner->limit) owner->queue->push(item_for(owner->next_id++));
    if (owner->depth < 8) {
      ++owner->depth;
      if (owner->depth > owner->max_depth) owner->max_depth = owner->depth;
      owner->queue->drain(each_item<ReentrantOwner::release>, owner, 3);
      --owner->depth;
    }
  }
};

TEST(ReclaimQueue, ReleaseThatPushesAndDrainsAgainIsSafe) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(5000);
  ReentrantOwner owner{&queue, &recorder, 100, 5000};
  for (std::size_t i = 0; i < 100; ++i) queue.push(item_for(i));
  std::size_t total = 0;
  while (queue.pending() != 0) total += queue.drain(each_item<ReentrantOwner::release>, &owner);
  EXPECT_GT(owner.max_depth, 1) << "the test must exercise nested drains";
  EXPECT_EQ(recorder.total(), 5000u);
  for (std::size_t i = 0; i < 5000; ++i) ASSERT_EQ(recorder.count(i), 1) << "item " << i;
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.handed_over, 5000u);
  EXPECT_EQ(counters.released, 5000u);
  EXPECT_TRUE(counters.conserved());
  EXPECT_LE(total, 5000u);
}

// A release action that closes the queue from inside the drain.
struct Closer {
  ReclaimQueue* queue;
  ReleaseRecorder* recorder;
  static void release(void* item, void* self) noexcept {
    auto* closer = static_cast<Closer*>(self);
    ReleaseRecorder::release(item, closer->recorder);
    closer->queue->close(each_item<ReleaseRecorder::release>, closer->recorder);
  }
};

// Stands in for CPython's pthread_exit forced unwind out of a finalizer during interpreter shutdown: the
// release of id `throw_on_id` unwinds; with `out_of_memory`, the queue's allocator fails from then on.
struct Unwinding {
  ReleaseRecorder* recorder;
  std::size_t throw_on_id;
  std::atomic<bool>* out_of_memory = nullptr;
  static void release(void* item, void* self) {
    auto* unwinding = static_cast<Unwinding*>(self);
    ReleaseRecorder::release(item, unwinding->recorder);
    if (reclaim_test::id_of(item) != unwinding->throw_on_id) return;
    if (unwinding->out_of_memory != nullptr) *unwinding->out_of_memory = true;
    throw std::runtime_error("unwind");
  }
};

TEST(ReclaimQueue, ReleaseThatClosesMidDrainLeavesNothingBehind) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(600);
  for (std::size_t i = 0; i < 600; ++i) queue.push(item_for(i));
  Closer closer{&queue, &recorder};
  queue.drain(each_item<Closer::release>, &closer);
  EXPECT_TRUE(queue.is_closed());
  for (std::size_t i = 0; i < 600; ++i) ASSERT_EQ(recorder.count(i), 1) << "item " << i;
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(ReclaimQueue, UnwindingReleaseKeepsTheRestOfTheBatchPending) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(100);
  for (std::size_t i = 0; i < 100; ++i) queue.push(item_for(i));
  Unwinding unwinding{&recorder, 10};
  EXPECT_THROW(queue.drain(each_item<Unwinding::release>, &unwinding), std::runtime_error);
  EXPECT_EQ(recorder.total(), 11u);
  auto counters = queue.snapshot();
  EXPECT_EQ(counters.released, 11u);
  EXPECT_EQ(counters.pending, 89u);
  EXPECT_TRUE(counters.conserved());
  // The rest is released by the next drain, each item once.
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 89u);
  for (std::size_t i = 0; i < 100; ++i) ASSERT_EQ(recorder.count(i), 1) << "item " << i;
  EXPECT_TRUE(queue.snapshot().conserved());
}

std::atomic<bool> out_of_memory{false};

TEST(ReclaimQueue, AnUnwindWhoseRequeueRunsOutOfMemoryCountsTheRestAsRejected) {
  // The requeue goes through the draining thread's own producer, which needs memory the first time: when
  // there is none at that moment, the rest of the batch can be stored nowhere. It must not stay counted
  // as released: it is counted as a push that could not be stored (rejected, leaked).
  ReclaimQueue queue;
  ReleaseRecorder recorder(100);
  std::thread producer([&] {  // another thread's producer: the draining thread has none yet
    for (std::size_t i = 0; i < 100; ++i) ASSERT_EQ(queue.push(item_for(i)), PushStatus::kQueued);
  });
  producer.join();
  reclaim::set_queue_allocator_for_testing(
      [](std::size_t size) noexcept -> void* { return out_of_memory ? nullptr : std::malloc(size); });
  Unwinding unwinding{&recorder, 10, &out_of_memory};
  EXPECT_THROW(queue.drain(each_item<Unwinding::release>, &unwinding), std::runtime_error);
  reclaim::set_queue_allocator_for_testing(nullptr);
  const reclaim::CounterSnapshot counters = queue.snapshot();
  EXPECT_EQ(recorder.total(), 11u);
  EXPECT_EQ(counters.released, 11u) << "only what an action ran for counts as released";
  EXPECT_EQ(counters.rejected, 89u);
  EXPECT_EQ(counters.pending, 0u);
  EXPECT_TRUE(counters.conserved());
}

TEST(ReclaimQueue, MaybePendingFollowsTheWakeupSignal) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(1);
  EXPECT_FALSE(queue.maybe_pending());
  queue.push(item_for(0));
  EXPECT_TRUE(queue.maybe_pending());
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_FALSE(queue.maybe_pending());
}

TEST(ReclaimQueue, ReportLineHoldsEveryCounterAndTheLaw) {
  reclaim::CounterSnapshot counters;
  counters.handed_over = 7;
  counters.released = 4;
  counters.pending = 1;
  counters.leaked_after_close = 2;
  counters.rejected = 3;
  counters.eventfd_writes = 5;
  char line[512];
  const std::size_t length = reclaim::format_report(counters, line, sizeof line);
  const std::string text(line, length);
  EXPECT_EQ(text,
            "cuda-reclaim: handed_over=7 released=4 pending=1 leaked_after_close=2 rejected=3 "
            "abandoned_after_fork=0 nonempty_drains=0 max_pending=0 eventfd_writes=5 in_drain=0 trims=0 conserved=yes\n");
  counters.released = 3;
  const std::size_t broken = reclaim::format_report(counters, line, sizeof line);
  EXPECT_NE(std::string(line, broken).find("conserved=no"), std::string::npos);
}

TEST(ReclaimQueue, ReportTruncatesToTheBuffer) {
  char line[16];
  std::memset(line, 'x', sizeof line);
  const std::size_t length = reclaim::format_report(reclaim::CounterSnapshot(), line, sizeof line);
  EXPECT_EQ(length, sizeof line - 1);
  EXPECT_EQ(line[sizeof line - 1], '\0');
  EXPECT_EQ(reclaim::format_report(reclaim::CounterSnapshot(), nullptr, 0), 0u);
}

TEST(ReclaimQueue, MaxPendingIsAtLeastPendingInEverySnapshot) {
  ReclaimQueue queue;
  for (std::size_t i = 0; i < 10; ++i) {
    queue.push(item_for(i));
    const auto counters = queue.snapshot();
    EXPECT_EQ(counters.pending, i + 1);
    EXPECT_GE(counters.max_pending, counters.pending);
  }
  ReleaseRecorder recorder(10);
  queue.drain(each_item<ReleaseRecorder::release>, &recorder);
  EXPECT_EQ(queue.snapshot().max_pending, 10u) << "a high-water mark never goes down";
}

TEST(ReclaimQueue, ParseReservedCapacityAcceptsOnlyDecimalsInRange) {
  std::size_t capacity = 7;
  EXPECT_TRUE(reclaim::parse_reserved_capacity("1", &capacity));
  EXPECT_EQ(capacity, 1u);
  EXPECT_TRUE(reclaim::parse_reserved_capacity("16777216", &capacity));
  EXPECT_EQ(capacity, reclaim::kMaxReservedCapacity);
  capacity = 7;
  for (const char* bad : {"", "0", "-1", "12k", " 5", "16777217", "2261669771489293824",
                          "99999999999999999999999999999"}) {
    EXPECT_FALSE(reclaim::parse_reserved_capacity(bad, &capacity)) << bad;
    EXPECT_EQ(capacity, 7u) << "left unchanged on " << bad;
  }
  EXPECT_FALSE(reclaim::parse_reserved_capacity(nullptr, &capacity));
}

TEST(ReclaimQueue, LargestReservedCapacityConstructsAndWorks) {
  reclaim::QueueOptions options;
  options.reserved_capacity = reclaim::kMaxReservedCapacity;
  ReclaimQueue queue(options);
  ReleaseRecorder recorder(1);
  EXPECT_EQ(queue.push(item_for(0)), PushStatus::kQueued);
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 1u);
}

}  // namespace
