// tests/cleanup/quiet_drain_test.cc — ReclaimQueue::drain_quietly: every pointer is released exactly once,
// either quietly (during the copy) or by the release action; quiet ones count as released and never
// reach the action; offers stop when they do not pay and resume when they do; the action gets each
// batch in chunks; budgets, lingering, unwinding actions, nested drains and concurrent drains behave as
// they do for drain().

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "cleanup/queue_drain.h"
#include "cleanup/reclaim_queue.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::ReclaimQueue;
using reclaim_test::id_of;
using reclaim_test::item_for;
using reclaim_test::ReleaseRecorder;

// A quiet release that takes the ids divisible by `every` and records them in `recorder`.
struct QuietEvery {
  std::size_t every;
  ReleaseRecorder* recorder;
  bool would_release(void* item) const noexcept { return id_of(item) % every == 0; }
  bool operator()(void* item) const noexcept {
    if (!would_release(item)) return false;
    ReleaseRecorder::release(item, recorder);
    return true;
  }
};

// A quiet release that takes every id except those divisible by `every` (most of them: offers pay).
struct QuietAllBut {
  std::size_t every;
  ReleaseRecorder* recorder;
  bool would_release(void* item) const noexcept { return id_of(item) % every != 0; }
  bool operator()(void* item) const noexcept {
    if (!would_release(item)) return false;
    ReleaseRecorder::release(item, recorder);
    return true;
  }
};

// A quiet release that takes nothing, and counts the offers it gets and the looks at pointers.
struct QuietNone {
  std::atomic<std::size_t>* offers = nullptr;
  std::atomic<std::size_t>* looks = nullptr;
  bool would_release(void*) const noexcept {
    if (looks != nullptr) looks->fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  bool operator()(void*) const noexcept {
    if (offers != nullptr) offers->fetch_add(1, std::memory_order_relaxed);
    return false;
  }
};

// The batch release action: records each item, advancing `next` first (the contract of ReleaseBatchFn).
struct RecordingAction {
  ReleaseRecorder* recorder;
  std::size_t quiet_every = 0;  // nonzero: count items the action gets that are not multiples of it
  std::size_t throw_at_id = SIZE_MAX;
  std::atomic<std::size_t> offending{0};
  // Calls, and the most items one call was given (atomic: concurrent drains share one action).
  std::atomic<std::size_t> calls{0};
  std::atomic<std::size_t> longest_call{0};

  static void release(reclaim::ReleaseBatch* batch, void* self) {
    auto* action = static_cast<RecordingAction*>(self);
    action->calls.fetch_add(1);
    std::size_t longest = action->longest_call.load();
    while (batch->count - batch->next > longest &&
           !action->longest_call.compare_exchange_weak(longest, batch->count - batch->next)) {
    }
    for (std::size_t i = batch->next; i < batch->count; ++i) {
      batch->next = i + 1;
      void* const item = batch->items[i];
      if (action->quiet_every != 0 && id_of(item) % action->quiet_every != 0) {
        action->offending.fetch_add(1);
      }
      ReleaseRecorder::release(item, action->recorder);
      if (id_of(item) == action->throw_at_id) {
        action->throw_at_id = SIZE_MAX;  // once
        throw std::runtime_error("release failed");
      }
    }
  }
};

void push_ids(ReclaimQueue& queue, std::size_t first, std::size_t count) {
  for (std::size_t id = first; id < first + count; ++id) {
    ASSERT_EQ(queue.push(item_for(id)), reclaim::PushStatus::kQueued);
  }
}

void expect_each_released_once(const ReleaseRecorder& quiet, const ReleaseRecorder& action, std::size_t ids) {
  for (std::size_t id = 0; id < ids; ++id) {
    ASSERT_EQ(quiet.count(id) + action.count(id), 1) << "id " << id;
  }
}

void expect_conserved(const ReclaimQueue& queue, std::uint64_t released, std::uint64_t pending) {
  const reclaim::CounterSnapshot counters = queue.snapshot();
  EXPECT_EQ(counters.released, released);
  EXPECT_EQ(counters.pending, pending);
  const std::uint64_t gone = counters.leaked_after_close + counters.abandoned_after_fork;
  EXPECT_EQ(counters.handed_over, counters.released + counters.pending + gone);
}

// A queue holding ids 0..ids-1, a recorder for what the quiet release takes and one for what the action
// gets, and quiet drains of that queue through a RecordingAction.
struct QuietDrainScene {
  explicit QuietDrainScene(std::size_t ids) : quiet_recorder(ids), action_recorder(ids), ids(ids) {
    push_ids(queue, 0, ids);
  }
  template <class QuietRelease>
  std::size_t drain(const QuietRelease& quiet, std::size_t max_items = SIZE_MAX, bool linger = false) {
    return queue.drain_quietly(RecordingAction::release, &action, max_items, linger, quiet);
  }
  QuietEvery quiet_every(std::size_t every) { return QuietEvery{every, &quiet_recorder}; }
  QuietAllBut quiet_all_but(std::size_t every) { return QuietAllBut{every, &quiet_recorder}; }
  void expect_each_released_once() const {
    ::expect_each_released_once(quiet_recorder, action_recorder, ids);
  }

  ReclaimQueue queue;
  ReleaseRecorder quiet_recorder, action_recorder;
  RecordingAction action{&action_recorder};
  std::size_t ids;
};

// Sizes around the quiet distance and the batch: shorter than the distance (all offered after the copy),
// between the distance and a batch, and many batches.
class QuietDrainSizes : public ::testing::TestWithParam<std::size_t> {};

// Two ids in three leave quietly: offers pay, so every batch is offered, and the action gets exactly
// the multiples of three.
TEST_P(QuietDrainSizes, QuietReleasesNeverReachTheActionAndEveryPointerIsReleasedOnce) {
  const std::size_t ids = GetParam();
  QuietDrainScene scene(ids);
  scene.action.quiet_every = 3;
  EXPECT_EQ(scene.drain(scene.quiet_all_but(3)), ids);
  EXPECT_EQ(scene.action.offending.load(), 0u);
  EXPECT_EQ(scene.action_recorder.total(), (ids + 2) / 3);
  EXPECT_LE(scene.action.longest_call.load(), reclaim::kReleaseChunk);
  scene.expect_each_released_once();
  expect_conserved(scene.queue, ids, 0);
  EXPECT_FALSE(scene.queue.maybe_pending());
}

INSTANTIATE_TEST_SUITE_P(AroundTheDistanceAndTheBatch, QuietDrainSizes,
                         ::testing::Values(1, 10, reclaim::kQuietDistance - 1, reclaim::kQuietDistance,
                                           reclaim::kQuietDistance + 1, reclaim::kDrainBatch - 1,
                                           reclaim::kDrainBatch, reclaim::kDrainBatch + 1, 10000));

TEST(QuietDrain, WhenEverythingIsQuietTheActionIsNeverCalled) {
  QuietDrainScene scene(3000);
  EXPECT_EQ(scene.drain(scene.quiet_every(1)), 3000u);
  EXPECT_EQ(scene.action_recorder.total(), 0u);
  EXPECT_EQ(scene.quiet_recorder.total(), 3000u);
  expect_conserved(scene.queue, 3000, 0);
}

TEST(QuietDrain, WhenNothingIsQuietItIsAPlainDrain) {
  QuietDrainScene scene(1500);
  EXPECT_EQ(scene.drain(QuietNone{}), 1500u);
  EXPECT_EQ(scene.quiet_recorder.total(), 0u);
  scene.expect_each_released_once();
  expect_conserved(scene.queue, 1500, 0);
}

// Offers that do not pay stop after one batch; once every kQuietSampleEvery batches (across drains too) a
// few pointers are looked at, and offers come back when most of those would leave quietly, and stay.
TEST(QuietDrain, OffersStopWhenTheyDoNotPayAndResumeWhenTheyDo) {
  constexpr std::size_t kBatch = reclaim::kDrainBatch;
  constexpr std::size_t kBatches = 3 * reclaim::kQuietSampleEvery;
  QuietDrainScene scene(kBatches * kBatch);
  std::atomic<std::size_t> offers{0}, looks{0};
  // One batch per drain: the choice carries over from one drain to the next.
  for (std::size_t batch = 0; batch < kBatches; ++batch) {
    EXPECT_EQ(scene.drain(QuietNone{&offers, &looks}, kBatch), kBatch);
  }
  // The first batch only is offered; one in kQuietSampleEvery after it is looked at.
  EXPECT_EQ(offers.load(), kBatch);
  EXPECT_EQ(looks.load(), (kBatches - 1) / reclaim::kQuietSampleEvery * reclaim::kQuietPeeks);
  EXPECT_EQ(scene.action_recorder.total(), kBatches * kBatch);
  expect_conserved(scene.queue, kBatches * kBatch, 0);

  // Now most references leave quietly: within kQuietSampleEvery batches offers resume, and then stay.
  constexpr std::size_t kMore = 4 * reclaim::kQuietSampleEvery * kBatch;
  ReleaseRecorder quiet_recorder(kMore), action_recorder(kMore);
  RecordingAction action{&action_recorder};
  push_ids(scene.queue, 0, kMore);
  EXPECT_EQ(scene.queue.drain_quietly(RecordingAction::release, &action, SIZE_MAX, false,
                                      QuietAllBut{8, &quiet_recorder}),
            kMore);
  expect_each_released_once(quiet_recorder, action_recorder, kMore);
  EXPECT_GE(quiet_recorder.total(), kMore / 2);
  EXPECT_LE(action_recorder.total(), reclaim::kQuietSampleEvery * kBatch + kMore / 8);
}

// A quiet release that says which pointers it was asked about (their ids), and would take all but id 0.
struct LookRecorder {
  std::vector<std::size_t>* looked;
  bool would_release(void* item) const noexcept {
    looked->push_back(id_of(item));
    return id_of(item) != 0;
  }
  bool operator()(void*) const noexcept { return false; }
};

// Whatever the batch's length, the looks land on different pointers inside it, kQuietPeeks of them (all of
// a shorter batch), a prime apart: none is read twice, so one pointer never decides alone.
TEST(QuietDrain, TheLooksAtABatchLandOnDifferentPointersInsideIt) {
  std::vector<void*> batch;
  for (std::size_t id = 0; id < reclaim::kDrainBatch; ++id) batch.push_back(item_for(id));
  for (std::size_t taken = 1; taken <= reclaim::kDrainBatch; ++taken) {
    std::vector<std::size_t> looked;
    const bool quiet = reclaim::mostly_quiet(batch.data(), taken, LookRecorder{&looked});
    const std::size_t expected = taken < reclaim::kQuietPeeks ? taken : reclaim::kQuietPeeks;
    ASSERT_EQ(looked.size(), expected) << "taken " << taken;
    std::vector<bool> seen(taken, false);
    for (std::size_t id : looked) {
      ASSERT_LT(id, taken) << "taken " << taken;
      ASSERT_FALSE(seen[id]) << "taken " << taken << ": pointer " << id << " looked at twice";
      seen[id] = true;
    }
    // Only pointer 0 stays: it is looked at, and the rest outvote it (a batch of one is not quiet).
    EXPECT_EQ(quiet, taken > 1) << "taken " << taken;
  }
}

// After a run of batches where nothing left quietly, a regular mix where most references would leave
// quietly (all but every second, eighth or 64th, as pushed) is noticed within kQuietSampleEvery batches:
// the looks do not line up with the mix.
class QuietMixPeriods : public ::testing::TestWithParam<std::size_t> {};

TEST_P(QuietMixPeriods, OffersResumeWithinASampleRun) {
  constexpr std::size_t kBatch = reclaim::kDrainBatch;
  const std::size_t plain_ids = 2 * kBatch, mixed_ids = 3 * reclaim::kQuietSampleEvery * kBatch;
  QuietDrainScene scene(plain_ids);
  EXPECT_EQ(scene.drain(QuietNone{}), plain_ids);  // nothing quiet: later batches are taken plainly
  ReleaseRecorder quiet_recorder(mixed_ids), action_recorder(mixed_ids);
  RecordingAction action{&action_recorder};
  push_ids(scene.queue, 0, mixed_ids);
  EXPECT_EQ(scene.queue.drain_quietly(RecordingAction::release, &action, SIZE_MAX, false,
                                      QuietAllBut{GetParam(), &quiet_recorder}),
            mixed_ids);
  expect_each_released_once(quiet_recorder, action_recorder, mixed_ids);
  // At most one sample run of plain batches, then only the references that are not quiet.
  EXPECT_LE(action_recorder.total(), (reclaim::kQuietSampleEvery + 1) * kBatch + mixed_ids / GetParam());
  expect_conserved(scene.queue, plain_ids + mixed_ids, 0);
}

INSTANTIATE_TEST_SUITE_P(EverySecondEighthOr64th, QuietMixPeriods, ::testing::Values(2, 8, 64));

TEST(QuietDrain, TheActionGetsABatchInChunksOverTheSameItems) {
  QuietDrainScene scene(reclaim::kDrainBatch);
  EXPECT_EQ(scene.drain(QuietNone{}), reclaim::kDrainBatch);
  EXPECT_EQ(scene.action.longest_call.load(), reclaim::kReleaseChunk);
  EXPECT_EQ(scene.action.calls.load(), reclaim::kDrainBatch / reclaim::kReleaseChunk);
  scene.expect_each_released_once();
}

// A batch action that releases its items and notes, for each call, the ids it may read ahead
// (items[count ... available)): those must be exactly the items the next calls release, in order, and a
// call must never be told that fewer items are there than it is to release.
struct ReadAheadAction {
  std::vector<std::size_t> released;                // ids, in release order
  std::vector<std::vector<std::size_t>> read_ahead;  // per call
  std::vector<std::size_t> released_after;          // per call: released.size() when it returned
  std::size_t available_below_count = 0;

  static void release(reclaim::ReleaseBatch* batch, void* self) {
    auto* action = static_cast<ReadAheadAction*>(self);
    if (batch->available < batch->count) ++action->available_below_count;
    for (std::size_t i = batch->next; i < batch->count; ++i) {
      batch->next = i + 1;
      action->released.push_back(id_of(batch->items[i]));
    }
    std::vector<std::size_t> ahead;
    for (std::size_t i = batch->count; i < batch->available; ++i) ahead.push_back(id_of(batch->items[i]));
    action->read_ahead.push_back(std::move(ahead));
    action->released_after.push_back(action->released.size());
  }
};

TEST(QuietDrain, TheActionMayReadAheadToTheEndOfItsDequeueAndNoFurther) {
  constexpr std::size_t kIds = reclaim::kDrainBatch + reclaim::kReleaseChunk / 2;
  ReclaimQueue queue;
  push_ids(queue, 0, kIds);
  ReadAheadAction action;
  ASSERT_EQ(queue.drain_quietly(ReadAheadAction::release, &action, SIZE_MAX, false, QuietNone{}), kIds);
  EXPECT_EQ(action.available_below_count, 0u);
  ASSERT_EQ(action.released.size(), kIds);
  // A full dequeue in chunks, then the short one.
  const std::size_t calls = reclaim::kDrainBatch / reclaim::kReleaseChunk + 1;
  ASSERT_EQ(action.read_ahead.size(), calls);
  for (std::size_t call = 0; call < calls; ++call) {
    const std::vector<std::size_t>& ahead = action.read_ahead[call];
    const std::size_t after = action.released_after[call];
    // The first call of the first dequeue sees the rest of its dequeue; the last call of each sees none.
    const std::size_t end_of_dequeue = after <= reclaim::kDrainBatch ? reclaim::kDrainBatch : kIds;
    EXPECT_EQ(ahead.size(), end_of_dequeue - after) << "call " << call;
    for (std::size_t k = 0; k < ahead.size(); ++k) {
      EXPECT_EQ(ahead[k], action.released[after + k]) << "call " << call << ", item " << k;
    }
  }
  expect_conserved(queue, kIds, 0);
}

TEST(QuietDrain, HonoursTheBudgetAndLeavesTheRestPendingAndSignalled) {
  QuietDrainScene scene(1000);
  EXPECT_EQ(scene.drain(scene.quiet_every(2), 300), 300u);
  EXPECT_EQ(scene.quiet_recorder.total() + scene.action_recorder.total(), 300u);
  expect_conserved(scene.queue, 300, 700);
  EXPECT_TRUE(scene.queue.maybe_pending());
  EXPECT_EQ(scene.drain(scene.quiet_every(2)), 700u);
  scene.expect_each_released_once();
  expect_conserved(scene.queue, 1000, 0);
}

TEST(QuietDrain, EmptyDrainReturnsZeroWithoutCountingADrain) {
  QuietDrainScene scene(0);
  EXPECT_EQ(scene.drain(QuietNone{}), 0u);
  EXPECT_EQ(scene.queue.snapshot().nonempty_drains, 0u);
}

TEST(QuietDrain, LingerKeepsTheSignalUntilTheNextDrainFindsNothing) {
  QuietDrainScene scene(5);
  EXPECT_EQ(scene.drain(scene.quiet_every(2), SIZE_MAX, /*linger=*/true), 5u);
  EXPECT_TRUE(scene.queue.maybe_pending());  // lingering: pushes meanwhile skip the eventfd write
  EXPECT_EQ(scene.drain(QuietNone{}, SIZE_MAX, /*linger=*/true), 0u);
  EXPECT_FALSE(scene.queue.maybe_pending());
  scene.expect_each_released_once();
}

// Ids in the first chunk, and in a later chunk of the first batch (none a multiple of 4).
class UnwindingQuietDrain : public ::testing::TestWithParam<std::size_t> {};

TEST_P(UnwindingQuietDrain, AnUnwindingActionLeavesItsUnreachedItemsPendingButNeverTheQuietOnes) {
  constexpr std::size_t kIds = 2000;
  QuietDrainScene scene(kIds);
  scene.action.throw_at_id = GetParam();
  EXPECT_THROW(scene.drain(scene.quiet_every(4)), std::runtime_error);
  const reclaim::CounterSnapshot after_throw = scene.queue.snapshot();
  EXPECT_EQ(after_throw.released, scene.quiet_recorder.total() + scene.action_recorder.total());
  EXPECT_EQ(after_throw.handed_over, after_throw.released + after_throw.pending);
  EXPECT_TRUE(scene.queue.maybe_pending());
  // The next drain gets the rest, each exactly once.
  scene.drain(scene.quiet_every(4));
  scene.expect_each_released_once();
  expect_conserved(scene.queue, kIds, 0);
}

INSTANTIATE_TEST_SUITE_P(FirstAndLaterChunk, UnwindingQuietDrain, ::testing::Values(101, 450));

// An action that pushes new items and drains quietly again, from inside a quiet drain.
struct ReenteringAction {
  ReclaimQueue* queue;
  ReleaseRecorder* quiet_recorder;
  ReleaseRecorder* action_recorder;
  std::size_t next_id;  // ids pushed from inside the drain start here
  std::size_t pushes_left;

  static void release(reclaim::ReleaseBatch* batch, void* self) {
    auto* action = static_cast<ReenteringAction*>(self);
    for (std::size_t i = batch->next; i < batch->count; ++i) {
      batch->next = i + 1;
      ReleaseRecorder::release(batch->items[i], action->action_recorder);
      if (action->pushes_left == 0) continue;
      --action->pushes_left;
      ASSERT_EQ(action->queue->push(item_for(action->next_id++)), reclaim::PushStatus::kQueued);
      action->queue->drain_quietly(ReenteringAction::release, action, 7, false,
                                   QuietEvery{5, action->quiet_recorder});
    }
  }
};

TEST(QuietDrain, AnActionMayPushAndDrainQuietlyAgain) {
  constexpr std::size_t kFirst = 700, kMore = 300;
  ReclaimQueue queue;
  push_ids(queue, 0, kFirst);
  ReleaseRecorder quiet_recorder(kFirst + kMore), action_recorder(kFirst + kMore);
  ReenteringAction action{&queue, &quiet_recorder, &action_recorder, kFirst, kMore};
  std::size_t released = queue.drain_quietly(ReenteringAction::release, &action, SIZE_MAX, false,
                                             QuietEvery{5, &quiet_recorder});
  released += queue.drain_quietly(ReenteringAction::release, &action, SIZE_MAX, false,
                                  QuietEvery{5, &quiet_recorder});
  EXPECT_LE(released, kFirst + kMore);  // nested drains returned their own share
  expect_each_released_once(quiet_recorder, action_recorder, kFirst + kMore);
  expect_conserved(queue, kFirst + kMore, 0);
}

TEST(QuietDrain, ConcurrentProducersAndQuietDrainsReleaseEachPointerOnce) {
  constexpr std::size_t kProducers = 4, kPerProducer = 20000, kIds = kProducers * kPerProducer;
  ReclaimQueue queue;
  ReleaseRecorder quiet_recorder(kIds), action_recorder(kIds);
  RecordingAction action{&action_recorder};
  std::atomic<std::size_t> producers_done{0};
  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&queue, &producers_done, p] {
      push_ids(queue, p * kPerProducer, kPerProducer);
      producers_done.fetch_add(1);
    });
  }
  const auto drainer = [&] {
    while (producers_done.load() < kProducers || queue.pending() != 0) {
      queue.drain_quietly(RecordingAction::release, &action, 4096, false, QuietEvery{3, &quiet_recorder});
    }
  };
  std::thread second_drainer(drainer);
  drainer();
  second_drainer.join();
  for (std::thread& thread : threads) thread.join();
  queue.drain_quietly(RecordingAction::release, &action, SIZE_MAX, false, QuietEvery{3, &quiet_recorder});
  expect_each_released_once(quiet_recorder, action_recorder, kIds);
  expect_conserved(queue, kIds, 0);
}

}  // namespace
