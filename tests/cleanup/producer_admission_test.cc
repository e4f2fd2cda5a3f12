// tests/cleanup/producer_admission_test.cc — ProducerAdmission alone: slots, the closed bit, slot-less
// admissions and what close() and the clearing drain learn from them.

#include "cleanup/producer_admission.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "cleanup/producer_slot.h"
#include "gtest/gtest.h"

namespace {

using reclaim::ProducerAdmission;
using reclaim::ProducerSlot;

void give_back(ProducerSlot* slot) { slot->held.store(0, std::memory_order_release); }

TEST(ProducerAdmission, SlotCountRoundsUpToAPowerOfTwo) {
  EXPECT_EQ(ProducerAdmission(0).slot_count(), 1u);
  EXPECT_EQ(ProducerAdmission(3).slot_count(), 4u);
  EXPECT_EQ(ProducerAdmission(64).slot_count(), 64u);
}

TEST(ProducerAdmission, EachSlotHasOneHolderAtATime) {
  ProducerAdmission admission(2);
  ProducerSlot* first = admission.take_slot();
  ProducerSlot* second = admission.take_slot();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first, second);
  EXPECT_EQ(admission.take_slot(), nullptr);  // every slot held: the caller goes slot-less
  give_back(second);
  EXPECT_EQ(admission.take_slot(), second);
  give_back(first);
  give_back(second);
}

TEST(ProducerAdmission, CloseSetsTheBitOnce) {
  ProducerAdmission admission(4);
  EXPECT_FALSE(admission.is_closed());
  EXPECT_FALSE(admission.closed_for_slot_holder());
  admission.close();
  admission.close();
  EXPECT_TRUE(admission.is_closed());
  EXPECT_TRUE(admission.closed_for_slot_holder());
  EXPECT_EQ(ProducerAdmission::slotless_admitted(admission.admissions()), 0u);
}

TEST(ProducerAdmission, SlotlessPushesAfterCloseAreLeaksBeforeAreNot) {
  ProducerAdmission admission(1);
  EXPECT_FALSE(admission.admit_slotless());  // open: admitted
  admission.complete_slotless();
  admission.close();
  EXPECT_TRUE(admission.admit_slotless());  // closed: a leak
  EXPECT_TRUE(admission.admit_slotless());
  const std::uint64_t admissions = admission.admissions();
  EXPECT_EQ(ProducerAdmission::slotless_admitted(admissions), 3u);
  EXPECT_EQ(admission.slotless_leaked(admissions), 2u);
  EXPECT_EQ(admission.slotless_completions(), 1u);
  EXPECT_EQ(admission.producer_use().overflow_pushes, 3u);
  admission.wait_for_pushes_in_flight();  // the late ones never complete, and are not waited for
}

TEST(ProducerAdmission, HeldSlotsAndOpenSlotlessPushesAreInFlight) {
  ProducerAdmission admission(2);
  EXPECT_FALSE(admission.push_may_be_in_flight());
  ProducerSlot* slot = admission.take_slot();
  EXPECT_TRUE(admission.push_may_be_in_flight());
  give_back(slot);
  EXPECT_FALSE(admission.push_may_be_in_flight());
  EXPECT_FALSE(admission.admit_slotless());
  EXPECT_TRUE(admission.push_may_be_in_flight());
  admission.complete_slotless();
  EXPECT_FALSE(admission.push_may_be_in_flight());
}

TEST(ProducerAdmission, CloseWaitsForTheHoldersWorkToBeVisible) {
  ProducerAdmission admission(4);
  ProducerSlot* slot = admission.take_slot();
  ASSERT_NE(slot, nullptr);
  int written = 0;  // plain: the slot's release/acquire must publish it
  std::thread holder([&] {
    written = 42;
    give_back(slot);
  });
  admission.close();
  admission.wait_for_pushes_in_flight();
  EXPECT_EQ(written, 42);
  holder.join();
}

TEST(ProducerAdmission, SlotTotalsSumEverySlot) {
  ProducerAdmission admission(4);
  std::vector<ProducerSlot*> held;
  for (ProducerSlot* slot; (slot = admission.take_slot()) != nullptr;) {
    reclaim::bump(slot->admitted);
    reclaim::bump(slot->leaked);
    held.push_back(slot);
  }
  ASSERT_EQ(held.size(), 4u);
  ProducerAdmission::SlotTotals totals = admission.slot_totals();
  EXPECT_TRUE(totals.any_held);
  for (ProducerSlot* slot : held) give_back(slot);
  totals = admission.slot_totals();
  EXPECT_FALSE(totals.any_held);
  EXPECT_EQ(totals.admitted, 4u);
  EXPECT_EQ(totals.leaked, 4u);
}

TEST(ProducerAdmission, ResetAfterForkReopensAndFreesEverySlot) {
  ProducerAdmission admission(2);
  ASSERT_NE(admission.take_slot(), nullptr);  // held by a parent thread at the fork
  EXPECT_FALSE(admission.admit_slotless());   // cut off before its completion
  admission.close();
  EXPECT_TRUE(admission.admit_slotless());
  const std::uint64_t leaked = admission.slotless_leaked(admission.admissions());
  admission.reset_after_fork(leaked);
  EXPECT_FALSE(admission.is_closed());
  EXPECT_FALSE(admission.push_may_be_in_flight());
  EXPECT_EQ(admission.slotless_leaked(admission.admissions()), 1u);  // kept across the reopen
  std::set<ProducerSlot*> slots;
  for (ProducerSlot* slot; (slot = admission.take_slot()) != nullptr;) slots.insert(slot);
  EXPECT_EQ(slots.size(), 2u);
  for (ProducerSlot* slot : slots) give_back(slot);
}

}  // namespace
