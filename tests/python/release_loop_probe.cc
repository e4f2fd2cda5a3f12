// tests/python/release_loop_probe.cc — test-only extension `_release_loop_probe`: runs bindings' release
// loop (bindings/release_loop.h) over a batch of objects whose releases the test scripts, so that the
// loop's contract can be checked item by item: the order of releases, where `next` stands when a release
// unwinds, and when an exception a deallocator left behind is reported. A queue never hands this loop an
// unwinding release on purpose; CPython's forced unwind of a thread that re-takes the GIL during
// finalization (pthread_exit) is what this stands in for, with a C++ exception thrown from a deallocator
// or a call. The objects lie in one block of the probe's own memory, next to each other in the order the
// test asks for (ascending addresses, as objects allocated one after another; or descending), so that
// either of the loop's ways (the CPU's prefetcher following the releases, or the loop fetching ahead) is
// the one a test runs.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "bindings/release_loop.h"

namespace {

// What a scripted object does when it is released.
enum Mode : int {
  kPlain = 0,       // deallocates
  kThrows = 1,      // deallocates, then throws (a call: runs, releases itself, then throws)
  kLeavesError = 2  // deallocates and leaves RuntimeError set
};

struct Scripted {
  PyObject_HEAD
  long id;
  int mode;
};

// The events of one release(): +id when a scripted object is deallocated, 1000 + id when a call starts
// (and, for a call, whether the error indicator was clean then: 2000 + id when it was not).
std::vector<long> g_events;

// The objects' memory belongs to release()'s block: deallocating one only notes it and lets its type go.
void scripted_dealloc(PyObject* self) {
  auto* scripted = reinterpret_cast<Scripted*>(self);
  const long id = scripted->id;
  const int mode = scripted->mode;
  g_events.push_back(id);
  PyTypeObject* type = Py_TYPE(self);
  Py_DECREF(type);  // PyObject_Init took a reference to the heap type
  if (mode == kLeavesError) PyErr_SetString(PyExc_RuntimeError, "left by a deallocator");
  if (mode == kThrows) throw std::runtime_error("a release unwinds");
}

PyType_Slot kSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(scripted_dealloc)}, {0, nullptr}};
PyType_Spec kPlainSpec = {"_release_loop_probe.Plain", sizeof(Scripted), 0, Py_TPFLAGS_DEFAULT, kSlots};
PyType_Spec kCallSpec = {"_release_loop_probe.Call", sizeof(Scripted), 0, Py_TPFLAGS_DEFAULT, kSlots};
PyTypeObject* g_plain_type = nullptr;
PyTypeObject* g_call_type = nullptr;

// A call: starts (noting whether the indicator is clean), then releases the item it was handed.
void run_call(PyObject* item) {
  const long id = reinterpret_cast<Scripted*>(item)->id;
  g_events.push_back((PyErr_Occurred() == nullptr ? 1000 : 2000) + id);
  Py_DECREF(item);
}

// Releases, plainly, every object of `items` (ids 1, 2, ... in order) that the events do not show
// deallocated, by the events rather than by `next` (which is what the tests check); then forgets the events.
void release_what_is_left(const std::vector<void*>& items) {
  const std::vector<long> released = g_events;  // the releases below add events of their own
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (std::find(released.begin(), released.end(), static_cast<long>(i + 1)) != released.end()) continue;
    reinterpret_cast<Scripted*>(items[i])->mode = kPlain;
    Py_DECREF(static_cast<PyObject*>(items[i]));
  }
  g_events.clear();
}

// Places a scripted object in `memory` (uninitialised, owned by the caller); it is alive until released.
PyObject* place(Scripted* memory, const char* kind, long id, int mode) {
  PyTypeObject* type = kind[0] == 'c' ? g_call_type : g_plain_type;
  PyObject* object = PyObject_Init(reinterpret_cast<PyObject*>(memory), type);
  memory->id = id;
  memory->mode = mode;
  return object;
}

// Whether release() lays the objects out at descending addresses ("descending") rather than ascending
// ones ("ascending"). Returns 1 or 0, or -1 with ValueError set.
int descending_layout(const char* layout) {
  if (std::strcmp(layout, "ascending") == 0) return 0;
  if (std::strcmp(layout, "descending") == 0) return 1;
  PyErr_Format(PyExc_ValueError, "layout must be 'ascending' or 'descending', not '%s'", layout);
  return -1;
}

// release(script, chunks=None, layout="ascending") -> (next, unwound, events, fetched_ahead): places one
// object per (kind, mode) of `script` ("plain" or "call"; ids 1, 2, ... in order), each held only by the
// batch, next to each other at ascending or descending addresses (`layout`), and runs the release loop
// over them, in calls of the sizes `chunks` gives (the queue hands a dequeue over in chunks: each call's
// count is larger, `available` is the whole batch). A C++ exception out of the loop is caught here
// (unwound=True), and `next` is where it left the batch. What the loop did not deallocate is released here
// afterwards (plainly, after the events are taken). `fetched_ahead`: whether the loop's own test of the
// whole batch's layout chose to fetch ahead.
PyObject* release(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"script", "chunks", "layout", nullptr};
  PyObject* script;
  PyObject* chunks = Py_None;
  const char* layout = "ascending";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|Os", const_cast<char**>(keywords), &PyList_Type, &script,
                                   &chunks, &layout)) {
    return nullptr;
  }
  const int descending = descending_layout(layout);
  if (descending < 0) return nullptr;
  g_events.clear();
  const Py_ssize_t n = PyList_GET_SIZE(script);
  std::vector<Scripted> memory(static_cast<std::size_t>(n));
  std::vector<void*> items;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const char* kind;
    int mode;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(script, i), "si", &kind, &mode)) break;
    Scripted* slot = &memory[static_cast<std::size_t>(descending ? n - 1 - i : i)];
    items.push_back(place(slot, kind, static_cast<long>(i + 1), mode));
  }
  std::vector<std::size_t> sizes;
  if (!PyErr_Occurred() && chunks != Py_None) {
    PyObject* sequence = PySequence_Fast(chunks, "chunks must be a sequence of sizes");
    if (sequence != nullptr) {
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sequence); ++i) {
        const Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sequence, i));
        if (size < 0) {
          if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "chunk sizes must be 0 or more, not %zd", size);
          break;
        }
        sizes.push_back(static_cast<std::size_t>(size));
      }
      Py_DECREF(sequence);
    }
  }
  if (PyErr_Occurred()) {
    release_what_is_left(items);  // no events: all of them
    return nullptr;
  }
  if (sizes.empty()) sizes.push_back(items.size());
  const bool fetched_ahead = !reclaim::bindings::objects_follow_in_address_order(items.data(), 0, items.size());
  reclaim::ReleaseBatch batch{items.data(), 0, 0, items.size()};
  bool unwound = false;
  try {
    for (std::size_t size : sizes) {
      batch.count = std::min(items.size(), batch.count + size);
      reclaim::bindings::release_batch(&batch, reclaim::bindings::HostItemType{g_call_type}, run_call);
    }
  } catch (const std::runtime_error&) {
    unwound = true;
  }
  PyObject* events = PyList_New(0);
  for (long event : g_events) {
    PyObject* value = PyLong_FromLong(event);
    if (events != nullptr && value != nullptr) PyList_Append(events, value);
    Py_XDECREF(value);
  }
  release_what_is_left(items);
  if (events == nullptr) return nullptr;
  return Py_BuildValue("nONO", static_cast<Py_ssize_t>(batch.next), unwound ? Py_True : Py_False, events,
                       fetched_ahead ? Py_True : Py_False);
}

// follow_in_address_order(addresses) -> bool: the release loop's test of a batch's layout
// (objects_follow_in_address_order), over made-up addresses (never dereferenced).
PyObject* follow_in_address_order(PyObject*, PyObject* addresses) {
  PyObject* sequence = PySequence_Fast(addresses, "addresses must be a sequence of integers");
  if (sequence == nullptr) return nullptr;
  std::vector<void*> items;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sequence); ++i) {
    const std::size_t address = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(sequence, i));
    if (address == static_cast<std::size_t>(-1) && PyErr_Occurred()) break;
    items.push_back(reinterpret_cast<void*>(address));
  }
  Py_DECREF(sequence);
  if (PyErr_Occurred()) return nullptr;
  return PyBool_FromLong(reclaim::bindings::objects_follow_in_address_order(items.data(), 0, items.size()));
}

// throwing_hook(unraisable): a sys.unraisablehook that unwinds (a C++ exception), as a thread ended in the
// middle of the report would. What CPython had allocated for the call leaks; the test accepts that.
PyObject* throwing_hook(PyObject*, PyObject*) { throw std::runtime_error("the report unwinds"); }

PyMethodDef kMethods[] = {
    {"release", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(release)), METH_VARARGS | METH_KEYWORDS,
     "release(script, chunks=None, layout='ascending') -> (next, unwound, events, fetched_ahead)"},
    {"follow_in_address_order", follow_in_address_order, METH_O,
     "follow_in_address_order(addresses) -> bool: the release loop's test of a batch's layout"},
    {"throwing_hook", throwing_hook, METH_O, "throwing_hook(unraisable): throws a C++ exception"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_release_loop_probe", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__release_loop_probe(void) {
  g_plain_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kPlainSpec));
  g_call_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kCallSpec));
  if (g_plain_type == nullptr || g_call_type == nullptr) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  // How far apart the loop's test of a layout looks (tests build their layouts from it).
  if (module != nullptr &&
      PyModule_AddIntConstant(module, "ORDER_SAMPLE_STEP",
                              static_cast<long>(reclaim::bindings::kOrderSampleStep)) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
