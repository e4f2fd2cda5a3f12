// handback/process_barrier.h — the process's hand-back barrier: the one this copy's attachments count in,
// and the three entry points of the C ABI table (cuda_reclaim/reclaim_abi.h) that reach it.
//
// The owner of the process queue publishes its table, so every copy in a process ends up counting in the
// owner's barrier: graph/ and other extensions reach it through reclaim_hand_back_begin / _end /
// reclaim_wait_handed_back (abi/reclaim.h), the owner's bindings through process_barrier(). The
// barrier resets itself in a fork child (its own pthread_atfork handler: no tickets, open) and is shut by
// the owner when it closes the queue, and by the threading-exit hook before that.
#pragma once

#include <cstdint>

#include "handback/barrier.h"

namespace reclaim::handback {

// This copy's process barrier. Made on first use in static storage and never destroyed: CUDA's thread may
// end a ticket during exit(). The first call registers the fork child handler (pthread_atfork, which may
// allocate); a call racing with it waits on the static-initialization guard until it is made. The owner
// calls it at module init, so that the handler exists before anything is attached. Any thread; after the
// first call, never blocks and never allocates.
HandBackBarrier& process_barrier() noexcept;

// Shuts the process barrier: every wait on it that is not over returns "not handed back", now and later
// (HandBackBarrier::shut). The owner calls it when it closes the queue, and threading's exit hook before
// that. Any thread; never blocks, never allocates.
void shut_process_barrier() noexcept;

// The table's entry points for this copy's process barrier; each has the contract of the reclaim_api field of
// its name. wait_handed_back returns 0 at once when the barrier is shut; the table also returns 0 when
// the queue is closed (abi/reclaim_c_api.cc checks that before it calls this).
// begin / end: any thread, CUDA's included; never block, never allocate. wait: not on a CUDA callback
// thread; blocks on a futex without the GIL (the caller releases it); allocates only when the barrier's
// count table grows.
int hand_back_begin() noexcept;
void hand_back_end(int ticket, std::uint32_t* done) noexcept;
int wait_handed_back(double timeout_seconds) noexcept;

}  // namespace reclaim::handback
