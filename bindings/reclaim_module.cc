// bindings/reclaim_module.cc — the extension module cuda_reclaim._reclaim.
//
// It owns the process's reclaim queue: it drains and closes it, and publishes its entry-point table (the
// one ABI, cleanup/reclaim_abi.h) through the capsule `cuda_reclaim._reclaim._C_API`. Every release runs
// Py_DECREF on a thread with an attached thread state (the GIL) in a live interpreter that is not
// finalizing (bindings/drain.h). Producers (CUDA's thread, other extensions) only push.
// Main interpreter only: a reference queued by one interpreter must not be released by another, so
// import in a subinterpreter fails with ImportError.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "bindings/counter_names.h"
#include "bindings/drain.h"
#include "bindings/exit_report.h"
#include "bindings/graph_functions.h"
#include "bindings/host_calls.h"
#include "bindings/module_state.h"
#include "cleanup/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "cuda_reclaim/cuda_reclaim.h"

namespace {

using reclaim_bindings::drain_safely;
using reclaim_bindings::queue;

// --- the owner's side of the table -------------------------------------------------------------------

// The package's function to call when a C API user attaches (cuda_reclaim._auto.note_handover), set by
// _set_attach_hook(). A strong reference kept for the life of the process (main interpreter only).
PyObject* g_attach_hook = nullptr;

// reclaim_api.drain: the safe drain. Requires the GIL.
ptrdiff_t owner_drain(ptrdiff_t max_items) {
  return drain_safely(max_items < 0 ? SIZE_MAX : static_cast<std::size_t>(max_items));
}

// reclaim_api.attach: a C API user will hand references over: start the automatic drain. Requires the GIL.
int owner_attach() {
  if (g_attach_hook == nullptr) return 0;  // the package is still importing: it starts lazily anyway
  PyObject* result = PyObject_CallNoArgs(g_attach_hook);
  if (result == nullptr) return -1;
  Py_DECREF(result);
  return 0;
}

const reclaim_owner kOwner = {owner_drain, owner_attach};

// --- argument helpers -------------------------------------------------------------------------------

// max_items: None → all; an int >= 0 → itself, where anything at or above SIZE_MAX also means all.
bool parse_budget(PyObject* value, std::size_t* budget) {
  *budget = SIZE_MAX;
  if (value == nullptr || value == Py_None) return true;
  if (!PyLong_Check(value)) {
    PyErr_Format(PyExc_TypeError, "max_items must be an int or None, not %.100s", Py_TYPE(value)->tp_name);
    return false;
  }
  int overflow = 0;
  const long long count = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (count == -1 && PyErr_Occurred()) return false;
  if (overflow > 0) return true;  // larger than any queue: all
  if (overflow < 0 || count < 0) {
    PyErr_Format(PyExc_ValueError, "max_items must be >= 0 or None, not %R", value);
    return false;
  }
  *budget = static_cast<std::size_t>(count);
  return true;
}

// timeout in seconds → milliseconds for poll(2). None → -1 (no limit) when allowed. A number too large
// for a float raises OverflowError (as float() does); one too large for poll(2) means no limit.
bool parse_timeout(PyObject* value, bool none_means_forever, int* timeout_ms) {
  if (value == nullptr) {
    *timeout_ms = none_means_forever ? -1 : 0;
    return true;
  }
  if (value == Py_None && none_means_forever) {
    *timeout_ms = -1;
    return true;
  }
  if (!PyFloat_Check(value) && !PyLong_Check(value)) {
    PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds%s, not %.100s",
                 none_means_forever ? " or None" : "", Py_TYPE(value)->tp_name);
    return false;
  }
  const double seconds = PyFloat_AsDouble(value);
  if (seconds == -1.0 && PyErr_Occurred()) return false;  // OverflowError for a huge int
  if (!(seconds >= 0.0)) {                                 // also rejects NaN
    PyErr_Format(PyExc_ValueError, "timeout must be >= 0 seconds, not %R", value);
    return false;
  }
  const double ms = std::ceil(seconds * 1000.0);
  *timeout_ms = ms > 2147483647.0 ? -1 : static_cast<int>(ms);
  return true;
}

// Blocks with the GIL released until work is probably pending, the queue is closed, or the timeout passes.
bool wait_without_gil(int timeout_ms) {
  bool ready;
  Py_BEGIN_ALLOW_THREADS
  ready = queue().wait_for_work(timeout_ms);
  Py_END_ALLOW_THREADS
  return ready;
}

// --- module functions -------------------------------------------------------------------------------

PyObject* py_drain(PyObject*, PyObject* args, PyObject* kwargs) {
  // The common call, drain() with nothing queued: one atomic load, no parsing, no allocation (CPython
  // passes the empty-tuple singleton and no dict).
  if (PyTuple_GET_SIZE(args) == 0 && kwargs == nullptr && !queue().maybe_pending()) return PyLong_FromLong(0);
  // The next most common call, drain(n) from a loop: no keyword parsing either.
  if (kwargs == nullptr && PyTuple_GET_SIZE(args) == 1 && PyLong_CheckExact(PyTuple_GET_ITEM(args, 0))) {
    std::size_t budget;
    if (!parse_budget(PyTuple_GET_ITEM(args, 0), &budget)) return nullptr;
    return PyLong_FromSsize_t(drain_safely(budget));
  }
  static const char* kKeywords[] = {"max_items", "timeout", nullptr};
  PyObject* max_items = nullptr;
  PyObject* timeout = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:drain", const_cast<char**>(kKeywords), &max_items,
                                   &timeout)) {
    return nullptr;
  }
  std::size_t budget;
  int timeout_ms;
  if (!parse_budget(max_items, &budget)) return nullptr;
  if (!parse_timeout(timeout, /*none_means_forever=*/false, &timeout_ms)) return nullptr;
  // A closed queue gets no new work: waiting for it would only end at the timeout (close() also wakes
  // every drain already waiting).
  if (timeout_ms != 0 && !queue().maybe_pending() && !queue().is_closed()) wait_without_gil(timeout_ms);
  return PyLong_FromSsize_t(drain_safely(budget));
}

PyObject* py_drain_references(PyObject*, PyObject*) {
  return PyLong_FromSsize_t(drain_safely(SIZE_MAX, /*linger=*/false, nullptr, reclaim_bindings::Calls::kGiveBack));
}

PyObject* py_wait(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kKeywords[] = {"timeout", nullptr};
  PyObject* timeout = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", const_cast<char**>(kKeywords), &timeout)) {
    return nullptr;
  }
  int timeout_ms;
  if (!parse_timeout(timeout, /*none_means_forever=*/true, &timeout_ms)) return nullptr;
  return PyBool_FromLong(wait_without_gil(timeout_ms));
}

PyObject* py_pending(PyObject*, PyObject*) { return PyLong_FromSize_t(queue().pending()); }

PyObject* py_is_closed(PyObject*, PyObject*) { return PyBool_FromLong(queue().is_closed()); }

PyObject* py_trim_would_help(PyObject*, PyObject*) { return PyBool_FromLong(queue().trim_would_help()); }

PyObject* py_trim(PyObject*, PyObject*) {
  // Never runs Python; may wait for a producer slot's holder and calls the allocator: the GIL is released.
  reclaim::TrimStatus status;
  Py_BEGIN_ALLOW_THREADS
  status = queue().trim();
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(status == reclaim::TrimStatus::kTrimmed);
}

PyObject* py_close(PyObject*, PyObject*) { return PyLong_FromSsize_t(reclaim_bindings::close_safely()); }

PyObject* py_defer_release(PyObject*, PyObject* object) {
  Py_INCREF(object);
  switch (queue().push(object)) {
    case reclaim::PushStatus::kQueued:
      Py_RETURN_TRUE;
    case reclaim::PushStatus::kLeakedAfterClose:
      // Counted as leaked, like any push after close: after the final drain nothing is released.
      Py_RETURN_FALSE;
    case reclaim::PushStatus::kRejected:
      // Counted as rejected; here, unlike on CUDA's thread, we can give the reference back.
      Py_DECREF(object);
      return PyErr_NoMemory();
    case reclaim::PushStatus::kInvalidArgument:
      break;
  }
  Py_DECREF(object);
  PyErr_SetString(PyExc_SystemError, "cuda_reclaim: push refused a non-NULL object");
  return nullptr;
}

PyObject* py_stats(PyObject*, PyObject*) {
  const reclaim::CounterSnapshot counters = queue().snapshot();
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
#define RECLAIM_STATS_ITEM_(name, description)                                          \
  {                                                                                     \
    PyObject* value = PyLong_FromUnsignedLongLong(counters.name);                       \
    if (value == nullptr || PyDict_SetItemString(dict, #name, value) < 0) {              \
      Py_XDECREF(value);                                                                \
      Py_DECREF(dict);                                                                  \
      return nullptr;                                                                   \
    }                                                                                   \
    Py_DECREF(value);                                                                   \
  }
  RECLAIM_COUNTERS(RECLAIM_STATS_ITEM_)
#undef RECLAIM_STATS_ITEM_
  return dict;
}

PyObject* py_fileno(PyObject*, PyObject*) { return PyLong_FromLong(queue().wakeup_fd()); }

PyObject* py_notify(PyObject*, PyObject*) {
  queue().notify();
  Py_RETURN_NONE;
}

PyObject* py_report(PyObject*, PyObject*) {
  char line[512];
  const std::size_t length = reclaim::format_report(queue().snapshot(), line, sizeof line);
  return PyUnicode_FromStringAndSize(line, static_cast<Py_ssize_t>(length));
}

PyObject* py_after_fork_in_child(PyObject*, PyObject*) {
  reclaim_bindings::forget_drain_threads_after_fork();
  reclaim_bindings::forget_calls_after_fork();
  reclaim_bindings::reopen_calls_after_fork();
  Py_RETURN_NONE;
}

PyObject* py_report_at_finalize(PyObject*, PyObject*) {
  reclaim_bindings::write_exit_report_at_finalize_instead();
  Py_RETURN_NONE;
}

PyObject* py_set_attach_hook(PyObject*, PyObject* hook) {
  if (!PyCallable_Check(hook)) {
    PyErr_Format(PyExc_TypeError, "the attach hook must be callable, not %.100s", Py_TYPE(hook)->tp_name);
    return nullptr;
  }
  Py_XSETREF(g_attach_hook, Py_NewRef(hook));
  Py_RETURN_NONE;
}

template <typename Function>
PyCFunction as_cfunction(Function function) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function));
}

PyMethodDef kMethods[] = {
    {"drain", as_cfunction(py_drain), METH_VARARGS | METH_KEYWORDS,
     "drain($module, /, max_items=None, timeout=0.0)\n--\n\n"
     "Release queued references on this thread; return how many. max_items bounds the work (None, or\n"
     "any int at least as large as the queue, releases everything). With timeout > 0 and nothing\n"
     "pending, first wait (GIL released) up to timeout seconds for work; a closed queue returns at once.\n"
     "Finalizer exceptions go to sys.unraisablehook. Safe to call from a finalizer. Releases nothing\n"
     "once the interpreter is finalizing."},
    {"_drain_references", py_drain_references, METH_NOARGS,
     "Internal (the gc mode's hook): release queued references, but give every call (host call, host-node\n"
     "firing) back unrun to the front of the queue, for the next drain that runs calls."},
    {"pending", py_pending, METH_NOARGS, "pending($module, /)\n--\n\nApproximate number of queued references."},
    {"is_closed", py_is_closed, METH_NOARGS, "is_closed($module, /)\n--\n\nTrue once close() ran."},
    {"_trim_would_help", py_trim_would_help, METH_NOARGS,
     "Internal (tests): True while a burst's memory is waiting to be given back by trim()."},
    {"trim", py_trim, METH_NOARGS,
     "trim($module, /)\n--\n\n"
     "Give back the memory a burst left behind: when more references were pending since the last trim\n"
     "than the reserved capacity, the queue moves what is pending into fresh storage of the reserved\n"
     "capacity and frees the old one. Nothing is released or lost; counters do not change. Returns True\n"
     "when memory was given back; False when there was nothing to give back or a drain was in progress\n"
     "(from a finalizer, say): try again later. The automatic drain thread trims by itself about a\n"
     "second after a burst."},
    {"close", py_close, METH_NOARGS,
     "close($module, /)\n--\n\n"
     "Close, then release everything queued before the close: later hand-overs are counted as\n"
     "leaked_after_close. Wakes every thread waiting in drain() or wait(). Idempotent. Returns the\n"
     "number released by this call."},
    {"defer_release", py_defer_release, METH_O,
     "defer_release($module, obj, /)\n--\n\n"
     "Hand one reference to obj over to the queue (any thread). Returns True if queued, False if the\n"
     "queue is closed (counted as leaked_after_close)."},
    {"stats", py_stats, METH_NOARGS,
     "stats($module, /)\n--\n\nAll counters, as a dict of plain ints in STATS_KEYS order."},
    {"fileno", py_fileno, METH_NOARGS,
     "fileno($module, /)\n--\n\n"
     "The wake-up eventfd: readable while work is pending (except while the automatic drain thread\n"
     "lingers: it then takes new work itself within a millisecond). Do not close it."},
    {"wait", as_cfunction(py_wait), METH_VARARGS | METH_KEYWORDS,
     "wait($module, /, timeout=None)\n--\n\n"
     "Block with the GIL released until work is probably pending or the queue is closed (True), or\n"
     "timeout seconds pass (False); None waits without limit (notify() and close() end it)."},
    {"notify", py_notify, METH_NOARGS, "notify($module, /)\n--\n\nWake every wait(), even with nothing pending."},
    {"report", py_report, METH_NOARGS, "report($module, /)\n--\n\nThe exit report's line, now."},
    {"_after_fork_in_child", py_after_fork_in_child, METH_NOARGS, "Internal: the fork hook of the package."},
    {"_report_at_finalize", py_report_at_finalize, METH_NOARGS,
     "Internal (the atexit hook): this exit skips the C exit handlers (an unhandled KeyboardInterrupt\n"
     "makes CPython end by SIGINT after finalizing), so write the exit report when finalization ends."},
    {"_set_attach_hook", py_set_attach_hook, METH_O,
     "Internal (the package, at import): what to call when a C API user attaches."},
    {nullptr, nullptr, 0, nullptr},
};

// --- module init ------------------------------------------------------------------------------------

int module_exec(PyObject* module) {
  if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
    PyErr_SetString(PyExc_ImportError,
                    "cuda_reclaim._reclaim can only be imported in the main interpreter: its queue is "
                    "process-wide and a reference must be released by the interpreter that owns it");
    return -1;
  }
  if (const char* capacity = std::getenv("CUDA_RECLAIM_RESERVED_CAPACITY")) {
    std::size_t parsed;
    if (!reclaim::parse_reserved_capacity(capacity, &parsed)) {
      PyErr_Format(PyExc_ImportError,
                   "cuda_reclaim: CUDA_RECLAIM_RESERVED_CAPACITY=%.40s is not a valid capacity: expected "
                   "an integer from 1 to %zu (pointers reserved up front)",
                   capacity, reclaim::kMaxReservedCapacity);
      return -1;
    }
  }
  if (reclaim_bindings::configure_exit_report() < 0) return -1;
  // Creates the process-wide queue now, never on a producer thread, and makes this module its owner.
  if (reclaim_own_process_queue(&kOwner) < 0 || !reclaim_bindings::bind_queue()) {
    PyErr_SetString(PyExc_ImportError, "cuda_reclaim._reclaim: this copy of the queue was adopted elsewhere");
    return -1;
  }
  const reclaim_api* api = reclaim_api_in_use();
  PyObject* capsule = PyCapsule_New(const_cast<reclaim_api*>(api), CUDA_RECLAIM_CAPSULE_NAME, nullptr);
  if (capsule == nullptr) return -1;
  const int added = PyModule_AddObjectRef(module, "_C_API", capsule);
  Py_DECREF(capsule);
  if (added < 0) return -1;
  if (PyModule_AddIntConstant(module, "ABI_VERSION", RECLAIM_ABI_VERSION) < 0) return -1;
  if (reclaim_bindings::add_counter_names(module) < 0) return -1;
  if (reclaim_bindings::add_drain_worker_type(module) < 0) return -1;
  if (reclaim_bindings::add_host_call_functions(module) < 0) return -1;
  return add_graph_functions(module);
}

PyModuleDef_Slot kSlots[] = {
    {Py_mod_exec, reinterpret_cast<void*>(module_exec)},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, nullptr},
};

// The module state holds the objects a module object hands to Python code (bindings/module_state.h).
int module_traverse(PyObject* module, visitproc visit, void* arg) {
  Py_VISIT(reclaim_bindings::module_state(module)->driver_error);
  return 0;
}

int module_clear(PyObject* module) {
  Py_CLEAR(reclaim_bindings::module_state(module)->driver_error);
  return 0;
}

void module_free(void* module) { module_clear(static_cast<PyObject*>(module)); }

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "cuda_reclaim._reclaim",
    "Process-wide reclaim queue: native threads hand over references, Python releases them safely.",
    sizeof(reclaim_bindings::ModuleState),
    kMethods,
    kSlots,
    module_traverse,
    module_clear,
    module_free,
};

}  // namespace

PyMODINIT_FUNC PyInit__reclaim(void) { return PyModuleDef_Init(&kModule); }
