// handback/process_barrier.cc — see process_barrier.h.

#include "handback/process_barrier.h"

#include <pthread.h>

#include <atomic>
#include <new>

namespace reclaim::handback {
namespace {

// Static storage for the one instance: constructed in place on first use, never destroyed.
alignas(HandBackBarrier) unsigned char g_storage[sizeof(HandBackBarrier)];

HandBackBarrier* create_process_barrier() noexcept {
  auto* barrier = new (g_storage) HandBackBarrier();
  // The parent's attachments are never handed back in the child: no tickets, open, epochs go on.
  pthread_atfork(nullptr, nullptr, [] { process_barrier().reset_after_fork(); });
  return barrier;
}

}  // namespace

HandBackBarrier& process_barrier() noexcept {
  static HandBackBarrier* const barrier = create_process_barrier();
  return *barrier;
}

void shut_process_barrier() noexcept { process_barrier().shut(); }

int hand_back_begin() noexcept { return process_barrier().begin(); }

void hand_back_end(int ticket, std::uint32_t* done) noexcept {
  // The table is plain C; the cell is the caller's word, stored to atomically.
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a done cell is a plain word");
  process_barrier().end(ticket, reinterpret_cast<std::atomic<std::uint32_t>*>(done));
}

int wait_handed_back(double timeout_seconds) noexcept {
  HandBackBarrier& barrier = process_barrier();
  // Shut: 0, whatever is held (also nothing), as the Python form's False; a wait already in progress that
  // the shut interrupts returns 0 as well (kShut).
  if (barrier.is_shut()) return 0;
  switch (barrier.wait(barrier.request(0), timeout_to_ns(timeout_seconds))) {
    case HandBackBarrier::WaitResult::kReached:
      return 1;
    case HandBackBarrier::WaitResult::kInterrupted:
      return -1;
    default:
      return 0;
  }
}

}  // namespace reclaim::handback
