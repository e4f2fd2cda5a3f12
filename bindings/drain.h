// bindings/drain.h — releasing queued references in a known-safe context, shared by the module functions
// (drain(), close()) and the automatic drain loop (drain_worker.h).
//
// Every release runs Py_DECREF on a thread with an attached thread state (the GIL) in a live interpreter
// that is not finalizing: these functions check the last condition themselves and release nothing once
// the interpreter is finalizing (what is queued stays pending, and the exit report says so).

#pragma once

#include <Python.h>

#include <atomic>
#include <cstddef>

#include "cleanup/reclaim_queue.h"

namespace reclaim::bindings {

// Binds queue() to this copy's process-wide queue (reclaim::own_process_queue(): the queue this module
// drains and closes, once reclaim_own_process_queue() has registered it as the owner), whose exit report
// then carries graph/'s fields (its report hook is reclaim::graph::format_report_fields); false when this
// copy adopted another's queue. Module init calls it (after reclaim_own_process_queue()), before anything
// else here runs.
// Any thread; never touches Python; never blocks after the first call.
bool bind_queue() noexcept;

// The process-wide queue this module owns (bound by bind_queue()).
// Any thread; never touches Python; never blocks.
reclaim::ReclaimQueue& queue() noexcept;

// True once the interpreter has begun finalizing: nothing may be released any more.
// Requires an attached thread state (GIL).
bool interpreter_finalizing() noexcept;

// Releases up to `max_items` queued references on this thread, running the call items it takes (host calls,
// host-node firings); returns how many. With `linger`, a drain
// that released something keeps the wake-up signal set (ReclaimQueue::drain_and_linger): only the
// automatic drain loop asks for that, and it ends the linger itself. With `stop` (a drain thread's
// worker flag), the drain looks at it before each item and, once it is set, requeues what it took and did
// not reach at the front of the queue and returns. A finalizer's exception goes to
// sys.unraisablehook and never stops the drain; an exception already set by the caller is kept aside and
// restored. When nothing is pending it costs one atomic load.
// Requires an attached thread state (GIL); re-entrant (a finalizer may drain again).
Py_ssize_t drain_safely(std::size_t max_items, bool linger = false, const std::atomic<bool>* stop = nullptr);

// True while this thread is inside drain_safely() or close_safely(): in a finalizer or call that a drain
// runs. A wait for CUDA there must not block (what it waits for may be queued behind the caller).
// Any thread; never touches Python; never blocks.
bool releasing_on_this_thread() noexcept;

// True once close_safely() ran its final drain: the calls are stopped, none may run any more (until a fork
// child reopens them). Requires the GIL.
bool calls_stopped() noexcept;

// Fork child: the queue is open again, and so are calls. Single-threaded, GIL held.
void reopen_calls_after_fork() noexcept;

// Final drain, then close (or, once finalizing, shut the hand-back barrier, close without releasing and
// open every ordered call's gate), then cancel the host calls that CUDA has not handed back
// (host_calls.h). Returns the number released.
// Requires an attached thread state (GIL); re-entrant.
Py_ssize_t close_safely();

// Shuts the process's hand-back barrier (handback/process_barrier.h: every wait on it that is not over,
// a C API user's included, returns "not handed back"), then closes the queue without releasing anything
// unless it is closed already (or was never bound): the last step of Py_Finalize, for an exit whose atexit
// hook did not close it (interrupted, or registered too late to run). From then on hand-overs count as
// leaked; what is queued stays pending in the report. Then opens every ordered call's gate (host_calls.h's
// open_every_gate): no drain runs those calls any more.
// The thread that finalizes the interpreter; never touches Python; waits only for pushes in flight (which
// never block).
void close_without_release_if_open() noexcept;

}  // namespace reclaim::bindings

