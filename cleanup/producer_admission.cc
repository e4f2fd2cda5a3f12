// cleanup/producer_admission.cc — lanes, the closed bit and lane-less admissions: see
// producer_admission.h.

#include "cleanup/producer_admission.h"

#include <sched.h>
#include <stdlib.h>

#include <cstdlib>

#include <new>

#include "cleanup/fatal.h"
#include "cleanup/producer_lane.h"

namespace reclaim {

namespace {

std::size_t round_up_to_power_of_two(std::size_t n) noexcept {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

ProducerAdmission::ProducerAdmission(std::size_t producer_lanes) noexcept
    : lanes_(nullptr), lane_mask_(round_up_to_power_of_two(producer_lanes == 0 ? 1 : producer_lanes) - 1) {
  // Lanes are cache-line aligned (alignas(64)): plain malloc only promises 16 bytes.
  void* lane_memory = nullptr;
  if (::posix_memalign(&lane_memory, alignof(ProducerLane), sizeof(ProducerLane) * (lane_mask_ + 1)) != 0) {
    die("cannot allocate the reclaim queue's producer lanes");
  }
  lanes_ = static_cast<ProducerLane*>(lane_memory);
  for (std::size_t i = 0; i <= lane_mask_; ++i) new (&lanes_[i]) ProducerLane();
}

ProducerAdmission::~ProducerAdmission() {
  for (std::size_t i = 0; i <= lane_mask_; ++i) lanes_[i].~ProducerLane();
  std::free(lanes_);
}

bool ProducerAdmission::admit_laneless() noexcept {
  overflow_pushes_.fetch_add(1, std::memory_order_relaxed);
  return (admissions_.fetch_add(1, std::memory_order_seq_cst) & kClosedBit) != 0;
}

void ProducerAdmission::close() noexcept {
  // Sets the closed bit and publishes the lane-less admission count at that moment in one step
  // (admitted_at_close_ is stored before the CAS that releases it). Closers take turns: otherwise a
  // racing closer that lost the CAS could store its stale count after the winner's CAS.
  while (closing_.test_and_set(std::memory_order_acquire)) sched_yield();
  std::uint64_t current = admissions_.load(std::memory_order_acquire);
  while ((current & kClosedBit) == 0) {
    admitted_at_close_.store(current, std::memory_order_relaxed);
    if (admissions_.compare_exchange_weak(current, current | kClosedBit, std::memory_order_seq_cst,
                                          std::memory_order_acquire)) {
      break;
    }
  }
  closing_.clear(std::memory_order_release);
}

bool ProducerAdmission::push_may_be_in_flight() const noexcept {
  // A lane's `taken` covers a push from before its signal check to after its enqueue.
  for (std::size_t i = 0; i <= lane_mask_; ++i) {
    // seq_cst: this load and the push's signal load (after its seq_cst exchange) must not both read old
    // values after the clearing store (store-buffering: both sides need the single total order).
    if (lanes_[i].taken.load(std::memory_order_seq_cst) != 0) return true;
  }
  const std::uint64_t admissions = admissions_.load(std::memory_order_seq_cst);
  if ((admissions & kClosedBit) != 0) return false;  // closed: no drain needs a wake-up any more
  return completions_.load(std::memory_order_acquire) != admissions;
}

void ProducerAdmission::wait_for_pushes_in_flight() noexcept {
  for (std::size_t i = 0; i <= lane_mask_; ++i) {
    // seq_cst, against the push's closed-bit load after its exchange (see push_may_be_in_flight()).
    while (lanes_[i].taken.load(std::memory_order_seq_cst) != 0) sched_yield();
  }
  wait_for_laneless_pushes_in_flight();
}

void ProducerAdmission::wait_for_laneless_pushes_in_flight() const noexcept {
  // A lane-less push counts a completion only when it was admitted while open, so completions never pass
  // the admissions that can complete: all of them while the queue is open, those before the close once it
  // is closed (a later one only counts a leak and never touches the storage). Completions read *before*
  // the admissions and equal to them mean that at the first read every lane-less push admitted until then
  // had completed; one admitted later loaded the storage after the caller's own seq_cst store (close's
  // CAS, trim's exchange). Waiting instead for the completions to reach the admissions read once would
  // let a push admitted later, which completes first, stand in for an earlier one still in the storage.
  for (;;) {
    const std::uint64_t completed = completions_.load(std::memory_order_acquire);
    const std::uint64_t admissions = admissions_.load(std::memory_order_seq_cst);
    // The load that saw the closed bit synchronizes with close()'s CAS, which published admitted_at_close_.
    const std::uint64_t can_complete =
        (admissions & kClosedBit) != 0 ? admitted_at_close_.load(std::memory_order_relaxed) : admissions;
    if (completed >= can_complete) return;
    sched_yield();
  }
}

ProducerAdmission::LaneTotals ProducerAdmission::lane_totals() const noexcept {
  LaneTotals totals;
  for (std::size_t i = 0; i <= lane_mask_; ++i) {
    const ProducerLane& lane = lanes_[i];
    // Acquire: a lane freed publishes its counters (and its item) with the release of `taken`.
    if (lane.taken.load(std::memory_order_acquire) != 0) totals.any_taken = true;
    totals.admitted += lane.admitted.load(std::memory_order_relaxed);
    totals.leaked += lane.leaked.load(std::memory_order_relaxed);
  }
  return totals;
}

std::uint64_t ProducerAdmission::laneless_leaked(std::uint64_t admissions) const noexcept {
  std::uint64_t leaked = laneless_leaked_before_reopen_.load(std::memory_order_relaxed);
  if ((admissions & kClosedBit) != 0) {
    // Every lane-less admission after the close is a leak. The caller's load that saw the closed bit
    // synchronizes with the close's CAS, so admitted_at_close_ is the value stored before it.
    leaked += (admissions & ~kClosedBit) - admitted_at_close_.load(std::memory_order_relaxed);
  }
  return leaked;
}

ProducerUse ProducerAdmission::producer_use() const noexcept {
  ProducerUse use;
  use.lane_count = lane_mask_ + 1;
  for (std::size_t i = 0; i <= lane_mask_; ++i) {
    if (lanes_[i].token_owner.load(std::memory_order_relaxed) != nullptr) ++use.lanes_used;
  }
  use.overflow_pushes = overflow_pushes_.load(std::memory_order_relaxed);
  return use;
}

void ProducerAdmission::reset_after_fork(std::uint64_t laneless_leaked) noexcept {
  const std::uint64_t admissions = admissions_.load(std::memory_order_relaxed);
  laneless_leaked_before_reopen_.store(laneless_leaked, std::memory_order_relaxed);  // ends the derivation
  admissions_.store(admissions & ~kClosedBit, std::memory_order_relaxed);  // open again
  completions_.store(admissions & ~kClosedBit, std::memory_order_relaxed);  // cut-off pushes are done
  closing_.clear(std::memory_order_relaxed);  // a parent thread may have been closing at the fork
  // Lanes that parent threads had taken at the fork are free in the child; every producer belongs to the
  // abandoned storage, so the tokens are abandoned without touching it.
  for (std::size_t i = 0; i <= lane_mask_; ++i) {
    lanes_[i].forget_token();
    lanes_[i].taken.store(0, std::memory_order_relaxed);
  }
}

}  // namespace reclaim
