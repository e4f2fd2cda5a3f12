// bindings/reclaim_module.cc — the extension module cuda_reclaim._reclaim.
//
// It owns the process's reclaim queue: it drains and closes it, and publishes its entry-point table (the
// one ABI, cuda_reclaim/reclaim_abi.h) through the capsule `cuda_reclaim._reclaim._C_API`. Every release runs
// Py_DECREF on a thread with an attached thread state (the GIL) in a live interpreter that is not
// finalizing (bindings/drain.h). Producers (CUDA's thread, other extensions) only push.
// Main interpreter only: a reference queued by one interpreter must not be released by another, so
// import in a subinterpreter fails with ImportError.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "bindings/arguments.h"
#include "bindings/attachments.h"
#include "bindings/drain.h"
#include "bindings/drain_step_aside.h"
#include "bindings/drain_worker.h"
#include "bindings/driver_functions.h"
#include "bindings/exit_report.h"
#include "bindings/graph_functions.h"
#include "bindings/host_calls.h"
#include "bindings/module_state.h"
#include "bindings/stats_table.h"
#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "cuda_reclaim/cuda_reclaim.h"

namespace {

using reclaim::bindings::check_callable;
using reclaim::bindings::drain_safely;
using reclaim::bindings::Parameters;
using reclaim::bindings::parse_arguments;
using reclaim::bindings::parse_count;
using reclaim::bindings::parse_timeout;
using reclaim::bindings::queue;

// --- the owner's side of the table -------------------------------------------------------------------

// The package's function to call when a C API user announces itself (cuda_reclaim._auto.note_announce), set
// by _set_announce_hook(). A strong reference kept for the life of the process (main interpreter only): a
// process global, not module state, since the capsule's announce() that calls it is given no module.
PyObject* g_announce_hook = nullptr;

// reclaim_api.drain: the safe drain. Requires the GIL.
ptrdiff_t owner_drain(ptrdiff_t max_items) {
  return drain_safely(max_items < 0 ? SIZE_MAX : static_cast<std::size_t>(max_items));
}

// reclaim_api.announce: a C API user will hand references over: start the automatic drain. Requires the GIL.
int owner_announce() {
  if (g_announce_hook == nullptr) return 0;  // the package is still importing: it starts lazily anyway
  PyObject* result = PyObject_CallNoArgs(g_announce_hook);
  if (result == nullptr) return -1;
  Py_DECREF(result);
  return 0;
}

const reclaim_owner kOwner = {owner_drain, owner_announce};

// Blocks with the GIL released until work is probably pending, the queue is closed, or the timeout passes.
bool wait_without_gil(int timeout_ms) {
  bool ready;
  Py_BEGIN_ALLOW_THREADS
  ready = queue().wait_for_work(timeout_ms);
  Py_END_ALLOW_THREADS
  return ready;
}

// --- module functions -------------------------------------------------------------------------------

constexpr const char* kDrainNames[] = {"max_items", "timeout", nullptr};
constexpr Parameters kDrainParameters = {"drain", kDrainNames, 0, 0};

PyObject* py_drain(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // The common call, drain() with nothing queued: one atomic load, no parsing, no allocation.
  if (nargs == 0 && kwnames == nullptr && !queue().maybe_pending()) return PyLong_FromLong(0);
  PyObject* values[2];
  if (!parse_arguments(kDrainParameters, args, nargs, kwnames, values)) return nullptr;
  std::size_t budget;
  int timeout_ms;
  if (!parse_count("drain", "max_items", values[0], &budget)) return nullptr;
  if (!parse_timeout("drain", "timeout", values[1], /*absent_ms=*/0, &timeout_ms)) return nullptr;
  // A closed queue gets no new work: waiting for it would only end at the timeout (close() also wakes
  // every drain already waiting).
  if (timeout_ms != 0 && !queue().maybe_pending() && !queue().is_closed()) wait_without_gil(timeout_ms);
  return PyLong_FromSsize_t(drain_safely(budget));
}

constexpr const char* kWaitNames[] = {"timeout", nullptr};
constexpr Parameters kWaitParameters = {"wait", kWaitNames, 0, 0};

PyObject* py_wait(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* timeout;
  if (!parse_arguments(kWaitParameters, args, nargs, kwnames, &timeout)) return nullptr;
  int timeout_ms;
  if (!parse_timeout("wait", "timeout", timeout, /*absent_ms=*/-1, &timeout_ms)) return nullptr;
  return PyBool_FromLong(wait_without_gil(timeout_ms));
}

PyObject* py_pending(PyObject*, PyObject*) { return PyLong_FromSize_t(queue().pending()); }

PyObject* py_is_closed(PyObject*, PyObject*) { return PyBool_FromLong(queue().is_closed()); }

PyObject* py_trim_would_help(PyObject*, PyObject*) { return PyBool_FromLong(queue().trim_would_help()); }

PyObject* py_trim(PyObject*, PyObject*) {
  // Never runs Python; may wait for a producer lane's holder and calls the allocator: the GIL is released.
  reclaim::TrimStatus status;
  Py_BEGIN_ALLOW_THREADS
  status = queue().trim();
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(status == reclaim::TrimStatus::kTrimmed);
}

PyObject* py_close(PyObject*, PyObject*) { return PyLong_FromSsize_t(reclaim::bindings::close_after_the_shut()); }

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

PyObject* py_fileno(PyObject*, PyObject*) { return PyLong_FromLong(queue().wakeup_fd()); }

PyObject* py_report(PyObject*, PyObject*) {
  char line[512];
  const std::size_t length = reclaim::format_report(queue().snapshot(), line, sizeof line);
  return PyUnicode_FromStringAndSize(line, static_cast<Py_ssize_t>(length));
}

PyObject* py_after_fork_in_child(PyObject*, PyObject*) {
  reclaim::bindings::forget_step_aside_after_fork();  // only the forking thread exists: none waits for the GIL
  reclaim::bindings::forget_calls_after_fork();
  reclaim::bindings::reopen_calls_after_fork();
  Py_RETURN_NONE;
}

PyObject* py_report_at_finalize(PyObject*, PyObject*) {
  reclaim::bindings::write_exit_report_at_finalize_instead();
  Py_RETURN_NONE;
}

PyObject* py_releasing_on_this_thread(PyObject*, PyObject*) {
  return PyBool_FromLong(reclaim::bindings::releasing_on_this_thread());
}

PyObject* py_set_announce_hook(PyObject*, PyObject* hook) {
  if (!check_callable("_set_announce_hook", "hook", hook)) return nullptr;
  Py_XSETREF(g_announce_hook, Py_NewRef(hook));
  Py_RETURN_NONE;
}

template <typename Function>
PyCFunction as_cfunction(Function function) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function));
}

PyMethodDef kMethods[] = {
    {"drain", as_cfunction(py_drain), METH_FASTCALL | METH_KEYWORDS,
     "drain($module, /, max_items=None, timeout=0.0)\n--\n\n"
     "Release queued references on this thread; return how many. max_items bounds the work (None: all,\n"
     "0: none). With timeout > 0 (None: no limit) and nothing pending, first wait (GIL released) for\n"
     "work; a closed queue returns at once. Finalizer exceptions go to sys.unraisablehook. Safe to call\n"
     "from a finalizer. Releases nothing once the interpreter is finalizing."},
    {"pending", py_pending, METH_NOARGS, "pending($module, /)\n--\n\nApproximate number of queued references."},
    {"is_closed", py_is_closed, METH_NOARGS, "is_closed($module, /)\n--\n\nTrue once close() ran."},
    {"_trim_would_help", py_trim_would_help, METH_NOARGS,
     "_trim_would_help($module, /)\n--\n\n"
     "Internal (tests): True while a burst's memory is waiting to be freed by trim()."},
    {"trim", py_trim, METH_NOARGS,
     "trim($module, /)\n--\n\n"
     "Free the memory a burst left behind: when more references were pending since the last trim\n"
     "than the reserved capacity, the queue moves what is pending into fresh storage of the reserved\n"
     "capacity and frees the old one. Nothing is released or lost; counters do not change. True when\n"
     "memory was freed. False in two cases: nothing to free (no burst since the last trim, or\n"
     "the queue is closed), or busy (a drain, close or counter read is in flight, another trim, or\n"
     "memory ran out while moving): try again later. The automatic drain thread trims by itself about a\n"
     "second after a burst."},
    {"close", py_close, METH_NOARGS,
     "close($module, /)\n--\n\n"
     "Close, then release everything queued before the close: later hand-overs are counted as\n"
     "leaked_after_close. Wakes every thread waiting in drain() or wait(). Idempotent. Returns the\n"
     "number released by this call."},
    {"defer_release", py_defer_release, METH_O,
     "defer_release($module, obj, /)\n--\n\n"
     "Hand one reference to obj over to the queue (any thread). Returns True if queued, False if the\n"
     "queue is closed (counted as leaked_after_close). MemoryError when the queue could not store it\n"
     "(counted as rejected; the reference stays the caller's)."},
    {"fileno", py_fileno, METH_NOARGS,
     "fileno($module, /)\n--\n\n"
     "The wake-up eventfd: readable while work is pending (except while the automatic drain thread\n"
     "lingers: it then takes new work itself within a millisecond). Do not close it."},
    {"wait", as_cfunction(py_wait), METH_FASTCALL | METH_KEYWORDS,
     "wait($module, /, timeout=None)\n--\n\n"
     "Block with the GIL released until work is probably pending or the queue is closed (True), or\n"
     "timeout seconds pass (False); None waits without limit (close() ends it)."},
    {"report", py_report, METH_NOARGS, "report($module, /)\n--\n\nThe exit report's line, now."},
    {"_after_fork_in_child", py_after_fork_in_child, METH_NOARGS,
     "_after_fork_in_child($module, /)\n--\n\nInternal: the fork hook of the package."},
    {"_report_at_finalize", py_report_at_finalize, METH_NOARGS,
     "_report_at_finalize($module, /)\n--\n\n"
     "Internal (the atexit hook): this exit skips the C exit handlers (an unhandled KeyboardInterrupt\n"
     "makes CPython end by SIGINT after finalizing), so write the exit report when finalization ends."},
    {"_releasing_on_this_thread", py_releasing_on_this_thread, METH_NOARGS,
     "_releasing_on_this_thread($module, /)\n--\n\n"
     "Internal (the package): True inside a finalizer or call that a drain on this thread runs."},
    {"_set_announce_hook", py_set_announce_hook, METH_O,
     "_set_announce_hook($module, hook, /)\n--\n\n"
     "Internal (the package, at import): what to call when a C API user announces itself."},
    {nullptr, nullptr, 0, nullptr},
};

// --- settings (CUDA_RECLAIM_*) ------------------------------------------------------------------------

// A setting whose value is not understood: its variable, its value (the environment's) and what it accepts.
struct BadSetting {
  const char* variable;
  const char* value;
  const char* accepted;
};

// Whether the interpreter is locating the module of `python -m cuda_reclaim` (or of
// `-m cuda_reclaim.__main__`), the one import that goes on past a bad setting so that the command can
// report it: sys.argv[0] is "-m" while the interpreter locates the module of -m, and the token of
// sys.orig_argv that names it ("cuda_reclaim", or "-mcuda_reclaim" and the like) comes right before the
// module's own arguments. Module init only (GIL); never fails (false when in doubt).
bool locating_python_m_of_this_package() {
  PyObject* argv = PySys_GetObject("argv");  // borrowed; both lists belong to sys
  PyObject* orig_argv = PySys_GetObject("orig_argv");
  if (argv == nullptr || orig_argv == nullptr || !PyList_Check(argv) || !PyList_Check(orig_argv)) return false;
  const Py_ssize_t index = PyList_GET_SIZE(orig_argv) - PyList_GET_SIZE(argv);
  if (PyList_GET_SIZE(argv) < 1 || index < 1) return false;
  PyObject* first = PyList_GET_ITEM(argv, 0);
  PyObject* token = PyList_GET_ITEM(orig_argv, index);
  const bool locating = PyUnicode_Check(first) && PyUnicode_CompareWithASCIIString(first, "-m") == 0;
  const char* text = locating && PyUnicode_Check(token) ? PyUnicode_AsUTF8(token) : nullptr;
  if (text == nullptr) {
    PyErr_Clear();  // a token that cannot be encoded names no module of this package
    return false;
  }
  const std::size_t length = std::strlen(text);
  for (const char* name : {"cuda_reclaim", "cuda_reclaim.__main__"}) {
    // The token alone, or short options run together with -m's argument: "-mcuda_reclaim", "-Imcuda_reclaim".
    const std::size_t size = std::strlen(name), start = length - size;  // start: read only when length > size
    const bool joined = text[0] == '-' && text[1] != '-' && length > size + 1 && text[start - 1] == 'm';
    if (std::strcmp(text, name) == 0 || (joined && std::strcmp(text + start, name) == 0)) return true;
  }
  return false;
}

// Fills `bad` with the settings read at import whose values are not understood; returns how many.
// Any thread; never touches Python; never blocks or allocates.
int find_bad_settings(BadSetting (&bad)[2]) noexcept {
  static_assert(reclaim::kMaxReservedCapacity == 16777216, "the accepted range in words below");
  int count = 0;
  const reclaim::ReservedCapacitySetting capacity = reclaim::reserved_capacity_from_environment();
  if (capacity.invalid_text != nullptr) {
    bad[count++] = {reclaim::kReservedCapacityVariable, capacity.invalid_text,
                    "an integer from 1 to 16777216 (pointers reserved up front)"};
  }
  if (const char* report = reclaim::bindings::exit_report_setting_not_understood()) {
    bad[count++] = {"CUDA_RECLAIM_REPORT", report, reclaim::bindings::kExitReportAccepted};
  }
  return count;
}

// A bad setting stops the import, before anything is created, with an ImportError that names each one
// (variable, value, what is accepted); except while `python -m cuda_reclaim` locates its module: the
// defaults then stand in for them and the module's _bad_settings lists them as (variable, value, accepted)
// tuples for the command's report (empty when every setting is understood). Returns 0, or -1 with an
// exception set. Module init only (GIL); never blocks.
int refuse_or_record_bad_settings(PyObject* module) {
  BadSetting bad[2];
  const int count = find_bad_settings(bad);
  if (count > 0 && !locating_python_m_of_this_package()) {
    const bool two = count > 1;
    PyErr_Format(PyExc_ImportError,
                 "cuda_reclaim: %s=%.40s is not understood: expected %s%s%s%s%.40s%s (python -m cuda_reclaim "
                 "info reports the settings)",
                 bad[0].variable, bad[0].value, bad[0].accepted, two ? "; " : "", two ? bad[1].variable : "",
                 two ? "=" : "", two ? bad[1].value : "", two ? " is not understood either" : "");
    return -1;
  }
  PyObject* settings = PyTuple_New(count);
  if (settings == nullptr) return -1;
  for (int i = 0; i < count; ++i) {
    PyObject* value = PyUnicode_DecodeFSDefault(bad[i].value);
    // "N" steals `value`, also when building the tuple fails.
    PyObject* entry = value == nullptr ? nullptr : Py_BuildValue("(sNs)", bad[i].variable, value, bad[i].accepted);
    if (entry == nullptr) {
      Py_DECREF(settings);
      return -1;
    }
    PyTuple_SET_ITEM(settings, i, entry);
  }
  const int added = PyModule_AddObjectRef(module, "_bad_settings", settings);
  Py_DECREF(settings);
  return added;
}

// --- module init ------------------------------------------------------------------------------------

int module_exec(PyObject* module) {
  if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
    PyErr_SetString(PyExc_ImportError,
                    "cuda_reclaim._reclaim can only be imported in the main interpreter: its queue is "
                    "process-wide and a reference must be released by the interpreter that owns it");
    return -1;
  }
  if (refuse_or_record_bad_settings(module) < 0) return -1;
  reclaim::bindings::configure_exit_report();
  // Creates the process-wide queue now, never on a producer thread, and makes this module its owner.
  if (reclaim_own_process_queue(&kOwner) < 0 || !reclaim::bindings::bind_queue()) {
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
  if (reclaim::bindings::add_stats(module) < 0) return -1;
  if (reclaim::bindings::add_argument_functions(module) < 0) return -1;
  if (reclaim::bindings::add_drain_worker_types(module) < 0) return -1;
  if (reclaim::bindings::add_driver_functions(module) < 0) return -1;
  if (reclaim::bindings::add_host_call_functions(module) < 0) return -1;
  if (reclaim::bindings::add_attachment_functions(module) < 0) return -1;
  return reclaim::bindings::add_graph_functions(module);
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
  Py_VISIT(reclaim::bindings::module_state(module)->driver_error);
  return 0;
}

int module_clear(PyObject* module) {
  Py_CLEAR(reclaim::bindings::module_state(module)->driver_error);
  return 0;
}

void module_free(void* module) { module_clear(static_cast<PyObject*>(module)); }

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "cuda_reclaim._reclaim",
    "Process-wide reclaim queue: native threads hand over references, Python releases them safely.",
    sizeof(reclaim::bindings::ModuleState),
    kMethods,
    kSlots,
    module_traverse,
    module_clear,
    module_free,
};

}  // namespace

PyMODINIT_FUNC PyInit__reclaim(void) { return PyModuleDef_Init(&kModule); }
