// bindings/python_compat.h — the CPython C API calls whose spelling depends on the version, 3.10–3.15.
//
// Every PY_VERSION_HEX test of our C++ code about which C API to call lives here (except the PEP 788 entry
// of 3.15+, in interpreter_entry.h), so that moving the oldest supported version or adding a new one is
// one edit. (The capsule's public C header, cuda_reclaim/cuda_reclaim.h, stays self-contained for other
// projects and keeps its own test; module slots that exist only on newer versions stay next to the slot
// table.)
//
// Header-only, C++; include after <Python.h>.

#pragma once

#include <Python.h>

#if PY_VERSION_HEX < 0x030A0000
#error "cuda-reclaim needs CPython 3.10 or newer"
#endif

namespace reclaim::bindings::python_compat {

// True once the main interpreter has begun finalizing (Py_FinalizeEx has started): from then on no
// Python object may be released. Public as Py_IsFinalizing() since 3.13; _Py_IsFinalizing() before
// (removed in 3.13). Both read one runtime field.
// Any thread; no GIL needed; never blocks. Still a Python C API call: never on the producer path.
inline bool is_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// The exception set on this thread, taken out of the thread state so that code may run in between;
// hand it back with restore_exception() exactly once. Owns its references until then. A pair of calls,
// not RAII, on purpose: on 3.10–3.13 CPython ends a thread that takes the GIL during finalization with a
// forced unwind (pthread_exit), which must not run Python code (a restore) on its way out.
struct SavedException {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* exception;  // the exception object, or nullptr
#else
  PyObject* type;  // as PyErr_Fetch left them (unnormalized); all nullptr when none was set
  PyObject* value;
  PyObject* traceback;
#endif
};

// Clears the current exception and returns it (nothing set → an empty SavedException).
// PyErr_GetRaisedException() on 3.12+, where PyErr_Fetch() is deprecated; PyErr_Fetch() before.
// Requires an attached thread state (GIL).
inline SavedException save_exception() noexcept {
  SavedException saved;
#if PY_VERSION_HEX >= 0x030C0000
  saved.exception = PyErr_GetRaisedException();
#else
  PyErr_Fetch(&saved.type, &saved.value, &saved.traceback);
#endif
  return saved;
}

// Sets `saved` as the current exception again, replacing (and releasing) any exception set since;
// an empty one clears it. Steals the references `saved` holds.
// Requires an attached thread state (GIL).
inline void restore_exception(SavedException saved) noexcept {
#if PY_VERSION_HEX >= 0x030C0000
  if (saved.exception != nullptr) {
    PyErr_SetRaisedException(saved.exception);  // documented for a valid exception only
  } else {
    PyErr_Clear();
  }
#else
  PyErr_Restore(saved.type, saved.value, saved.traceback);
#endif
}

// True when an exception is set on this thread: PyErr_Occurred(), the public read of the thread state's
// exception field in every version. The release loop asks once per batch and before each call, not per
// release, so the call costs a plain release nothing. `thread` is the calling thread's state, unused.
// Requires an attached thread state (GIL).
inline bool exception_set([[maybe_unused]] const PyThreadState* thread) noexcept {
  return PyErr_Occurred() != nullptr;
}

// The lock of a concurrent.futures.Future: its private `_condition` (a threading.Condition). No public way
// asks whether a thread that a fork left behind holds it (every public method of the future takes it); the
// meaning is pinned by tests/python/test_python_compat.py. New reference, or null with an exception set.
// Requires an attached thread state (GIL).
inline PyObject* future_lock(PyObject* future) noexcept { return PyObject_GetAttrString(future, "_condition"); }

}  // namespace reclaim::bindings::python_compat
