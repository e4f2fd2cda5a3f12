// bindings/drain_fork_return.h — the pending call that restarts the parent's drain thread once os.fork() has
// returned to its caller: _reclaim._DrainWorker._call_once_fork_returned (a static method of the type, in
// drain_worker.cc's method table; cuda_reclaim._auto_fork._after_fork_in_parent is its one caller).

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// _DrainWorker._call_once_fork_returned(callback): adds a pending call that runs callback() on the main thread
// once the os.fork() in progress has returned to its caller (the frame below the calling hook's). Returns
// True, or False, scheduling nothing, when that cannot be told (no Python frame called os.fork(), or its frame
// object could not be made) or the pending-call queue is full: the caller then acts at once. A TypeError
// (nullptr) when callback is not callable. One call outstanding at a time: a second one before the first ran
// replaces its callback and frame. The callback's exception is reported as unraisable.
// Called by cuda_reclaim._auto_fork's after-fork hook in the parent, on the main thread, GIL held, from that
// hook's own frame; allocates (a frame object, the pending call's slot), never blocks.
PyObject* drain_worker_call_once_fork_returned(PyObject* type, PyObject* callback);

}  // namespace reclaim::bindings
