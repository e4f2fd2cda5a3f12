// bindings/drain_fork_return.cc — see drain_fork_return.h.
//
// The restart of the parent's drain thread after os.fork() (cuda_reclaim._auto_fork._after_fork_in_parent), where
// os.fork() counts the process's threads for its multi-threaded-process warning after the parent's after-fork hooks, so
// a hook that starts the thread would make every fork warn: which CPython versions and OS conditions those are, and
// when this file can go, is stated once, above _fork_counts_threads_after_hooks() in
// bindings/cuda_reclaim/_auto_fork.py. A pending call runs on the main thread, at its next eval-breaker check; the
// first such check can still lie inside os.fork() (a later hook's bytecode, or the rest of ours). The call tells by the
// frame that called os.fork(): while that frame is on the stack below the top one, os.fork() has not returned (or its
// caller called deeper after a failed fork): the call adds itself again for the next check. Once that frame is the top
// one, or gone (a failed fork's exception unwound it), the callback runs. A caller that never becomes the top frame
// again (os.fork() called from C code that then runs Python code for good) would keep the main thread's eval breaker
// set: once the call has found os.fork() not returned under kMostTopFramesWhileForking different top frames, the
// callback runs anyway (a check runs the call again and again under one top frame: CPython runs up to 32 pending calls
// per check). All of it is touched by the GIL holder only (main thread).

#include <Python.h>
#include <frameobject.h>

#include "bindings/drain_fork_return.h"

namespace reclaim::bindings {
namespace {

constexpr int kMostTopFramesWhileForking = 10000;
PyObject* g_fork_return_callback = nullptr;     // strong; set while a call is outstanding
PyObject* g_fork_caller_frame = nullptr;        // strong; the frame that called os.fork()
const void* g_fork_last_top_frame = nullptr;    // compared only, never dereferenced
int g_fork_top_frames = 0;                      // top frames under which os.fork() had not returned

// True when `frame` is on the calling thread's stack below `top`. GIL held; allocates frame objects.
bool frame_below(PyFrameObject* top, PyObject* frame) {
  PyFrameObject* current = PyFrame_GetBack(top);  // new reference, or nullptr
  while (current != nullptr) {
    if (reinterpret_cast<PyObject*>(current) == frame) {
      Py_DECREF(current);
      return true;
    }
    PyFrameObject* back = PyFrame_GetBack(current);
    Py_DECREF(current);
    current = back;
  }
  if (PyErr_Occurred()) PyErr_Clear();  // a frame object that could not be made: treated as returned
  return false;
}

// The pending call. Main thread, GIL held, between two bytecodes, no exception set; returns 0 (the
// callback's exception is reported as unraisable: raised here, it would surface in the interrupted code).
int call_once_fork_returned(void*) {
  PyFrameObject* top = PyEval_GetFrame();  // borrowed
  if (top != nullptr && reinterpret_cast<PyObject*>(top) != g_fork_caller_frame &&
      g_fork_top_frames < kMostTopFramesWhileForking && frame_below(top, g_fork_caller_frame) &&
      Py_AddPendingCall(call_once_fork_returned, nullptr) == 0) {
    if (g_fork_last_top_frame != top) {
      g_fork_last_top_frame = top;
      ++g_fork_top_frames;
    }
    return 0;  // still inside os.fork(): at the next check
  }
  PyObject* callback = g_fork_return_callback;
  g_fork_return_callback = nullptr;
  g_fork_last_top_frame = nullptr;
  g_fork_top_frames = 0;
  Py_CLEAR(g_fork_caller_frame);
  if (callback == nullptr) return 0;
  PyObject* result = PyObject_CallNoArgs(callback);
  if (result == nullptr) PyErr_WriteUnraisable(callback);
  Py_XDECREF(result);
  Py_DECREF(callback);
  return 0;
}

}  // namespace

PyObject* drain_worker_call_once_fork_returned(PyObject*, PyObject* callback) {
  if (!PyCallable_Check(callback)) {
    PyErr_Format(PyExc_TypeError, "_DrainWorker._call_once_fork_returned(): the callback must be callable, not %.100s",
                 Py_TYPE(callback)->tp_name);
    return nullptr;
  }
  PyFrameObject* hook = PyEval_GetFrame();  // borrowed: the after-fork hook that called this
  PyFrameObject* caller = hook == nullptr ? nullptr : PyFrame_GetBack(hook);  // new reference
  if (caller == nullptr) {
    // No Python frame called os.fork() (or its frame object could not be made): nothing to tell its return by.
    if (PyErr_Occurred()) PyErr_Clear();  // the hook restarts the thread itself instead
    Py_RETURN_FALSE;
  }
  if (g_fork_return_callback == nullptr && Py_AddPendingCall(call_once_fork_returned, nullptr) != 0) {
    Py_DECREF(caller);
    Py_RETURN_FALSE;  // the pending-call queue is full
  }
  // One call outstanding at a time: a second fork before it ran (os.fork() called twice from C) replaces them.
  PyObject* old_callback = g_fork_return_callback;
  PyObject* old_frame = g_fork_caller_frame;
  Py_INCREF(callback);
  g_fork_return_callback = callback;
  g_fork_caller_frame = reinterpret_cast<PyObject*>(caller);
  g_fork_last_top_frame = nullptr;
  g_fork_top_frames = 0;
  Py_XDECREF(old_callback);
  Py_XDECREF(old_frame);
  Py_RETURN_TRUE;
}

}  // namespace reclaim::bindings
