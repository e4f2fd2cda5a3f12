// bindings/drain_step_aside.cc — see drain_step_aside.h.
//
// A main thread that runs bytecode gives the GIL up only after a waiter has waited a switch interval. On
// 3.13+ a pending call reaches it at its next eval-breaker check. On 3.10-3.12 a pending call added by
// another thread reaches it only when something else makes it look: its own re-taking of the GIL after a
// blocking call, a garbage collection, or the waiter's drop request. The first matters there: a main thread
// that gives the GIL up often but briefly (an event loop's select(0) between callbacks) takes it straight
// back before the woken drain thread runs, and each re-take counts as a switch, so the drain thread's wait
// never ends in a drop request; the re-take runs this call, and the drain thread gets in (see
// docs/benchmarks.md, "Release latency, busy main thread"). A call that finds no drain thread waiting
// returns at once. The main thread waits on a futex word that the drain thread bumps, so it sleeps while the
// drain thread runs and wakes as soon as the GIL is taken: no polling.

#include <Python.h>

#include "bindings/drain_step_aside.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "bindings/drain.h"

namespace reclaim::bindings {
namespace {

// How long a main thread that stepped aside waits for a drain thread to take the GIL, at most: the switch
// interval (sys.getswitchinterval(), read by each step-aside: a program may change it at any time). Not a
// time slice: the wait ends as soon as a drain thread has had the GIL or none waits any more. Past it the
// main thread takes the GIL back, as it would have handed it over after waiting that interval anyway; the
// bound only covers a drain thread that is not scheduled meanwhile.
constexpr std::int64_t kDefaultSwitchIntervalNanoseconds = 5'000'000;  // CPython's, and the fallback
std::int64_t g_step_aside_limit_ns = kDefaultSwitchIntervalNanoseconds;  // main thread only, GIL held

std::atomic<int> g_drain_threads_waiting{0};      // drain threads inside take_gil after a wake-up
std::atomic<std::uint32_t> g_gil_taken_word{0};   // futex word: bumped by a drain thread that stops waiting
std::atomic<bool> g_main_thread_waiting{false};   // a main thread that stepped aside sleeps on the word
std::atomic<bool> g_step_aside_scheduled{false};  // a step-aside call is added and has not run yet

std::uint32_t* futex_address(std::atomic<std::uint32_t>& word) {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex word is 32 bits");
  return reinterpret_cast<std::uint32_t*>(&word);
}

// A drain thread that stopped waiting for the GIL (it holds it, or a forced unwind ends it): bumps the word
// and wakes the main thread if it sleeps on it. Any thread; never blocks; no Python.
void note_gil_wait_ended() noexcept {
  g_drain_threads_waiting.fetch_sub(1, std::memory_order_seq_cst);
  g_gil_taken_word.fetch_add(1, std::memory_order_seq_cst);
  // seq_cst against the main thread's store of the flag then load of the word: either it sees the bump, or
  // this sees the flag and wakes it (FUTEX_WAIT itself re-checks the word, so a bump just before it counts).
  if (g_main_thread_waiting.load(std::memory_order_seq_cst)) {
    (void)::syscall(SYS_futex, futex_address(g_gil_taken_word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
}

// Main thread, GIL released by it. Returns once a drain thread has stopped waiting for the GIL since `seen`
// (the word before the release: it took the GIL, or was unwound), once no drain thread waits any more, or
// after `limit_ns`. Sleeps on the futex word meanwhile; allocates nothing.
void wait_for_a_drain_thread_to_take_the_gil(std::uint32_t seen, std::int64_t limit_ns) {
  struct timespec now;
  (void)::clock_gettime(CLOCK_MONOTONIC, &now);
  const std::int64_t deadline = now.tv_sec * 1'000'000'000LL + now.tv_nsec + limit_ns;
  g_main_thread_waiting.store(true, std::memory_order_seq_cst);
  for (;;) {
    if (g_gil_taken_word.load(std::memory_order_seq_cst) != seen ||
        g_drain_threads_waiting.load(std::memory_order_seq_cst) == 0) {
      break;
    }
    (void)::clock_gettime(CLOCK_MONOTONIC, &now);
    const std::int64_t left = deadline - (now.tv_sec * 1'000'000'000LL + now.tv_nsec);
    if (left <= 0) break;
    struct timespec timeout = {static_cast<time_t>(left / 1'000'000'000LL), static_cast<long>(left % 1'000'000'000LL)};
    // Returns on a wake, at once if the word moved already (EAGAIN), on a signal (EINTR) or at the timeout.
    (void)::syscall(SYS_futex, futex_address(g_gil_taken_word), FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0);
  }
  g_main_thread_waiting.store(false, std::memory_order_seq_cst);
}

// Updates g_step_aside_limit_ns from sys.getswitchinterval() when that is the builtin (a replacement written
// in Python is not called: a pending call runs no Python code); otherwise, or if the call fails (a float
// that cannot be allocated), the last value stays. Main thread, GIL held, no exception set.
void read_switch_interval() {
  PyObject* get = PySys_GetObject("getswitchinterval");  // borrowed; nullptr (no exception) when missing
  if (get == nullptr || !PyCFunction_Check(get)) return;
  PyObject* interval = PyObject_CallNoArgs(get);
  const double seconds = interval == nullptr ? -1.0 : PyFloat_AsDouble(interval);
  Py_XDECREF(interval);
  if (PyErr_Occurred()) {
    PyErr_Clear();  // not the program's error: raised here, it would surface between two of its bytecodes
    return;
  }
  if (seconds > 0 && seconds < 1e6) g_step_aside_limit_ns = static_cast<std::int64_t>(seconds * 1e9);
}

// The pending call. Main thread, GIL held, between two bytecodes. (Only the main thread runs pending
// calls, and it is not finalizing while it runs one: a drain thread that the finalization ends or hangs
// inside take_gil is never waited for here.)
int step_aside_for_a_drain_thread(void*) {
  g_step_aside_scheduled.store(false, std::memory_order_seq_cst);
  if (g_drain_threads_waiting.load(std::memory_order_seq_cst) == 0 || interpreter_finalizing()) return 0;
  read_switch_interval();
  const std::uint32_t seen = g_gil_taken_word.load(std::memory_order_seq_cst);
  PyThreadState* state = PyEval_SaveThread();
  wait_for_a_drain_thread_to_take_the_gil(seen, g_step_aside_limit_ns);
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
    ~Waiting() { note_gil_wait_ended(); }
  };
  const auto asked = std::chrono::steady_clock::now();
  {
    const Waiting waiting;
    ask_main_thread_to_step_aside();
    PyEval_RestoreThread(state);
  }
  return std::chrono::steady_clock::now() - asked;
}

void forget_step_aside_after_fork() noexcept {
  g_drain_threads_waiting.store(0, std::memory_order_relaxed);
  g_main_thread_waiting.store(false, std::memory_order_relaxed);
  g_step_aside_scheduled.store(false, std::memory_order_relaxed);
}

}  // namespace reclaim::bindings
