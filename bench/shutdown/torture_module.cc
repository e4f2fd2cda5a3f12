// bench/shutdown/torture_module.cc — the extension `_torture` of the shutdown comparison: the Python face
// of strategies.h, native_threads.h and shared_record.h, and `Token`, an object whose deallocation is
// counted in the shared record. torture_child.py drives it in each child; torture.py reads the record back.
// Every function here requires the GIL.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "bench/shutdown/native_threads.h"
#include "bench/shutdown/shared_record.h"
#include "bench/shutdown/strategies.h"
#include "bench/take_references.h"

namespace {

using reclaim_shutdown::SharedRecord;

SharedRecord* g_record = nullptr;  // this child's record, once setup() ran
bool g_burst_armed = false;

void token_dealloc(PyObject* self) {
  if (g_record != nullptr) g_record->released.fetch_add(1, std::memory_order_relaxed);
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject kTokenType = {PyVarObject_HEAD_INIT(nullptr, 0)};

SharedRecord* map_or_raise(const char* path) {
  SharedRecord* record = reclaim_shutdown::map_shared_record(path);
  if (record == nullptr) PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
  return record;
}

bool require_setup() {
  if (g_record != nullptr) return true;
  PyErr_SetString(PyExc_RuntimeError, "call setup() first");
  return false;
}

// New references to the items of `sequence`, wrapped as the strategy expects. False with an exception set.
bool take_references(PyObject* sequence, std::vector<void*>* out) {
  return reclaim_bench::take_references(sequence, out, reclaim_shutdown::wrap_for_strategy);
}

// setup(strategy, shared_path): once per child, before anything else.
PyObject* setup(PyObject*, PyObject* args) {
  const char* name;
  const char* path;
  if (!PyArg_ParseTuple(args, "ss", &name, &path)) return nullptr;
  if (g_record != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "setup() was already called");
    return nullptr;
  }
  SharedRecord* record = map_or_raise(path);
  if (record == nullptr || !reclaim_shutdown::select_strategy(name, record)) return nullptr;
  if (!reclaim_shutdown::install_exit_checks(record)) {
    PyErr_SetFromErrno(PyExc_OSError);
    return nullptr;
  }
  g_record = record;
  Py_RETURN_NONE;
}

// start(objs, threads, delay_us): detached native threads hand the objects over, one call each, with a
// jittered pause of about delay_us before each call.
PyObject* start(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads, delay_us;
  if (!PyArg_ParseTuple(args, "Oii", &sequence, &threads, &delay_us)) return nullptr;
  if (!require_setup()) return nullptr;
  if (threads < 1 || threads > 16 || delay_us < 0) {
    PyErr_SetString(PyExc_ValueError, "threads must be in 1..16 and delay_us >= 0");
    return nullptr;
  }
  std::vector<void*> items;
  if (!take_references(sequence, &items)) return nullptr;
  g_record->given.fetch_add(items.size(), std::memory_order_relaxed);
  reclaim_shutdown::start_native_threads(std::move(items), threads, delay_us);
  Py_RETURN_NONE;
}

// arm_exit_burst(objs, threads): at exit(), after Py_Finalize, `threads` native threads hand the objects
// over as fast as they can and exit() waits for them.
PyObject* arm_exit_burst(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads;
  if (!PyArg_ParseTuple(args, "Oi", &sequence, &threads)) return nullptr;
  if (!require_setup()) return nullptr;
  if (g_burst_armed || threads < 1 || threads > 16) {
    PyErr_SetString(PyExc_ValueError, "arm once, with threads in 1..16");
    return nullptr;
  }
  std::vector<void*> items;
  if (!take_references(sequence, &items)) return nullptr;
  g_record->burst_given.fetch_add(items.size(), std::memory_order_relaxed);
  reclaim_shutdown::arm_exit_burst(std::move(items), threads);
  g_burst_armed = true;
  Py_RETURN_NONE;
}

// drain() -> int: the strategy's own drain on this thread (D: the stack; R: the capsule's; A-C: none).
PyObject* drain(PyObject*, PyObject*) {
  if (!require_setup()) return nullptr;
  const Py_ssize_t count = reclaim_shutdown::drain_strategy();
  return count < 0 ? nullptr : PyLong_FromSsize_t(count);
}

// note_fork_child(status): the fork scenario's parent records the child's waitpid status.
PyObject* note_fork_child(PyObject*, PyObject* args) {
  int status;
  if (!PyArg_ParseTuple(args, "i", &status)) return nullptr;
  if (!require_setup()) return nullptr;
  g_record->fork_child_status.store(static_cast<std::int64_t>(status) + 1);
  Py_RETURN_NONE;
}

// Sets result[key] = value, stealing `value`; false (exception set) if value is nullptr or the set fails.
bool put(PyObject* result, const char* key, PyObject* value) {
  const bool ok = value != nullptr && PyDict_SetItemString(result, key, value) == 0;
  Py_XDECREF(value);
  return ok;
}

PyObject* finalized_stats(const SharedRecord& record) {
  if (record.finalized_stats_valid.load() == 0) Py_RETURN_NONE;
  PyObject* stats = PyDict_New();
  for (int i = 0; i < reclaim_shutdown::kFinalizedStats && stats != nullptr; ++i) {
    if (!put(stats, reclaim_shutdown::kFinalizedStatsKeys[i],
             PyLong_FromUnsignedLongLong(record.finalized_stats[i].load()))) {
      Py_CLEAR(stats);
    }
  }
  return stats;
}

bool fill_record_dict(PyObject* result, const SharedRecord& record) {
#define RECLAIM_SHUTDOWN_PUT(name) \
  if (!put(result, #name, PyLong_FromUnsignedLongLong(record.name.load()))) return false;
  RECLAIM_SHUTDOWN_COUNTERS(RECLAIM_SHUTDOWN_PUT)
#undef RECLAIM_SHUTDOWN_PUT
  std::uint64_t entered = 0, returned = 0, finished = 0;
  const std::uint32_t used = reclaim_shutdown::slots_used(record);
  for (std::uint32_t i = 0; i < used; ++i) {
    entered += record.slots[i].entered.load();
    returned += record.slots[i].returned.load();
    finished += record.slots[i].finished.load();
  }
  const std::int64_t fork_status = record.fork_child_status.load();
  return put(result, "threads", PyLong_FromUnsignedLong(used)) &&
         put(result, "threads_finished", PyLong_FromUnsignedLongLong(finished)) &&
         put(result, "entered", PyLong_FromUnsignedLongLong(entered)) &&
         put(result, "returned", PyLong_FromUnsignedLongLong(returned)) &&
         put(result, "fork_child_status",
             fork_status == 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(fork_status - 1)) &&
         put(result, "finalized_stats", finalized_stats(record));
}

// read_shared(path) -> dict: the record a finished child left (harness side; no setup needed).
PyObject* read_shared(PyObject*, PyObject* args) {
  const char* path;
  if (!PyArg_ParseTuple(args, "s", &path)) return nullptr;
  SharedRecord* record = map_or_raise(path);
  if (record == nullptr) return nullptr;
  PyObject* result = PyDict_New();
  if (result != nullptr && !fill_record_dict(result, *record)) Py_CLEAR(result);
  reclaim_shutdown::unmap_shared_record(record);
  return result;
}

PyMethodDef kMethods[] = {
    {"setup", setup, METH_VARARGS, "setup(strategy, shared_path)"},
    {"start", start, METH_VARARGS, "start(objs, threads, delay_us)"},
    {"arm_exit_burst", arm_exit_burst, METH_VARARGS, "arm_exit_burst(objs, threads)"},
    {"drain", drain, METH_NOARGS, "drain() -> int"},
    {"note_fork_child", note_fork_child, METH_VARARGS, "note_fork_child(waitpid_status)"},
    {"read_shared", read_shared, METH_VARARGS, "read_shared(path) -> dict"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_torture", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__torture(void) {
  kTokenType.tp_name = "_torture.Token";
  kTokenType.tp_basicsize = sizeof(PyObject);
  kTokenType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  kTokenType.tp_dealloc = token_dealloc;
  kTokenType.tp_new = PyType_GenericNew;
  kTokenType.tp_doc = "An object whose deallocation is counted in the shared record.";
  if (PyType_Ready(&kTokenType) < 0) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  if (PyModule_AddType(module, &kTokenType) < 0 ||
      PyModule_AddIntConstant(module, "SHARED_SIZE", sizeof(SharedRecord)) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
