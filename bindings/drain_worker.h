// bindings/drain_worker.h — cuda_reclaim._reclaim._DrainWorker, the automatic drain loop, and the types and
// functions that go with it (_NativeThread, _set_trim_delay). cuda_reclaim._auto owns the lifecycle (which
// worker runs on which thread, when it stops); drain_worker.cc owns the protocol.

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Adds the immutable heap types _DrainWorker (with its static _attach_stats(): interpreter_attach.h's
// counts) and _NativeThread, and the function _set_trim_delay, to `module`. Returns 0, or -1 with an
// exception set.
// Module init only; requires an attached thread state (GIL).
int add_drain_worker_types(PyObject* module);

// Fork child: forgets the parent's drain threads (the count of those waiting for the GIL, the main thread's
// step-aside call they had asked for).
// Fork child, single-threaded, GIL held; never blocks.
void forget_drain_threads_after_fork() noexcept;

}  // namespace reclaim::bindings
