// What a release action may do besides releasing: settle early, halt the drain (the rest of its dequeue is
// requeued at the front); and the in_drain bucket that counts what a drain took and has not finished.
#include <cstddef>
#include <cstdint>
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

// An action that releases items in order, records them, and halts before the item `halt_before`. It also
// checks the law from inside, with the items it holds counted as in_drain.
struct Scripted {
  ReclaimQueue* queue;
  std::vector<std::size_t> released;
  std::size_t halt_before = SIZE_MAX;
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

// A drain that halts requeues the rest of its dequeue "first, in order": ahead of whatever arrived in the
// queue after that dequeue, also when a drain nested in the release (a finalizer draining again) halted
// and requeued those later items meanwhile.
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
          // Later items arrive; a nested drain takes them and halts before the first.
          push_ids(*self->queue, 10, 20);
          Scripted nested{self->queue};
          nested.halt_before = 10;
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
