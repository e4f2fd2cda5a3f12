// bindings/graph_functions.cc — Python entry points for graph/'s keep-alive: attach a payload (one
// object, or a tuple of them) to a CUDA graph or stream.
//
// The caller's reference goes to graph/ and comes back only when graph/ says so (AttachOutcome::kReturned):
// then it is released here, at once, with the GIL. Driver calls run with the GIL released: they may
// block (a full stream queue), and other libraries' host callbacks on CUDA's thread may need the GIL.
// Handles are plain ints here; bindings/cuda_reclaim/_graph.py turns cuda.core / cuda.bindings objects
// into them and checks them.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/graph_functions.h"

#include <cstdint>

#include "bindings/arguments.h"
#include "bindings/attachments.h"
#include "bindings/driver_functions.h"
#include "graph/driver.h"
#include "graph/keep_alive.h"

namespace reclaim::bindings {
namespace {

enum class Target { kGraph, kCapture, kStream };

// Wraps `payload` in an Attachment and hands a reference to it to graph/ for `target`. Returns the
// Attachment, or null with DriverError set; on every failure the reference is released here or, if CUDA
// still holds it, left to CUDA's push.
PyObject* attach(PyObject* module, Target target, const char* name, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "%s() takes exactly 2 arguments (%zd given)", name, nargs);
    return nullptr;
  }
  std::uintptr_t value;
  if (!parse_handle(name, target == Target::kGraph ? "cugraph" : "custream", args[0], &value)) return nullptr;
  void* handle = reinterpret_cast<void*>(value);
  const graph::Driver* driver = usable_driver(module);
  if (driver == nullptr) return nullptr;
  Attachment* attachment =
      new_attachment(target == Target::kStream ? "keep_alive_until" : "keep_alive", args[1]);
  if (attachment == nullptr) return nullptr;

  Py_INCREF(attachment);  // the reference CUDA will own
  graph::AttachResult result;
  Py_BEGIN_ALLOW_THREADS
  switch (target) {
    case Target::kGraph:
      result = graph::retain_record_on_graph(driver->api, static_cast<CUgraph>(handle), &attachment->record);
      break;
    case Target::kCapture:
      result = graph::retain_record_on_capture(driver->api, static_cast<CUstream>(handle), &attachment->record);
      break;
    case Target::kStream:
      result = graph::retain_record_until_stream(driver->api, static_cast<CUstream>(handle), &attachment->record);
      break;
  }
  Py_END_ALLOW_THREADS

  switch (result.outcome) {
    case graph::AttachOutcome::kAttached:
      attachment->attached = true;
      return reinterpret_cast<PyObject*>(attachment);  // the caller's reference
    case graph::AttachOutcome::kReturned:
      Py_DECREF(attachment);  // released at once: the objects are not kept alive by CUDA
      Py_DECREF(attachment);
      PyErr_Format(driver_error(module), "%s failed with %s; nothing was attached", result.call,
                   graph::error_name(*driver, result.error));
      return nullptr;
    case graph::AttachOutcome::kInFlight:
      // CUDA still owns its reference and will hand it to the queue; only the caller's goes here.
      attachment->attached = true;
      Py_DECREF(attachment);
      PyErr_Format(driver_error(module),
                   "%s failed with %s; nothing was attached (CUDA releases the objects through the queue)",
                   result.call, graph::error_name(*driver, result.error));
      return nullptr;
  }
  PyErr_SetString(PyExc_SystemError, "cuda_reclaim: unknown hand-over result");
  return nullptr;
}

PyObject* py_keep_alive_graph(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  return attach(module, Target::kGraph, "_keep_alive_graph", args, nargs);
}

PyObject* py_keep_alive_capture(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  return attach(module, Target::kCapture, "_keep_alive_capture", args, nargs);
}

PyObject* py_keep_alive_stream(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  return attach(module, Target::kStream, "_keep_alive_stream", args, nargs);
}

PyMethodDef kGraphMethods[] = {
    {"_keep_alive_graph", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_keep_alive_graph)),
     METH_FASTCALL,
     "_keep_alive_graph($module, cugraph, payload, /)\n--\n\n"
     "Retain payload on the CUgraph as a user object, in an Attachment (returned) that is handed to the\n"
     "queue when CUDA destroys the user object."},
    {"_keep_alive_capture",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_keep_alive_capture)), METH_FASTCALL,
     "_keep_alive_capture($module, custream, payload, /)\n--\n\n"
     "As _keep_alive_graph, on the graph the stream is capturing."},
    {"_keep_alive_stream", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_keep_alive_stream)),
     METH_FASTCALL,
     "_keep_alive_stream($module, custream, payload, /)\n--\n\n"
     "Hand payload to the queue when the stream reaches this point (a host function)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int add_graph_functions(PyObject* module) { return PyModule_AddFunctions(module, kGraphMethods); }

}  // namespace reclaim::bindings
