// tests/consumers/bazel_consumer.cc — consumer (c): an extension built with Bazel that links its own
// static copy of //abi and pushes with its C entry points (abi/reclaim.h), as a project
// that builds cuda-reclaim from source would. At init, cuda_reclaim_import_shared_queue()
// (//bindings:shared_queue) makes that copy adopt the loaded cuda_reclaim module's queue, so every push
// below lands in the same queue and counters as the wheel's; nothing here drains or closes.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <thread>
#include <vector>

#include "bindings/shared_queue.h"
#include "abi/reclaim.h"

namespace {

// hand_over(objs, threads) -> how many pushes were queued (RECLAIM_QUEUED) by native threads.
PyObject* hand_over(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads;
  if (!PyArg_ParseTuple(args, "Oi", &sequence, &threads)) return nullptr;
  if (threads < 1) return PyErr_Format(PyExc_ValueError, "threads must be >= 1, not %d", threads);
  PyObject* tuple = PySequence_Tuple(sequence);
  if (tuple == nullptr) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  for (Py_ssize_t i = 0; i < n; ++i) Py_INCREF(PyTuple_GET_ITEM(tuple, i));  // stolen by the pushes
  std::vector<int> queued(static_cast<std::size_t>(threads), 0);
  Py_BEGIN_ALLOW_THREADS
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([tuple, n, threads, t, &queued] {
      for (Py_ssize_t i = t; i < n; i += threads) {
        queued[t] += reclaim_push(PyTuple_GET_ITEM(tuple, i)) == RECLAIM_QUEUED;  // no Python call
      }
    });
  }
  for (auto& worker : workers) worker.join();
  Py_END_ALLOW_THREADS
  Py_DECREF(tuple);
  long total = 0;
  for (int count : queued) total += count;
  return PyLong_FromLong(total);
}

// stats() -> the counters as this copy of cleanup/ reports them (reclaim_get_stats).
PyObject* stats(PyObject*, PyObject*) {
  reclaim_stats s;
  if (reclaim_get_stats(&s) < 0) return PyErr_Format(PyExc_RuntimeError, "reclaim_get_stats failed");
  return Py_BuildValue("{sKsKsKsK}", "handed_over", static_cast<unsigned long long>(s.handed_over), "released",
                       static_cast<unsigned long long>(s.released), "pending",
                       static_cast<unsigned long long>(s.pending), "leaked_after_close",
                       static_cast<unsigned long long>(s.leaked_after_close));
}

// wakeup_fd() -> this copy's wake-up eventfd (the owner's, once adopted).
PyObject* wakeup_fd(PyObject*, PyObject*) { return PyLong_FromLong(reclaim_wakeup_fd()); }

PyMethodDef methods[] = {
    {"hand_over", hand_over, METH_VARARGS, "hand_over(objs, threads) -> int"},
    {"stats", stats, METH_NOARGS, "stats() -> dict"},
    {"wakeup_fd", wakeup_fd, METH_NOARGS, "wakeup_fd() -> int"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bazel_consumer", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__bazel_consumer(void) {
  const cuda_reclaim_c_api* api;
  if (cuda_reclaim_import_shared_queue(&api) < 0) return nullptr;
  return PyModule_Create(&module);
}
