// tests/cleanup/parked_allocations.h — test helper: drives an interleaving through the queue's allocator
// hook (reclaim::set_queue_allocator_for_testing). A thread that plays a role parks in the hook at its
// first allocation inside the queue (a producer lane's first use, a new block, an implicit producer, the
// block pool of a new storage) until the test lets it go: so a push can be stopped between its count and
// its enqueue, or a trim while it makes its new storage, deterministically.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "cleanup/queue_allocation.h"

namespace reclaim_test {

class ParkedAllocations {
 public:
  static constexpr int kRoles = 4;

  // Installs the hook; every role is fresh (parks at its first allocation). Uninstalled by the destructor.
  ParkedAllocations() {
    for (int role = 0; role < kRoles; ++role) {
      parked_[role] = false;
      used_[role] = false;
      go_[role] = false;
    }
    reclaim::set_queue_allocator_for_testing(&allocate);
  }
  ~ParkedAllocations() { reclaim::set_queue_allocator_for_testing(nullptr); }
  ParkedAllocations(const ParkedAllocations&) = delete;
  ParkedAllocations& operator=(const ParkedAllocations&) = delete;

  // The calling thread plays `role` from now on (call it first thing in the thread).
  static void play(int role) { role_ = role; }
  // Waits (up to 5 s) until `role` is parked in the hook; false if it never got there.
  static bool wait_parked(int role) { return wait_for(parked_[role], 5000); }
  // Lets `role` leave the hook.
  static void release(int role) { go_[role] = true; }
  // Waits (up to `ms`) until `flag` is set.
  static bool wait_for(const std::atomic<bool>& flag, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!flag.load()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::yield();
    }
    return true;
  }

 private:
  static void* allocate(std::size_t size) noexcept {
    const int role = role_;
    if (role >= 0 && !used_[role].exchange(true)) {
      parked_[role] = true;
      while (!go_[role].load()) std::this_thread::yield();
      parked_[role] = false;
    }
    return std::malloc(size);
  }

  static inline thread_local int role_ = -1;  // -1: this thread never parks
  static inline std::atomic<bool> parked_[kRoles];
  static inline std::atomic<bool> used_[kRoles];
  static inline std::atomic<bool> go_[kRoles];
};

}  // namespace reclaim_test
