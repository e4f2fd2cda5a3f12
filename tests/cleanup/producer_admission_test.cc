// tests/cleanup/producer_admission_test.cc — ProducerAdmission alone: lanes, the closed bit, lane-less
// admissions and what close() and the clearing drain learn from them.

#include "cleanup/producer_admission.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "cleanup/producer_lane.h"
#include "gtest/gtest.h"

namespace {

using reclaim::ProducerAdmission;
using reclaim::ProducerLane;

void free_lane(ProducerLane* lane) { lane->taken.store(0, std::memory_order_release); }

TEST(ProducerAdmission, LaneCountRoundsUpToAPowerOfTwo) {
  EXPECT_EQ(ProducerAdmission(0).lane_count(), 1u);
  EXPECT_EQ(ProducerAdmission(3).lane_count(), 4u);
  EXPECT_EQ(ProducerAdmission(64).lane_count(), 64u);
}

TEST(ProducerAdmission, EachLaneHasOneHolderAtATime) {
  ProducerAdmission admission(2);
  ProducerLane* first = admission.take_lane();
  ProducerLane* second = admission.take_lane();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first, second);
  EXPECT_EQ(admission.take_lane(), nullptr);  // every lane taken: the caller goes lane-less
  free_lane(second);
  EXPECT_EQ(admission.take_lane(), second);
  free_lane(first);
  free_lane(second);
}

TEST(ProducerAdmission, CloseSetsTheBitOnce) {
  ProducerAdmission admission(4);
  EXPECT_FALSE(admission.is_closed());
  EXPECT_FALSE(admission.closed_for_lane_holder());
  admission.close();
  admission.close();
  EXPECT_TRUE(admission.is_closed());
  EXPECT_TRUE(admission.closed_for_lane_holder());
  EXPECT_EQ(ProducerAdmission::laneless_admitted(admission.admissions()), 0u);
}

TEST(ProducerAdmission, LanelessPushesAfterCloseAreLeaksBeforeAreNot) {
  ProducerAdmission admission(1);
  EXPECT_FALSE(admission.admit_laneless());  // open: admitted
  admission.complete_laneless();
  admission.close();
  EXPECT_TRUE(admission.admit_laneless());  // closed: a leak
  EXPECT_TRUE(admission.admit_laneless());
  const std::uint64_t admissions = admission.admissions();
  EXPECT_EQ(ProducerAdmission::laneless_admitted(admissions), 3u);
  EXPECT_EQ(admission.laneless_leaked(admissions), 2u);
  EXPECT_EQ(admission.laneless_completions(), 1u);
  EXPECT_EQ(admission.producer_use().overflow_pushes, 3u);
  admission.wait_for_pushes_in_flight();  // the late ones never complete, and are not waited for
}

TEST(ProducerAdmission, TakenLanesAndOpenLanelessPushesAreInFlight) {
  ProducerAdmission admission(2);
  EXPECT_FALSE(admission.push_may_be_in_flight());
  ProducerLane* lane = admission.take_lane();
  EXPECT_TRUE(admission.push_may_be_in_flight());
  free_lane(lane);
  EXPECT_FALSE(admission.push_may_be_in_flight());
  EXPECT_FALSE(admission.admit_laneless());
  EXPECT_TRUE(admission.push_may_be_in_flight());
  admission.complete_laneless();
  EXPECT_FALSE(admission.push_may_be_in_flight());
}

TEST(ProducerAdmission, CloseWaitsForTheHoldersWorkToBeVisible) {
  ProducerAdmission admission(4);
  ProducerLane* lane = admission.take_lane();
  ASSERT_NE(lane, nullptr);
  int written = 0;  // plain: the lane's release/acquire must publish it
  std::thread holder([&] {
    written = 42;
    free_lane(lane);
  });
  admission.close();
  admission.wait_for_pushes_in_flight();
  EXPECT_EQ(written, 42);
  holder.join();
}

TEST(ProducerAdmission, LaneTotalsSumEveryLane) {
  ProducerAdmission admission(4);
  std::vector<ProducerLane*> taken;
  for (ProducerLane* lane; (lane = admission.take_lane()) != nullptr;) {
    reclaim::bump(lane->admitted);
    reclaim::bump(lane->leaked);
    taken.push_back(lane);
  }
  ASSERT_EQ(taken.size(), 4u);
  ProducerAdmission::LaneTotals totals = admission.lane_totals();
  EXPECT_TRUE(totals.any_taken);
  for (ProducerLane* lane : taken) free_lane(lane);
  totals = admission.lane_totals();
  EXPECT_FALSE(totals.any_taken);
  EXPECT_EQ(totals.admitted, 4u);
  EXPECT_EQ(totals.leaked, 4u);
}

TEST(ProducerAdmission, ResetAfterForkReopensAndFreesEveryLane) {
  ProducerAdmission admission(2);
  ASSERT_NE(admission.take_lane(), nullptr);  // taken by a parent thread at the fork
  EXPECT_FALSE(admission.admit_laneless());   // cut off before its completion
  admission.close();
  EXPECT_TRUE(admission.admit_laneless());
  const std::uint64_t leaked = admission.laneless_leaked(admission.admissions());
  admission.reset_after_fork(leaked);
  EXPECT_FALSE(admission.is_closed());
  EXPECT_FALSE(admission.push_may_be_in_flight());
  EXPECT_EQ(admission.laneless_leaked(admission.admissions()), 1u);  // kept across the reopen
  std::set<ProducerLane*> lanes;
  for (ProducerLane* lane; (lane = admission.take_lane()) != nullptr;) lanes.insert(lane);
  EXPECT_EQ(lanes.size(), 2u);
  for (ProducerLane* lane : lanes) free_lane(lane);
}

}  // namespace
