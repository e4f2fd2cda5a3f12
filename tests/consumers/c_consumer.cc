// tests/consumers/c_consumer.cc — consumer (a): a C++ extension built the way a third-party project
// builds against the installed wheel: one g++ call with -I$(cuda_reclaim.get_include()) and the Python
// headers from sysconfig (consumers_test.sh), no Bazel, no cuda-reclaim sources. It hands references over
// from std::threads through the capsule's push (as CUDA's thread would through host_destructor).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cuda_reclaim/cuda_reclaim.h"

namespace {

const cuda_reclaim_c_api* api = nullptr;

// hand_over(objs, threads) -> number of references the queue accepted (RECLAIM_QUEUED).
PyObject* hand_over(PyObject*, PyObject* args) {
  PyObject* list;
  int threads;
  if (!PyArg_ParseTuple(args, "O!i", &PyList_Type, &list, &threads)) return nullptr;
  if (threads < 1) {
    PyErr_SetString(PyExc_ValueError, "threads must be >= 1");
    return nullptr;
  }
  std::vector<PyObject*> owned;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    Py_INCREF(item);  // this reference is what push() steals
    owned.push_back(item);
  }
  std::atomic<long> queued{0};
  Py_BEGIN_ALLOW_THREADS
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {  // no Python here: only the capsule's producer entry
      for (std::size_t i = t; i < owned.size(); i += threads) {
        if (api->push(owned[i]) == RECLAIM_QUEUED) queued.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(queued.load());
}

// stats() -> the counters as this extension sees them through the capsule.
PyObject* stats(PyObject*, PyObject*) {
  cuda_reclaim_stats s;
  if (api->get_stats(&s, sizeof s) < 0) return PyErr_Format(PyExc_RuntimeError, "get_stats failed");
  return Py_BuildValue("{sKsKsKsK}", "handed_over", (unsigned long long)s.handed_over, "released",
                       (unsigned long long)s.released, "pending", (unsigned long long)s.pending,
                       "leaked_after_close", (unsigned long long)s.leaked_after_close);
}

PyMethodDef methods[] = {
    {"hand_over", hand_over, METH_VARARGS, "hand_over(objs: list, threads: int) -> int"},
    {"stats", stats, METH_NOARGS, "stats() -> dict"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "c_consumer", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_c_consumer(void) {
  if (cuda_reclaim_import(&api) < 0) return nullptr;
  return PyModule_Create(&module);
}
