// tests/handback/c_entries_test.cc — the C ABI table's hand-back entries (reclaim_hand_back_begin / _end,
// reclaim_wait_handed_back of abi/reclaim.h): they reach this copy's process barrier, and the wait is
// 0 once the queue is closed, whatever is held, although the queue's close does not shut the barrier.

#include <cstdint>

#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "handback/process_barrier.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::handback::process_barrier;
using reclaim_test::each_item;
using reclaim_test::ReleaseRecorder;

TEST(HandBackCEntries, CountInThisCopysProcessBarrier) {
  ASSERT_NE(reclaim::own_process_queue(), nullptr);
  const std::uint64_t held = process_barrier().stats().held;
  const int ticket = reclaim_hand_back_begin();
  ASSERT_GE(ticket, 0);
  EXPECT_EQ(process_barrier().stats().held, held + 1);
  std::uint32_t done = 0;
  reclaim_hand_back_end(ticket, &done);
  EXPECT_EQ(done, 1u);
  EXPECT_EQ(process_barrier().stats().held, held);
}

// Once the queue is closed, wait_handed_back returns 0 (as the docs say, and as Python's form returns
// False), also when nothing is held. Closes the queue: last in this binary.
TEST(HandBackCEntries, WaitHandedBackIsZeroOnceClosedEvenWithNothingHeld) {
  reclaim::ReclaimQueue* queue = reclaim::own_process_queue();
  ASSERT_NE(queue, nullptr);
  ReleaseRecorder recorder(16);
  ASSERT_EQ(reclaim_is_closed(), 0);
  EXPECT_EQ(reclaim_wait_handed_back(0.0), 1) << "open, nothing held";
  queue->close(each_item<ReleaseRecorder::release>, &recorder);
  ASSERT_EQ(reclaim_is_closed(), 1);
  EXPECT_FALSE(process_barrier().is_shut()) << "the owner shuts the barrier, not the queue's close";
  EXPECT_EQ(process_barrier().stats().held, 0u);
  EXPECT_EQ(reclaim_wait_handed_back(0.0), 0);
  EXPECT_EQ(reclaim_wait_handed_back(-1.0), 0);  // no limit: still 0 at once
  std::uint32_t done = 0;
  const int ticket = reclaim_hand_back_begin();
  reclaim_hand_back_end(ticket, &done);
  EXPECT_EQ(done, 1u);
  EXPECT_EQ(reclaim_wait_handed_back(0.0), 0);
}

}  // namespace
