// What a release action may do besides releasing: settle early, give an item back, stop the drain; and the
// in_drain bucket that counts what a drain took and has not finished.
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

// An action that releases items in order, records them, and stops before the item `stop_before`, or gives
// back every item whose id is a multiple of `give_back_every` (0: none). It also checks the law from
// inside, with the items it holds counted as in_drain.
struct Scripted {
  ReclaimQueue* queue;
  std::vector<std::size_t> released;
  std::size_t stop_before = SIZE_MAX;
  std::size_t give_back_every = 0;
  bool law_held_inside = true;
  std::uint64_t in_drain_seen = 0;

  static void action(ReleaseBatch* batch, void* self_pointer) {
    auto* self = static_cast<Scripted*>(self_pointer);
    for (; batch->next < batch->count; ++batch->next) {
      const std::size_t id = id_of(batch->items[batch->next]);
      if (id == self->stop_before) {
        batch->stop = true;
        return;
      }
      if (self->give_back_every != 0 && id % self->give_back_every == 0) {
        ReclaimQueue::give_back(batch, batch->items[batch->next]);
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

TEST(GiveBack, ItemsBeingReleasedCountAsInDrainAndTheLawHoldsInsideTheAction) {
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

TEST(GiveBack, AnActionThatStopsPutsTheRestBackAndTheNextDrainTakesItFirstInOrder) {
  ReclaimQueue queue;
  push_ids(queue, 0, 1000);  // more than one dequeue: the rest of the batch and the queue behind it
  Scripted script{&queue};
  script.stop_before = 100;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 100u);
  auto counters = queue.snapshot();
  EXPECT_EQ(counters.released, 100u);
  EXPECT_EQ(counters.in_drain, 0u);
  EXPECT_EQ(counters.pending, 900u);
  EXPECT_TRUE(counters.conserved());
  push_ids(queue, 1000, 1100);  // arrives after the put-back: must come after it
  script.stop_before = SIZE_MAX;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 1000u);
  ASSERT_EQ(script.released.size(), 1100u);
  for (std::size_t i = 0; i < 1100; ++i) EXPECT_EQ(script.released[i], i) << "at " << i;
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(GiveBack, GivenBackItemsArePendingNotTakenAgainByTheSameDrainAndReleasedByTheNext) {
  ReclaimQueue queue;
  push_ids(queue, 0, 100);
  Scripted script{&queue};
  script.give_back_every = 10;  // ids 0, 10, ..., 90
  EXPECT_EQ(queue.drain(Scripted::action, &script), 90u);
  auto counters = queue.snapshot();
  EXPECT_EQ(counters.pending, 10u);
  EXPECT_EQ(counters.released, 90u);
  EXPECT_EQ(counters.in_drain, 0u);
  EXPECT_TRUE(counters.conserved());
  EXPECT_TRUE(queue.maybe_pending()) << "given back without a wake-up";
  // Given back again: the next drain takes them first, once each, and stops there.
  EXPECT_EQ(queue.drain(Scripted::action, &script), 0u);
  EXPECT_EQ(queue.snapshot().pending, 10u);
  script.give_back_every = 0;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 10u);
  EXPECT_EQ(queue.snapshot().pending, 0u);
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(GiveBack, CloseReleasesWhatWasGivenBack) {
  ReclaimQueue queue;
  push_ids(queue, 0, 10);
  Scripted script{&queue};
  script.stop_before = 3;
  EXPECT_EQ(queue.drain(Scripted::action, &script), 3u);
  script.stop_before = SIZE_MAX;
  EXPECT_EQ(queue.close(Scripted::action, &script), 7u);
  const auto counters = queue.snapshot();
  EXPECT_EQ(counters.released, 10u);
  EXPECT_EQ(counters.pending, 0u);
  EXPECT_TRUE(counters.conserved());
}

TEST(GiveBack, SettlingBeforeALongStepCountsWhatIsDone) {
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

TEST(GiveBack, TrimsAreCounted) {
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

}  // namespace
