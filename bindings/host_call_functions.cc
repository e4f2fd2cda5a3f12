// bindings/host_call_functions.cc — the module functions behind launch_host_func and add_host_node
// (bindings/cuda_reclaim/_graph.py): they check their arguments, make the call item (call_items.h) and
// hand it to CUDA through graph/ with the GIL released.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>
#include <cstdint>

#include "bindings/arguments.h"
#include "bindings/attachments.h"
#include "bindings/call_items.h"
#include "bindings/drain.h"
#include "bindings/driver_functions.h"
#include "bindings/host_calls.h"

namespace reclaim::bindings {
namespace {

// The dependencies of a host node, as CUDA takes them: a PyMem array (free with PyMem_Free; not null even
// when empty), or null with an exception set.
CUgraphNode* parse_dependencies(PyObject* dependencies) {
  const Py_ssize_t count = PyTuple_GET_SIZE(dependencies);
  CUgraphNode* nodes = PyMem_New(CUgraphNode, count > 0 ? count : 1);
  if (nodes == nullptr) {
    PyErr_NoMemory();
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    std::uintptr_t node;
    if (!parse_handle("_add_host_node", "dependency", PyTuple_GET_ITEM(dependencies, i), &node)) {
      PyMem_Free(nodes);
      return nullptr;
    }
    nodes[i] = reinterpret_cast<CUgraphNode>(node);
  }
  return nodes;
}

// Checks the (fn, args: tuple, kwargs: dict | None) of a call; kwargs None becomes null.
bool parse_call(const char* function, PyObject* const* argv, PyObject** fn, PyObject** args, PyObject** kwargs) {
  if (!check_callable(function, "fn", argv[0])) return false;
  *fn = argv[0];
  *args = argv[1];
  *kwargs = argv[2] == Py_None ? nullptr : argv[2];
  if (!PyTuple_Check(*args) || (*kwargs != nullptr && !PyDict_Check(*kwargs))) {
    PyErr_Format(PyExc_TypeError, "%s(): args must be a tuple and kwargs a dict or None", function);
    return false;
  }
  return true;
}

// _launch_host_func(custream: int, future, fn, args: tuple, kwargs: dict | None) -> bool
PyObject* py_launch_host_func(PyObject* module, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError, "_launch_host_func() takes exactly 5 arguments (%zd given)", nargs);
    return nullptr;
  }
  std::uintptr_t stream;
  if (!parse_handle("_launch_host_func", "custream", argv[0], &stream)) return nullptr;
  PyObject* future = argv[1];
  PyObject *fn, *args, *kwargs;
  if (!parse_call("_launch_host_func", argv + 2, &fn, &args, &kwargs)) return nullptr;
  if (queue().is_closed() || interpreter_finalizing()) {
    // After close nothing runs: the future says so at once, and nothing is handed to CUDA.
    cancel_future(future);
    Py_RETURN_FALSE;
  }
  const graph::Driver* driver = usable_driver(module);
  if (driver == nullptr) return nullptr;

  StreamOrder* order = acquire_stream_order(stream);
  if (order == nullptr) return nullptr;
  // On the outstanding list before the launch: the host function may run, and a drain on another thread
  // run the call, before the driver call returns here.
  HostCall* call = new_host_call(order, fn, args, kwargs, future);
  if (call == nullptr) return nullptr;
  if (queue().is_closed() || interpreter_finalizing()) {
    // Closed since the check above: loading the driver gave the GIL up, and making the call may have run a
    // finalizer; that close() cancelled what was outstanding then, and this call was not on the list yet.
    withdraw_host_call(call);
    cancel_future(future);
    Py_DECREF(call);
    Py_RETURN_FALSE;
  }
  Py_INCREF(call);  // the reference CUDA holds until the host function pushes it
  graph::AttachResult result;
  Py_BEGIN_ALLOW_THREADS
  result = graph::launch_host_func(driver->api, reinterpret_cast<CUstream>(stream), &call->slot);
  Py_END_ALLOW_THREADS
  if (result.handover == graph::Handover::kAttached) {
    Py_DECREF(call);
    Py_RETURN_TRUE;
  }
  // Never launched: nothing will run it (a close() meanwhile may already have cancelled its future).
  withdraw_host_call(call);
  Py_DECREF(call);  // CUDA's
  Py_DECREF(call);  // ours
  PyErr_Format(driver_error(module), "%s failed with %s; nothing was launched", result.call,
               graph::error_name(*driver, result.error));
  return nullptr;
}

// _add_host_node(cugraph: int, dependencies: tuple[int, ...], fn, args: tuple, kwargs: dict | None)
// -> (the CUgraphNode as an int, the node's Attachment)
PyObject* py_add_host_node(PyObject* module, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError, "_add_host_node() takes exactly 5 arguments (%zd given)", nargs);
    return nullptr;
  }
  std::uintptr_t graph_handle;
  if (!parse_handle("_add_host_node", "cugraph", argv[0], &graph_handle)) return nullptr;
  PyObject* dependencies = argv[1];
  if (!PyTuple_Check(dependencies)) {
    PyErr_SetString(PyExc_TypeError, "_add_host_node(): dependencies must be a tuple of node handles");
    return nullptr;
  }
  PyObject *fn, *args, *kwargs;
  if (!parse_call("_add_host_node", argv + 2, &fn, &args, &kwargs)) return nullptr;
  CUgraphNode* nodes = parse_dependencies(dependencies);
  if (nodes == nullptr) return nullptr;
  const graph::Driver* driver = usable_driver(module);
  HostNode* node = driver != nullptr ? new_host_node(fn, args, kwargs) : nullptr;
  if (node == nullptr) {
    PyMem_Free(nodes);
    return nullptr;
  }
  graph::HostNodeResult result;
  Py_BEGIN_ALLOW_THREADS
  result = graph::add_host_node(driver->api, reinterpret_cast<CUgraph>(graph_handle), nodes,
                                static_cast<std::size_t>(PyTuple_GET_SIZE(dependencies)), &node->slot);
  Py_END_ALLOW_THREADS
  PyMem_Free(nodes);
  PyObject* handle = nullptr;
  switch (result.attach.handover) {
    case graph::Handover::kAttached:
      // The destructor will set the node's done cell: its Attachment waits for that before it goes.
      reinterpret_cast<Attachment*>(node->attachment)->attached = true;
      if (result.node != nullptr) {
        handle = Py_BuildValue("(KO)", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(result.node)),
                               node->attachment);
      } else {
        PyErr_Format(driver_error(module),
                     "cuGraphAddHostNode failed with %s; no node was added (the function stays attached to "
                     "the graph and is released when CUDA destroys it)",
                     graph::error_name(*driver, result.node_error));
      }
      break;
    case graph::Handover::kReturned:
      Py_DECREF(node);  // the native reference: never handed over
      PyErr_Format(driver_error(module), "%s failed with %s; no node was added", result.attach.call,
                   graph::error_name(*driver, result.attach.error));
      break;
    case graph::Handover::kInFlight:
      // CUDA will still run the destructor, which sets the done cell: the Attachment must wait for it.
      reinterpret_cast<Attachment*>(node->attachment)->attached = true;
      PyErr_Format(driver_error(module),
                   "%s failed with %s; no node was added (CUDA releases the function through the queue)",
                   result.attach.call, graph::error_name(*driver, result.attach.error));
      break;
  }
  Py_DECREF(node);
  return handle;
}

PyMethodDef kHostCallMethods[] = {
    {"_launch_host_func", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_launch_host_func)),
     METH_FASTCALL,
     "_launch_host_func($module, custream, future, fn, args, kwargs, /)\n--\n\n"
     "Launch a host function that hands a call of fn(*args, **kwargs) to the queue when the stream\n"
     "reaches it; a drain runs it into future. False (and the future cancelled) if the queue is already\n"
     "closed."},
    {"_add_host_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_add_host_node)),
     METH_FASTCALL,
     "_add_host_node($module, cugraph, dependencies, fn, args, kwargs, /)\n--\n\n"
     "Add a host node that hands one call of fn(*args, **kwargs) to the queue at each firing; returns\n"
     "(the CUgraphNode as an int, the node's Attachment)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int add_host_call_functions(PyObject* module) {
  if (!ready_host_item_type()) return -1;
  return PyModule_AddFunctions(module, kHostCallMethods);
}

}  // namespace reclaim::bindings
