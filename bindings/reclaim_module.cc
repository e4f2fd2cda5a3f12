// bindings/reclaim_module.cc — the extension module cuda_reclaim._reclaim.
//
// The only place where queued references are released: every release runs Py_DECREF on a thread with an
// attached thread state (the GIL) in a live interpreter that is not finalizing. Producers (CUDA's
// thread, other extensions through the capsule) only push into cleanup/'s process-wide queue.
// Main interpreter only: a reference queued by one interpreter must not be released by another, so
// import in a subinterpreter fails with ImportError.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <strings.h>

#include "bindings/drain.h"
#include "bindings/graph_functions.h"
#include "bindings/host_calls.h"
#include "cuda_reclaim/cuda_reclaim.h"
#include "cleanup/reclaim.h"
#include "cleanup/reclaim_queue.h"

namespace {

using reclaim_bindings::drain_safely;
using reclaim_bindings::queue;

static_assert(sizeof(cuda_reclaim_stats) == sizeof(reclaim_stats), "capsule stats mirror cleanup's");

// --- capsule entry points ---------------------------------------------------------------------------

int capi_push(PyObject* object) { return reclaim_push(object); }

Py_ssize_t capi_drain(Py_ssize_t max_items) {
  return drain_safely(max_items < 0 ? SIZE_MAX : static_cast<std::size_t>(max_items));
}

int capi_get_stats(cuda_reclaim_stats* out, size_t size) {
  if (out == nullptr) return -1;
  reclaim_stats all;
  reclaim_get_stats(&all);
  std::memcpy(out, &all, size < sizeof all ? size : sizeof all);
  return 0;
}

// queue_ops hands out cleanup/'s table for this module's queue: this module never adopts another
// copy's queue, so it is global_queue() itself, the queue every drain below works on.
const cuda_reclaim_c_api kCApi = {
    CUDA_RECLAIM_ABI_VERSION, sizeof(cuda_reclaim_c_api), capi_push, reclaim_host_destructor,
    capi_drain,               capi_get_stats,             reclaim_queue_ops_in_use,
};

// --- argument helpers -------------------------------------------------------------------------------

// Converts an optional item budget: None → all; a non-negative int → itself. Sets an exception and
// returns false otherwise.
bool parse_budget(PyObject* value, std::size_t* budget) {
  if (value == nullptr || value == Py_None) {
    *budget = SIZE_MAX;
    return true;
  }
  if (!PyLong_Check(value)) {
    PyErr_Format(PyExc_TypeError, "max_items must be an int or None, not %.100s", Py_TYPE(value)->tp_name);
    return false;
  }
  const long long count = PyLong_AsLongLong(value);
  if (count == -1 && PyErr_Occurred()) return false;
  if (count < 0) {
    PyErr_Format(PyExc_ValueError, "max_items must be >= 0 or None, not %lld", count);
    return false;
  }
  *budget = static_cast<std::size_t>(count);
  return true;
}

// Converts a timeout in seconds (None → wait forever, as -1 ms) to milliseconds for poll(2).
bool parse_timeout(PyObject* value, bool none_means_forever, int* timeout_ms) {
  if (value == nullptr || (value == Py_None && none_means_forever)) {
    *timeout_ms = value == nullptr ? 0 : -1;
    return true;
  }
  const double seconds = PyFloat_AsDouble(value);
  if (seconds == -1.0 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds%s, not %.100s",
                 none_means_forever ? " or None" : "", Py_TYPE(value)->tp_name);
    return false;
  }
  if (!(seconds >= 0.0)) {  // also rejects NaN
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

PyObject* py_drain(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // The common call, drain() with nothing queued: one atomic load, no parsing, no allocation.
  if (nargs == 0 && kwnames == nullptr && !queue().maybe_pending()) return PyLong_FromLong(0);

  static const char* const kNames[] = {"max_items", "timeout"};
  PyObject* values[2] = {nullptr, nullptr};
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "drain() takes at most 2 arguments (%zd given)", nargs);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) values[i] = args[i];
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    int slot = -1;
    for (int n = 0; n < 2; ++n) {
      if (PyUnicode_CompareWithASCIIString(name, kNames[n]) == 0) slot = n;
    }
    if (slot < 0) {
      PyErr_Format(PyExc_TypeError, "drain() got an unexpected keyword argument %R", name);
      return nullptr;
    }
    if (values[slot] != nullptr) {
      PyErr_Format(PyExc_TypeError, "drain() got multiple values for argument '%s'", kNames[slot]);
      return nullptr;
    }
    values[slot] = args[nargs + k];
  }
  std::size_t budget;
  int timeout_ms;
  if (!parse_budget(values[0], &budget)) return nullptr;
  if (!parse_timeout(values[1], /*none_means_forever=*/false, &timeout_ms)) return nullptr;
  // A closed queue gets no new work: waiting for it would only end at the timeout (close() also wakes
  // every drain already waiting).
  if (timeout_ms != 0 && !queue().maybe_pending() && !queue().is_closed()) wait_without_gil(timeout_ms);
  return PyLong_FromSsize_t(drain_safely(budget));
}

PyObject* py_pending(PyObject*, PyObject*) { return PyLong_FromSize_t(queue().pending()); }

PyObject* py_is_closed(PyObject*, PyObject*) { return PyBool_FromLong(queue().is_closed()); }

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
  const reclaim::CounterSnapshot c = queue().snapshot();
  struct {
    const char* name;
    std::uint64_t value;
  } const fields[] = {
      {"enqueued", c.enqueued},
      {"released", c.released},
      {"pending", c.pending},
      {"leaked_after_close", c.leaked_after_close},
      {"rejected", c.rejected},
      {"abandoned_after_fork", c.abandoned_after_fork},
      {"drain_calls", c.drain_calls},
      {"max_pending", c.max_pending},
      {"wakeups", c.wakeups},
  };
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  for (const auto& field : fields) {
    PyObject* value = PyLong_FromUnsignedLongLong(field.value);
    if (value == nullptr || PyDict_SetItemString(dict, field.name, value) < 0) {
      Py_XDECREF(value);
      Py_DECREF(dict);
      return nullptr;
    }
    Py_DECREF(value);
  }
  return dict;
}

PyObject* py_fileno(PyObject*, PyObject*) { return PyLong_FromLong(queue().wakeup_fd()); }

PyObject* py_wait(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "wait() takes at most 1 argument (%zd given)", nargs);
    return nullptr;
  }
  int timeout_ms;
  if (!parse_timeout(nargs >= 1 ? args[0] : Py_None, /*none_means_forever=*/true, &timeout_ms)) {
    return nullptr;
  }
  return PyBool_FromLong(wait_without_gil(timeout_ms));
}

PyObject* py_after_fork_in_child(PyObject*, PyObject*) {
  reclaim_bindings::forget_main_thread_drain_after_fork();
  reclaim_bindings::forget_calls_after_fork();
  Py_RETURN_NONE;
}

PyObject* py_notify(PyObject*, PyObject*) {
  queue().notify();
  Py_RETURN_NONE;
}

PyObject* py_report(PyObject*, PyObject*) {
  char line[512];
  const std::size_t length = reclaim::format_report(queue().snapshot(), line, sizeof line);
  return PyUnicode_FromStringAndSize(line, static_cast<Py_ssize_t>(length));
}

// --- exit report --------------------------------------------------------------------------------------

// Set at import from CUDA_RECLAIM_REPORT; read once at process exit.
bool g_exit_report_requested = false;
// Exchanged by whichever exit path writes the report first: one report per process.
std::atomic<bool> g_exit_report_written{false};
// Set by _report_at_finalize(): this exit ends by SIGINT after Py_Finalize, so no C exit handler runs.
std::atomic<bool> g_report_at_finalize{false};

void write_exit_report_once() {
  if (g_exit_report_requested && !g_exit_report_written.exchange(true)) reclaim_write_report(2);
}

// Normally the report is written from the loader's fini pass (after atexit handlers and after
// Py_Finalize; libcuda is loaded after this module, so after CUDA's own teardown has fired its
// destructors): so the line includes leaks after finalization. Only the C side is touched here.
__attribute__((destructor)) void write_exit_report() { write_exit_report_once(); }

// The last step of Py_Finalize (Py_AtExit). Writes the report only on exits that skip the fini pass.
void write_exit_report_at_finalize() {
  if (g_report_at_finalize.load()) write_exit_report_once();
}

PyObject* py_report_at_finalize(PyObject*, PyObject*) {
  g_report_at_finalize.store(true);
  Py_RETURN_NONE;
}

// CUDA_RECLAIM_REPORT: "1", "true", "yes", "on" (any case) ask for the report; "", "0", "false", "no",
// "off" do not. Anything else is refused at import, so a typo never silently disables it.
int parse_report_setting(const char* text, bool* requested) {
  static const char* const kOn[] = {"1", "true", "yes", "on"};
  static const char* const kOff[] = {"", "0", "false", "no", "off"};
  for (const char* word : kOn) {
    if (strcasecmp(text, word) == 0) return *requested = true, 0;
  }
  for (const char* word : kOff) {
    if (strcasecmp(text, word) == 0) return *requested = false, 0;
  }
  return -1;
}

PyMethodDef kMethods[] = {
    {"drain", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_drain)),
     METH_FASTCALL | METH_KEYWORDS,
     "drain(max_items=None, timeout=0.0) -> int\n\n"
     "Release queued references on this thread; return how many. With timeout > 0 and nothing\n"
     "pending, first wait (GIL released) up to timeout seconds for work. Finalizer exceptions go to\n"
     "sys.unraisablehook. Safe to call from a finalizer. Releases nothing once the interpreter is\n"
     "finalizing."},
    {"pending", py_pending, METH_NOARGS, "pending() -> int\n\nApproximate number of queued references."},
    {"is_closed", py_is_closed, METH_NOARGS, "is_closed() -> bool"},
    {"close", py_close, METH_NOARGS,
     "close() -> int\n\nClose, then release everything queued before the close: later hand-overs are\n"
     "counted as leaked_after_close. Idempotent. Returns the number released by this call."},
    {"defer_release", py_defer_release, METH_O,
     "defer_release(obj) -> bool\n\nHand one reference to obj over to the queue (any thread). Returns\n"
     "True if queued, False if the queue is closed (counted as leaked)."},
    {"stats", py_stats, METH_NOARGS, "stats() -> dict of counters (plain ints)."},
    {"fileno", py_fileno, METH_NOARGS,
     "fileno() -> int\n\nThe wake-up eventfd: readable while work is pending (except while the automatic\n"
     "drain thread lingers: it then takes new work itself within a millisecond). Do not close it."},
    {"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_wait)), METH_FASTCALL,
     "wait(timeout=None) -> bool\n\nBlock with the GIL released until work is probably pending or the\n"
     "queue is closed (True), or timeout seconds pass (False); None waits without limit (notify() and\n"
     "close() end it)."},
    {"_after_fork_in_child", py_after_fork_in_child, METH_NOARGS, "Internal: fork hook."},
    {"_report_at_finalize", py_report_at_finalize, METH_NOARGS,
     "Internal (the atexit hook): this exit skips the C exit handlers (an unhandled KeyboardInterrupt\n"
     "makes CPython end by SIGINT after finalizing), so write the exit report when finalization ends."},
    {"notify", py_notify, METH_NOARGS, "notify()\n\nWake every wait(), even with nothing pending."},
    {"report", py_report, METH_NOARGS, "report() -> str\n\nThe exit report's line, now."},
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
  if (const char* report = std::getenv("CUDA_RECLAIM_REPORT")) {
    if (parse_report_setting(report, &g_exit_report_requested) < 0) {
      PyErr_Format(PyExc_ImportError,
                   "cuda_reclaim: CUDA_RECLAIM_REPORT=%.40s is not understood: use 1/true/yes/on to ask for "
                   "the exit report, or 0/false/no/off",
                   report);
      return -1;
    }
  }
  (void)queue();  // create the process-wide queue now, never on a producer thread
  static bool at_exit_registered = false;
  if (!at_exit_registered) {
    at_exit_registered = Py_AtExit(write_exit_report_at_finalize) == 0;
  }

  PyObject* capsule = PyCapsule_New(const_cast<cuda_reclaim_c_api*>(&kCApi), CUDA_RECLAIM_CAPSULE_NAME,
                                    nullptr);
  if (capsule == nullptr || PyModule_AddObject(module, "_C_API", capsule) < 0) {
    Py_XDECREF(capsule);
    return -1;
  }
  if (PyModule_AddIntConstant(module, "ABI_VERSION", CUDA_RECLAIM_ABI_VERSION) < 0) return -1;
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

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "cuda_reclaim._reclaim",
    "Process-wide reclaim queue: native threads hand over references, Python releases them safely.",
    0,
    kMethods,
    kSlots,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__reclaim(void) { return PyModuleDef_Init(&kModule); }
