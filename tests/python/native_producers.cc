// tests/python/native_producers.cc — test-only extension `_native_producers`: std::threads that Python
// did not create hand references over through the public C API (the capsule's CUhostFn-compatible
// host_destructor), as CUDA's callback thread does. The thread bodies never touch Python. Also
// `LeavesAnException`, a type whose deallocator leaves an exception set, as a faulty C extension's may, and
// `release_gil_for_an_instant()`, a call that gives the GIL up and takes it straight back.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <chrono>
#include <thread>
#include <vector>

#include "cuda_reclaim/cuda_reclaim.h"
#include "bench/take_references.h"

namespace {

using reclaim_bench::take_references;

const cuda_reclaim_c_api* g_api = nullptr;

// The body of a producer thread: like a CUDA callback thread, it must never unwind into the caller.
void fire(const std::vector<void*>* items, std::size_t first, std::size_t step, int delay_us) noexcept {
  for (std::size_t i = first; i < items->size(); i += step) {
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    g_api->host_destructor((*items)[i]);
  }
}

bool parse(PyObject* args, PyObject** sequence, int* threads, int* delay_us) {
  *threads = 1;
  *delay_us = 0;
  if (!PyArg_ParseTuple(args, "O|ii", sequence, threads, delay_us)) return false;
  if (*threads < 1 || *delay_us < 0) {
    PyErr_SetString(PyExc_ValueError, "threads must be >= 1 and delay_us >= 0");
    return false;
  }
  return true;
}

// hand_over(objs, threads=1, delay_us=0): pushes every object from `threads` native threads and joins
// them (GIL released meanwhile). Returns the number of threads that ran.
PyObject* hand_over(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads, delay_us;
  if (!parse(args, &sequence, &threads, &delay_us)) return nullptr;
  std::vector<void*> items;
  if (!take_references(sequence, &items)) return nullptr;
  Py_BEGIN_ALLOW_THREADS
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(fire, &items, t, threads, delay_us);
  for (auto& worker : workers) worker.join();
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(threads);
}

// hand_over_detached(objs, threads=1, delay_us=0): like hand_over, but returns at once; the threads
// keep pushing on their own (through interpreter shutdown and exit(), if the process ends first).
PyObject* hand_over_detached(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads, delay_us;
  if (!parse(args, &sequence, &threads, &delay_us)) return nullptr;
  auto* items = new std::vector<void*>();  // owned by the detached threads; never freed (process end)
  if (!take_references(sequence, items)) {
    delete items;
    return nullptr;
  }
  for (int t = 0; t < threads; ++t) std::thread(fire, items, t, threads, delay_us).detach();
  return PyLong_FromLong(threads);
}

// LeavesAnException(): an object whose deallocator frees it and then leaves a RuntimeError set (a bug in
// a C extension, which a drain must report and survive). leaky_deallocated() counts the deallocations.
Py_ssize_t g_leaky_deallocated = 0;

void leaky_dealloc(PyObject* self) {
  PyTypeObject* const type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
  ++g_leaky_deallocated;
  PyErr_SetString(PyExc_RuntimeError, "left set by a deallocator");
}

PyType_Slot kLeakySlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(leaky_dealloc)},
    {Py_tp_doc, const_cast<char*>("An object whose deallocator leaves a RuntimeError set.")},
    {0, nullptr},
};
PyType_Spec kLeakySpec = {"_native_producers.LeavesAnException", sizeof(PyObject), 0, Py_TPFLAGS_DEFAULT,
                          kLeakySlots};

// leaky_deallocated() -> int: how many LeavesAnException objects were deallocated so far.
PyObject* leaky_deallocated(PyObject*, PyObject*) { return PyLong_FromSsize_t(g_leaky_deallocated); }

// release_gil_for_an_instant() -> None: gives the GIL up and takes it straight back, with nothing in
// between, as a C library call that releases the GIL around a few instructions does. A thread waiting for
// the GIL is woken but finds it taken again, and the re-take counts as a switch for its wait.
PyObject* release_gil_for_an_instant(PyObject*, PyObject*) {
  Py_BEGIN_ALLOW_THREADS
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"leaky_deallocated", leaky_deallocated, METH_NOARGS, "leaky_deallocated() -> int"},
    {"release_gil_for_an_instant", release_gil_for_an_instant, METH_NOARGS,
     "release_gil_for_an_instant() -> None"},
    {"hand_over", hand_over, METH_VARARGS, "hand_over(objs, threads=1, delay_us=0) -> int"},
    {"hand_over_detached", hand_over_detached, METH_VARARGS,
     "hand_over_detached(objs, threads=1, delay_us=0) -> int"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native_producers", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__native_producers(void) {
  if (cuda_reclaim_import(&g_api) < 0) return nullptr;
  PyObject* const module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  PyObject* const leaky = PyType_FromSpec(&kLeakySpec);
  if (leaky == nullptr || PyModule_AddObject(module, "LeavesAnException", leaky) < 0) {
    Py_XDECREF(leaky);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
