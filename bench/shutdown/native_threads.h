// bench/shutdown/native_threads.h — the native threads of a child of the shutdown comparison: detached
// std::threads that Python did not create keep calling release_one() (strategies.h) while the
// interpreter runs, shuts down and exits, and a burst of calls fired from exit() after Py_Finalize.
//
// Each thread body is a `noexcept` C++ function, as a CUDA callback thread's frames are, so a
// pthread_exit() forced unwind through it ends in std::terminate instead of silently killing the thread.
// What the threads did is counted in the shared record (shared_record.h).

#pragma once

#include <vector>

#include "bench/shutdown/shared_record.h"

namespace reclaim_shutdown {

// Installs the thread-exit hook (counts threads killed inside a call) and the C atexit handler (fires
// the exit burst, then counts threads stuck inside a call) for this process. Returns false with errno
// set. Call once, before start_native_threads(). Not thread-safe.
bool install_exit_checks(SharedRecord* record) noexcept;

// Starts `threads` detached threads that share `items` (thread t takes items t, t + threads, ...), each
// waiting a jittered 0..2*delay_us before every call. They outlive Python if the process lets them.
// Any thread; the items must already be wrapped for the strategy (wrap_for_strategy).
void start_native_threads(std::vector<void*> items, int threads, int delay_us);

// Arms the exit burst: in exit(), after Py_Finalize, `threads` new native threads release `items` as fast
// as they can and exit() waits for them (as CUDA's context teardown does). Call at most once.
// Not thread-safe.
void arm_exit_burst(std::vector<void*> items, int threads);

}  // namespace reclaim_shutdown
