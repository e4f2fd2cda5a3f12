// bindings/drain_step_aside.cc — see drain_step_aside.h.
//
// A main thread that runs bytecode gives the GIL up only after a waiter has waited a switch interval. On
// 3.13+ a pending call reaches it at its next eval-breaker check. On 3.10-3.12 a pending call added by
// another thread reaches it only when something else makes it look: its own re-taking of the GIL after a
// blocking call, a garbage collection, or the waiter's drop request. The first matters there: a main thread that gives the GIL up often but
// briefly (an event loop's select(0) between callbacks) takes it straight back before the woken drain
// thread runs, and each re-take counts as a switch, so the drain thread's wait never ends in a drop
// request; the re-take runs this call, and the drain thread gets in (see docs/benchmarks.md, "Release
// latency, busy main thread"). A call that finds no drain thread waiting returns at once.

#include <Python.h>

#include "bindings/drain_step_aside.h"

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>

#include "bindings/drain.h"

namespace reclaim::bindings {
namespace {

// How long a main thread that stepped aside waits for a drain thread to take the GIL, at most. Not a time
// slice: the wait ends as soon as a drain thread has had the GIL or none waits any more, like CPython's
// own forced switch. A fixed slice is too short on a loaded machine (a drain thread woken by the drop may
// not be scheduled within it, and then waits a whole switch interval after all); while the main thread
// waits, the GIL is free for any thread. The bound only covers a drain thread not scheduled at all.
constexpr auto kStepAsideLimit = std::chrono::seconds(1);
// The first part of the wait yields the CPU (a drain thread usually takes the GIL at once); after it the
// main thread sleeps in short steps, leaving its core to the drain thread it waits for.
constexpr auto kStepAsideYielding = std::chrono::microseconds(200);
constexpr long kStepAsideSleepNanoseconds = 100 * 1000;

std::atomic<int> g_drain_threads_waiting{0};                // drain threads inside take_gil after a wake-up
std::atomic<std::uint64_t> g_drain_thread_acquisitions{0};  // bumped by a drain thread holding the GIL
std::atomic<bool> g_step_aside_scheduled{false};            // a step-aside call is added and has not run yet

// Main thread, GIL released by it. Returns once a drain thread has taken the GIL since `seen` (the
// acquisition count before the release), once no drain thread waits for it any more (it left, or it took
// the GIL and has already been counted out), or after kStepAsideLimit.
void wait_for_a_drain_thread_to_take_the_gil(std::uint64_t seen) {
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    if (g_drain_thread_acquisitions.load(std::memory_order_acquire) != seen ||
        g_drain_threads_waiting.load(std::memory_order_seq_cst) == 0) {
      return;
    }
    const auto waited = std::chrono::steady_clock::now() - started;
    if (waited >= kStepAsideLimit) return;
    if (waited < kStepAsideYielding) {
      sched_yield();
    } else {
      struct timespec step = {0, kStepAsideSleepNanoseconds};
      (void)::nanosleep(&step, nullptr);
    }
  }
}

// The pending call. Main thread, GIL held, between two bytecodes. (Only the main thread runs pending
// calls, and it is not finalizing while it runs one: a drain thread that the finalization ends or hangs
// inside take_gil is never waited for here.)
int step_aside_for_a_drain_thread(void*) {
  g_step_aside_scheduled.store(false, std::memory_order_seq_cst);
  if (g_drain_threads_waiting.load(std::memory_order_seq_cst) == 0 || interpreter_finalizing()) return 0;
  const std::uint64_t seen = g_drain_thread_acquisitions.load(std::memory_order_acquire);
  PyThreadState* state = PyEval_SaveThread();
  wait_for_a_drain_thread_to_take_the_gil(seen);
  PyEval_RestoreThread(state);
  return 0;
}

// Adds the step-aside call unless one is outstanding. Any thread, no GIL needed (Py_AddPendingCall's
// contract); a full queue of pending calls just means no step-aside this time.
void ask_main_thread_to_step_aside() {
  if (g_step_aside_scheduled.exchange(true, std::memory_order_seq_cst)) return;
  if (Py_AddPendingCall(step_aside_for_a_drain_thread, nullptr) != 0) {
    g_step_aside_scheduled.store(false, std::memory_order_seq_cst);
  }
}

}  // namespace

std::chrono::steady_clock::duration take_gil_asking_main_thread_to_step_aside(PyThreadState* state) {
  // Counted while waiting, also on the way out of a forced unwind (the destructor touches no Python).
  struct Waiting {
    Waiting() noexcept { g_drain_threads_waiting.fetch_add(1, std::memory_order_seq_cst); }
    ~Waiting() { g_drain_threads_waiting.fetch_sub(1, std::memory_order_seq_cst); }
  };
  const auto asked = std::chrono::steady_clock::now();
  {
    const Waiting waiting;
    ask_main_thread_to_step_aside();
    PyEval_RestoreThread(state);
  }
  g_drain_thread_acquisitions.fetch_add(1, std::memory_order_release);
  return std::chrono::steady_clock::now() - asked;
}

void forget_step_aside_after_fork() noexcept {
  g_drain_threads_waiting.store(0, std::memory_order_relaxed);
  g_step_aside_scheduled.store(false, std::memory_order_relaxed);
}

}  // namespace reclaim::bindings
