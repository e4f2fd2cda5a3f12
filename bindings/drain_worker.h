// bindings/drain_worker.h — cuda_reclaim._reclaim._DrainWorker, the automatic drain loop, and
// _set_trim_delay (the exit-time _NativeThread is in drain_native_thread.h). cuda_reclaim._auto owns the
// lifecycle (which worker runs on which thread, when it stops); drain_worker.cc owns the protocol.

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Adds the immutable heap types _DrainWorker (with its static _entry_stats(): interpreter_entry.h's
// counts, and its static _call_once_fork_returned(): drain_fork_return.h) and _NativeThread, and the function
// _set_trim_delay, to `module`. Returns 0, or -1 with an exception set.
// Module init only; requires an attached thread state (GIL).
int add_drain_worker_types(PyObject* module);

}  // namespace reclaim::bindings
