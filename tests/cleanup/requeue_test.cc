// What a release action may do besides releasing: settle early, requeue an item, halt the drain; and the
// in_drain bucket that counts what a drain took and has not finished.
#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::PushStatus;
using reclaim::ReclaimQueue;
using reclaim::ReleaseBatch;
using reclaim_test::id_of;
using reclaim_test::item_for;

// An action that releases items in order, records them, and halts before the item `halt_before`, or
// requeues every item whose id is a multiple of `requeue_every` (0: none). It also checks the law from
// inside, with the items it holds counted as in_drain.
struct Scripted {
  ReclaimQueue* queue;
  std::vector<std::size_t> released;
  std::size_t halt_before = SIZE_MAX;
  std::size_t requeue_every = 0;
  bool law_held_inside = true;
  std::uint64_t in_drain_seen = 0;

  static void action(ReleaseBatch* batch, void* self_pointer) {
    auto* self = static_cast<Scripted*>(self_pointer);
    for (; batch->next < batch->count; ++batch->next) {
      const std::size_t id = id_of(batch->items[batch->next]);
      if (id == self->halt_before) {
        batch->halt = true;
        return;
      }
      if (self->requeue_every != 0 && id % self->requeue_every == 0) {
        ReclaimQueue::requeue(batch, batch->items[batch->next]);
        continue;
      }
      const auto counters = self->queue->snapshot();
      self->law_held_inside = self->law_held_inside && counters.conserved();
      if (counters.in_drain > self->in_drain_seen) self->in_drain_seen = counters.in_drain;
      self->released.push_back(id);
    }
  }
};

void push_ids(ReclaimQueue& queue, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i) ASSERT_EQ(queue.push(item_for(i)), PushStatus::kQueued);
}

TEST(Requeue, ItemsBeingReleasedCountAsInDrainAndTheLawHoldsInsideTheAction) {
  ReclaimQueue queue;
  push_ids(queue, 0, 300);
  Scripted script{&queue};
  EXPECT_EQ(queue.drain(Scripted::action, &script), 300u);
  EXPECT_TRUE(script.law_held_inside);
  EXPECT_GT(script.in_drain_seen, 0u);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.in_drain, 0u);
  EXPECT_EQ(counters.released, 300u);
  EXPECT_TRUE(counters.conserved());
}

TEST(Requeue, AnActionThatHaltsRequeuesTheRestAndTheNextDrainTakesItFirstInOrder) {
  ReclaimQueue queue;
  push_ids(queue, 0, 1000);  // more than one dequeue: the rest of the batch and the queue behind it
  Scripted script{&queue};
  script.halt_before = 100;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 100u);
  auto counters = queue.snapshot();
  EXPECT_EQ(counters.released, 100u);
  EXPECT_EQ(counters.in_drain, 0u);
  EXPECT_EQ(counters.pending, 900u);
  EXPECT_TRUE(counters.conserved());
  push_ids(queue, 1000, 1100);  // arrives after the requeue: must come after it
  script.halt_before = SIZE_MAX;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 1000u);
  ASSERT_EQ(script.released.size(), 1100u);
  for (std::size_t i = 0; i < 1100; ++i) EXPECT_EQ(script.released[i], i) << "at " << i;
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(Requeue, RequeuedItemsArePendingNotTakenAgainByTheSameDrainAndReleasedByTheNext) {
  ReclaimQueue queue;
  push_ids(queue, 0, 100);
  Scripted script{&queue};
  script.requeue_every = 10;  // ids 0, 10, ..., 90
  EXPECT_EQ(queue.drain(Scripted::action, &script), 90u);
  auto counters = queue.snapshot();
  EXPECT_EQ(counters.pending, 10u);
  EXPECT_EQ(counters.released, 90u);
  EXPECT_EQ(counters.in_drain, 0u);
  EXPECT_TRUE(counters.conserved());
  EXPECT_TRUE(queue.maybe_pending()) << "requeued without a wake-up";
  // Requeued again: the next drain takes them first, once each, and stops there.
  EXPECT_EQ(queue.drain(Scripted::action, &script), 0u);
  EXPECT_EQ(queue.snapshot().pending, 10u);
  script.requeue_every = 0;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 10u);
  EXPECT_EQ(queue.snapshot().pending, 0u);
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(Requeue, CloseReleasesWhatWasRequeued) {
  ReclaimQueue queue;
  push_ids(queue, 0, 10);
  Scripted script{&queue};
  script.halt_before = 3;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 3u);
  script.halt_before = SIZE_MAX;
  EXPECT_EQ(queue.close(Scripted::action, &script), 7u);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.released, 10u);
  EXPECT_EQ(counters.pending, 0u);
  EXPECT_TRUE(counters.conserved());
}

TEST(Requeue, SettlingBeforeALongStepCountsWhatIsDone) {
  ReclaimQueue queue;
  push_ids(queue, 0, 10);
  struct Observer {
    ReclaimQueue* queue;
    std::uint64_t released_before_last = 0;
    static void action(ReleaseBatch* batch, void* self_pointer) {
      auto* self = static_cast<Observer*>(self_pointer);
      const std::size_t last = batch->count - 1;
      ReclaimQueue::settle(batch, last);  // everything before the last item is done
      self->released_before_last = self->queue->snapshot().released;
      batch->next = batch->count;
    }
  } observer{&queue};
  EXPECT_EQ(queue.drain(Observer::action, &observer), 10u);
  EXPECT_EQ(observer.released_before_last, 9u);
  EXPECT_EQ(queue.snapshot().released, 10u);
}

TEST(Requeue, TrimsAreCounted) {
  reclaim::QueueOptions options;
  options.reserved_capacity = 256;
  ReclaimQueue queue(options);
  push_ids(queue, 0, 5000);
  Scripted script{&queue};
  EXPECT_EQ(queue.drain(Scripted::action, &script), 5000u);
  EXPECT_EQ(queue.snapshot().trims, 0u);
  EXPECT_EQ(queue.trim(), reclaim::TrimStatus::kTrimmed);
  EXPECT_EQ(queue.snapshot().trims, 1u);
  EXPECT_EQ(queue.trim(), reclaim::TrimStatus::kNotNeeded);
  EXPECT_EQ(queue.snapshot().trims, 1u);
}


// What another thread requeued sits in that thread's producer of the front storage; what this drain requeues
// back goes into its own. The front is taken producer by producer, newest producer first, so a drain that
// took only part of the front in its first dequeue must not reach its own requeues in the next one.
TEST(Requeue, ADrainNeverTakesAgainWhatItRequeuedWhenAnotherThreadsRequeuesAreAtTheFront) {
  ReclaimQueue queue;
  push_ids(queue, 0, 1100);  // more than one dequeue's worth
  std::thread other([&queue] {
    Scripted everything_back{&queue};
    everything_back.requeue_every = 1;  // every id: all 1100 go to the front, through this thread
    EXPECT_EQ(queue.drain(Scripted::action, &everything_back), 0u);
  });
  other.join();
  ASSERT_EQ(queue.snapshot().pending, 1100u);
  Scripted script{&queue};
  script.requeue_every = 10;  // 110 of the 1100 go back, each once
  EXPECT_EQ(queue.drain(Scripted::action, &script), 990u);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.released, 990u);
  EXPECT_EQ(counters.pending, 110u);
  EXPECT_TRUE(counters.conserved());
  // Everything that was at the front when the drain began was taken by it, in order.
  ASSERT_EQ(script.released.size(), 990u);
  std::size_t expected = 0;
  for (std::size_t i = 0; i < script.released.size(); ++i, ++expected) {
    if (expected % 10 == 0) ++expected;
    ASSERT_EQ(script.released[i], expected) << "at " << i;
  }
}

// A drain that halts requeues the rest of its dequeue "first, in order": ahead of whatever arrived in the
// queue after that dequeue, also when a drain nested in the release (a finalizer draining again, the gc
// mode's hook) requeued those later items meanwhile.
TEST(Requeue, TheRestOfAHaltedDrainStaysAheadOfLaterItemsANestedDrainRequeued) {
  ReclaimQueue queue;
  push_ids(queue, 0, 10);
  struct Outer {
    ReclaimQueue* queue;
    std::vector<std::size_t> released;
    static void action(ReleaseBatch* batch, void* self_pointer) {
      auto* self = static_cast<Outer*>(self_pointer);
      for (; batch->next < batch->count; ++batch->next) {
        const std::size_t id = id_of(batch->items[batch->next]);
        if (id == 3) {
          // Later items arrive; a nested drain requeues them (items its release action does not release).
          push_ids(*self->queue, 10, 20);
          Scripted nested{self->queue};
          nested.requeue_every = 1;
          EXPECT_EQ(self->queue->drain(Scripted::action, &nested), 0u);
          batch->halt = true;  // then this drain is told to halt before id 3
          return;
        }
        self->released.push_back(id);
      }
    }
  } outer{&queue};
  EXPECT_EQ(queue.drain(Outer::action, &outer), 3u);
  EXPECT_EQ(queue.snapshot().pending, 17u);
  EXPECT_TRUE(queue.snapshot().conserved());
  Scripted script{&queue};
  EXPECT_EQ(queue.drain(Scripted::action, &script), 17u);
  ASSERT_EQ(script.released.size(), 17u);
  for (std::size_t i = 0; i < 17; ++i) EXPECT_EQ(script.released[i], i + 3) << "at " << i;
}


// A burst that went through the front (2^20 items a drain requeued, or the rest of a batch that a stopped
// drain thread gave back) is a burst like any other: once drained, trim() frees its memory, as
// Trim.FreesTheHeap checks for one that went through the storage alone.
TEST(Requeue, TrimFreesTheMemoryOfABurstThatWentThroughTheFront) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizer's allocator does not report through mallinfo2()";
#else
  reclaim::QueueOptions options;
  options.reserved_capacity = 1024;
  ReclaimQueue queue(options);
  constexpr std::size_t kBurst = 1 << 20;
  Scripted everything_back{&queue};
  everything_back.requeue_every = 1;
  Scripted release_all{&queue};
  release_all.released.reserve(kBurst);  // before the baseline: 8 MiB of its own
  const std::size_t baseline = ::mallinfo2().uordblks + ::mallinfo2().hblkhd;
  std::thread producer([&queue] { push_ids(queue, 0, kBurst); });
  producer.join();
  EXPECT_EQ(queue.drain(Scripted::action, &everything_back), 0u);  // all of it to the front
  EXPECT_EQ(queue.drain(Scripted::action, &release_all), kBurst);
  EXPECT_EQ(queue.snapshot().pending, 0u);
  const std::size_t drained = ::mallinfo2().uordblks + ::mallinfo2().hblkhd;
  ASSERT_EQ(queue.trim(), reclaim::TrimStatus::kTrimmed);
  const std::size_t trimmed = ::mallinfo2().uordblks + ::mallinfo2().hblkhd;
  std::printf("[ measured ] drained: %zu bytes above the baseline, trimmed: %zu\n", drained - baseline,
              trimmed - baseline);
  EXPECT_GT(drained - baseline, std::size_t{6} << 20);  // the storage's blocks (the front's went when emptied)
  EXPECT_LT(trimmed - baseline, std::size_t{1} << 20) << "the front keeps the burst's blocks after trim()";
#endif
}


// `released` counts only finished releases and in_drain is a bucket of the law, so the law an extension
// compiles in (reclaim_stats_conserved) holds inside a release action, where a law without in_drain does
// not.
TEST(Requeue, InsideAReleaseActionTheLawHoldsWithInDrainAndOnlyWithIt) {
  ReclaimQueue queue;
  push_ids(queue, 0, 10);
  struct Reader {
    ReclaimQueue* queue;
    bool law_with_in_drain = true;
    bool law_without_in_drain_ever_failed = false;
    static void action(ReleaseBatch* batch, void* self_pointer) {
      auto* self = static_cast<Reader*>(self_pointer);
      for (; batch->next < batch->count; ++batch->next) {
        const reclaim_stats c = self->queue->snapshot().as_c();
        self->law_with_in_drain = self->law_with_in_drain && reclaim_stats_conserved(&c);
        self->law_without_in_drain_ever_failed =
            self->law_without_in_drain_ever_failed ||
            c.handed_over != c.released + c.pending + c.leaked_after_close + c.abandoned_after_fork;
      }
    }
  } reader{&queue};
  EXPECT_EQ(queue.drain(Reader::action, &reader), 10u);
  EXPECT_TRUE(reader.law_with_in_drain);
  EXPECT_TRUE(reader.law_without_in_drain_ever_failed) << "the items being released are in in_drain";
}

}  // namespace
