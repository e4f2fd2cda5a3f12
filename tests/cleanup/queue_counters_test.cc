// tests/cleanup/queue_counters_test.cc — QueueCounters alone (in_drain as a difference, settling across a
// fork reset, the high-water marks) and the conservation law on a CounterSnapshot.

#include "cleanup/queue_counters.h"

#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"

namespace {

using reclaim::CounterSnapshot;
using reclaim::QueueCounters;

TEST(QueueCounters, InDrainIsWhatWasTakenAndNotSettled) {
  QueueCounters counters;
  counters.count_taken(5);
  EXPECT_EQ(counters.drain_buckets().in_drain, 5u);
  counters.settle(3, /*forked=*/false, /*released=*/true);
  EXPECT_EQ(counters.drain_buckets().released, 3u);
  EXPECT_EQ(counters.drain_buckets().in_drain, 2u);
  counters.settle(2, /*forked=*/false, /*released=*/false);  // requeued: pending again, not released
  EXPECT_EQ(counters.drain_buckets().released, 3u);
  EXPECT_EQ(counters.drain_buckets().in_drain, 0u);
}

TEST(QueueCounters, ADrainThatOutlivesAForkSettlesOutOfAbandoned) {
  QueueCounters counters;
  counters.count_taken(4);
  counters.reset_after_fork(10);  // the 4 in the drain are among the 10
  EXPECT_EQ(counters.abandoned_after_fork(), 10u);
  EXPECT_EQ(counters.drain_buckets().in_drain, 0u);
  counters.settle(4, /*forked=*/true, /*released=*/true);
  EXPECT_EQ(counters.abandoned_after_fork(), 6u);
  EXPECT_EQ(counters.drain_buckets().released, 4u);
  EXPECT_EQ(counters.drain_buckets().in_drain, 0u);
}

TEST(QueueCounters, HighWaterMarksOnlyRiseAndTrimForgetsItsOwn) {
  QueueCounters counters;
  counters.note_pending(7);
  counters.note_pending(3);
  EXPECT_EQ(counters.max_pending(), 7u);
  EXPECT_TRUE(counters.exceeded_since_trim(6));
  EXPECT_FALSE(counters.exceeded_since_trim(7));
  counters.forget_pending_since_trim();
  counters.count_trim();
  EXPECT_FALSE(counters.exceeded_since_trim(0));
  EXPECT_EQ(counters.max_pending(), 7u);
  EXPECT_EQ(counters.trims(), 1u);
}

TEST(QueueCounters, RejectedIsCountedApart) {
  QueueCounters counters;
  counters.count_rejected(1);
  counters.count_rejected(2);
  EXPECT_EQ(counters.rejected(), 3u);
  EXPECT_EQ(counters.drain_buckets().in_drain, 0u);
}

TEST(CounterSnapshot, ConservedIsTheLawOfTheAbi) {
  CounterSnapshot counters;
  counters.handed_over = 10;
  counters.released = 4;
  counters.pending = 2;
  counters.in_drain = 1;
  counters.leaked_after_close = 2;
  counters.abandoned_after_fork = 1;
  counters.rejected = 5;  // apart: in no bucket of the law
  EXPECT_TRUE(counters.conserved());
  const reclaim_stats c = counters.as_c();
  EXPECT_EQ(c.handed_over, 10u);
  EXPECT_EQ(c.rejected, 5u);
  EXPECT_EQ(reclaim_stats_conserved(&c), 1);
  counters.in_drain = 0;  // one item in no bucket
  EXPECT_FALSE(counters.conserved());
}

}  // namespace
