// bindings/drain_native_thread.h — cuda_reclaim._reclaim._NativeThread: a native thread for the drain loop
// when threading refuses to start one at exit.
//
// CPython 3.12 refuses new threading threads from the start of Py_FinalizeEx (while non-daemon threads are
// joined, and in the atexit hooks), although a thread may still enter then: PyGILState_Ensure works until
// runtime finalization begins, after the atexit hooks. cuda_reclaim._auto runs its drain loop on such a
// thread then, so that a first hand-over at exit still has a drain thread, and its atexit hook joins it.
// On 3.15+ the thread enters with PyThreadState_EnsureFromView (interpreter_entry.h): once finalization
// is past its wait for guards it calls nothing and ends; otherwise its guard makes Py_FinalizeEx wait
// until the target returned (the drain loop returns once stopped or once the queue is closed, both of
// which the atexit hook does before that wait).

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Adds the immutable heap type _NativeThread to `module`. Returns 0, or -1 with an exception set.
// Module init only; requires an attached thread state (GIL).
int add_native_thread_type(PyObject* module);

}  // namespace reclaim::bindings
