// bindings/drain_step_aside.h — how a drain thread takes the GIL from a busy main thread: it adds a pending
// call that makes the main thread give the GIL up until a drain thread has had it. The call runs no Python
// and releases nothing: the drain and its finalizers stay on the drain thread (a drain inside a pending call
// would run finalizers within threading's locked sections, where one that sets an Event the main thread
// waits on deadlocks it; it calls only the builtin sys.getswitchinterval()). The main thread sleeps on a
// futex word until a drain thread has had the GIL, at most a switch interval. Used only by the drain worker
// (drain_worker.cc).

#pragma once

#include <Python.h>

#include <chrono>

namespace reclaim::bindings {

// Takes the GIL back for `state` (PyEval_RestoreThread) after asking a busy main thread to step aside (one
// call outstanding at a time), and returns how long that took. On 3.15+ the caller holds a PEP 788 guard
// across this call (interpreter_entry.h), so finalization has not begun and cannot meanwhile. On
// 3.10-3.13 a thread that takes the GIL once the interpreter is finalizing is ended here by a forced
// unwind; the count of waiting drain threads is kept right on that way out too.
// A drain thread, GIL released by it; blocks until it holds the GIL; never allocates.
std::chrono::steady_clock::duration take_gil_asking_main_thread_to_step_aside(PyThreadState* state);

// Fork child: no drain thread waits here, and a step-aside call added by the parent may never run, so a
// new one must be allowed.
// Fork child, single-threaded; never touches Python; never blocks.
void forget_step_aside_after_fork() noexcept;

}  // namespace reclaim::bindings
