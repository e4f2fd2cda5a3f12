// bindings/host_call_functions.cc — the _HostItem type (of host calls and host nodes), and the module
// functions behind launch_host_func, launch_host_func_ordered and add_host_node (bindings/cuda_reclaim/_graph.py,
// _ordered_calls.py): they check their arguments, make the call item (call_items.h) and hand it to CUDA
// through graph/ with the GIL released, or hand an integration the pair that does (_prepare_host_call).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "bindings/arguments.h"
#include "bindings/attachments.h"
#include "bindings/call_items.h"
#include "bindings/drain.h"
#include "bindings/driver_functions.h"
#include "bindings/host_calls.h"

namespace reclaim::bindings {

// --- the _HostItem type, of host calls and host nodes (call_items.h) ---------------------------------------

namespace {

// Created once per process and never released (a process global, not module state): the release action
// compares item types against it, and items may outlive any one module object (a re-import makes a new
// module with the same type).
PyTypeObject* g_host_item_type = nullptr;

// Both layouts keep `kind` at the same place, right after the object header.
static_assert(offsetof(HostCall, kind) == offsetof(HostNode, kind), "kind must be where both layouts have it");
static_assert(offsetof(HostCall, kind) == sizeof(PyObject), "kind must follow the object header");

HostItemKind kind_of(PyObject* item) { return reinterpret_cast<HostCall*>(item)->kind; }

// Whether `item` is a _HostItem of `kind` (false before the type exists).
bool is_host_item_of(PyObject* item, HostItemKind kind) {
  return g_host_item_type != nullptr && Py_TYPE(item) == g_host_item_type && kind_of(item) == kind;
}

void host_item_dealloc(PyObject* object) {
  PyTypeObject* type = Py_TYPE(object);
  if (kind_of(object) == HostItemKind::kCall) {
    clear_host_call(reinterpret_cast<HostCall*>(object));
  } else {
    clear_host_node(reinterpret_cast<HostNode*>(object));
  }
  type->tp_free(object);
  Py_DECREF(type);
}

PyType_Slot kHostItemSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(host_item_dealloc)},
    {Py_tp_doc, const_cast<char*>("A launch_host_func call or an add_host_node function on its way through CUDA "
                                  "and the queue (private).")},
    {0, nullptr},
};

PyType_Spec kHostItemSpec = {
    "cuda_reclaim._reclaim._HostItem", static_cast<int>(std::max(sizeof(HostCall), sizeof(HostNode))), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE, kHostItemSlots,
};

}  // namespace

bool ready_host_item_type() {
  if (g_host_item_type == nullptr) {
    g_host_item_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHostItemSpec));
  }
  return g_host_item_type != nullptr;
}

PyObject* new_host_item(HostItemKind kind) {
  auto* item = PyObject_New(HostCall, g_host_item_type);
  if (item != nullptr) item->kind = kind;
  return reinterpret_cast<PyObject*>(item);
}

bool is_host_call(PyObject* item) { return is_host_item_of(item, HostItemKind::kCall); }

bool is_host_node(PyObject* item) { return is_host_item_of(item, HostItemKind::kNode); }

HostItemType host_item_type() noexcept { return HostItemType{g_host_item_type}; }

// --- the module functions ---------------------------------------------------------------------------------

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

// _launch_host_func(custream: int, future, fn, args: tuple, kwargs: dict | None, ordered: bool = False)
// -> bool
PyObject* py_launch_host_func(PyObject* module, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 5 && nargs != 6) {
    PyErr_Format(PyExc_TypeError, "_launch_host_func() takes 5 or 6 arguments (%zd given)", nargs);
    return nullptr;
  }
  std::uintptr_t stream;
  if (!parse_handle("_launch_host_func", "custream", argv[0], &stream)) return nullptr;
  PyObject* future = argv[1];
  PyObject *fn, *args, *kwargs;
  if (!parse_call("_launch_host_func", argv + 2, &fn, &args, &kwargs)) return nullptr;
  const int ordered = nargs == 6 ? PyObject_IsTrue(argv[5]) : 0;
  if (ordered < 0) return nullptr;
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
  result = graph::launch_host_func(driver->api, reinterpret_cast<CUstream>(stream), &call->record, ordered != 0);
  Py_END_ALLOW_THREADS
  if (result.outcome == graph::AttachOutcome::kAttached) {
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

// _prepare_host_call(custream: int, fn, args: tuple, kwargs: dict | None, ordered: bool)
// -> (host function address, user data, future); see the method's docstring for the contract.
PyObject* py_prepare_host_call(PyObject*, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError, "_prepare_host_call() takes exactly 5 arguments (%zd given)", nargs);
    return nullptr;
  }
  std::uintptr_t stream;
  if (!parse_handle("_prepare_host_call", "custream", argv[0], &stream)) return nullptr;
  PyObject *fn, *args, *kwargs;
  if (!parse_call("_prepare_host_call", argv + 1, &fn, &args, &kwargs)) return nullptr;
  const int ordered = PyObject_IsTrue(argv[4]);
  if (ordered < 0) return nullptr;
  PyObject* futures = PyImport_ImportModule("concurrent.futures");
  PyObject* future = futures != nullptr ? PyObject_CallMethod(futures, "Future", nullptr) : nullptr;
  Py_XDECREF(futures);
  if (future == nullptr) return nullptr;
  if (queue().is_closed() || interpreter_finalizing()) {
    cancel_future(future);  // after close nothing runs: the pair is (0, 0) and the future is cancelled
    return Py_BuildValue("(iiN)", 0, 0, future);
  }
  StreamOrder* order = acquire_stream_order(stream);
  HostCall* call = order != nullptr ? new_host_call(order, fn, args, kwargs, future) : nullptr;
  if (call == nullptr) {
    Py_DECREF(future);
    return nullptr;
  }
  // The call's own reference becomes the pair's, then CUDA's: the host function's push hands it to the queue.
  const graph::PreparedPair pair = graph::prepare_host_call(&call->record, ordered != 0);
  if (pair.host_fn == nullptr) {
    withdraw_host_call(call);
    Py_DECREF(call);
    Py_DECREF(future);
    PyErr_SetString(PyExc_RuntimeError,
                    "_prepare_host_call(): the call's address has its top 16 bits set; nothing was prepared");
    return nullptr;
  }
  link_prepared(call);
  PyObject* result = Py_BuildValue(
      "(KKN)", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(pair.host_fn)),
      static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(pair.user_data)), future);
  if (result == nullptr) {
    unlink_prepared(call);
    (void)graph::withdraw_prepared_host_call(&call->record);  // nobody has the pair: this takes it
    withdraw_host_call(call);
    Py_DECREF(call);
  }
  return result;
}

// _withdraw_host_call(user_data: int) -> None: a prepared call whose pair CUDA never got.
PyObject* py_withdraw_host_call(PyObject*, PyObject* argument) {
  std::uintptr_t data;
  if (!parse_handle("_withdraw_host_call", "user_data", argument, &data)) return nullptr;
  if (data == 0) Py_RETURN_NONE;  // the pair of a preparation after close: nothing was made
  // Only a pair on the list of live ones is touched: nothing here reads memory that user_data names.
  HostCall* call = find_prepared(data);
  if (call == nullptr) {
    PyErr_SetString(PyExc_ValueError,
                    "_withdraw_host_call(): user_data is not a live prepared pair's (never prepared, withdrawn "
                    "already, or its call was run or cancelled by a drain after CUDA ran its host function)");
    return nullptr;
  }
  if (!graph::withdraw_prepared_host_call(&call->record)) {
    PyErr_SetString(PyExc_ValueError,
                    "_withdraw_host_call(): CUDA ran the pair's host function already: the call is the queue's "
                    "and a drain runs it");
    return nullptr;
  }
  unlink_prepared(call);
  PyObject* future = call->future;  // null once a close (or a fork child) cancelled the call
  Py_XINCREF(future);
  withdraw_host_call(call);
  cancel_future(future);
  Py_XDECREF(future);
  Py_DECREF(call);  // the pair's reference, which CUDA would have handed to the queue
  Py_RETURN_NONE;
}

// _add_host_node(cugraph: int, dependencies: tuple[int, ...], fn, args: tuple, kwargs: dict | None)
// -> (the CUgraphNode as an int, the node's Attachment)
PyObject* py_add_host_node(PyObject* module, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 5 && nargs != 6) {
    PyErr_Format(PyExc_TypeError, "_add_host_node() takes 5 or 6 arguments (%zd given)", nargs);
    return nullptr;
  }
  const int ordered = nargs == 6 ? PyObject_IsTrue(argv[5]) : 0;
  if (ordered < 0) return nullptr;
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
  HostNode* node = driver != nullptr ? new_host_node(fn, args, kwargs, ordered != 0) : nullptr;
  if (node == nullptr) {
    PyMem_Free(nodes);
    return nullptr;
  }
  graph::HostNodeResult result;
  Py_BEGIN_ALLOW_THREADS
  result = graph::add_host_node(driver->api, reinterpret_cast<CUgraph>(graph_handle), nodes,
                                static_cast<std::size_t>(PyTuple_GET_SIZE(dependencies)), &node->record,
                                ordered != 0);
  Py_END_ALLOW_THREADS
  PyMem_Free(nodes);
  PyObject* handle = nullptr;
  switch (result.attach.outcome) {
    case graph::AttachOutcome::kAttached:
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
    case graph::AttachOutcome::kReturned:
      Py_DECREF(node);  // the native reference: never attached
      PyErr_Format(driver_error(module), "%s failed with %s; no node was added", result.attach.call,
                   graph::error_name(*driver, result.attach.error));
      break;
    case graph::AttachOutcome::kInFlight:
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
     "_launch_host_func($module, custream, future, fn, args, kwargs, ordered=False, /)\n--\n\n"
     "Launch a host function that hands a call of fn(*args, **kwargs) to the queue when the stream\n"
     "reaches it; a drain runs it into future. With ordered, the host function then waits until the call\n"
     "ran or was cancelled. False (and the future cancelled) if the queue is already closed."},
    {"_prepare_host_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_prepare_host_call)),
     METH_FASTCALL,
     "_prepare_host_call($module, custream, fn, args, kwargs, ordered, /)\n--\n\n"
     "Prepare one call of fn(*args, **kwargs) for an integration that hands CUDA a host function itself:\n"
     "returns (host_fn, user_data, future), two ints and a concurrent.futures.Future. Enqueue host_fn\n"
     "with user_data exactly once on the stream custream (cuLaunchHostFunc, or what wraps it); custream\n"
     "keys the stream order in which the drains run the stream's calls. host_fn is the trampoline of\n"
     "launch_host_func (ordered false) or of launch_host_func_ordered (ordered true: CUDA's thread then\n"
     "waits until a drain ran the call or it was cancelled, so the caller must make sure a drain runs,\n"
     "as launch_host_func_ordered checks).\n"
     "Ownership: from the return on, the call belongs to the pair, as a launched call belongs to CUDA:\n"
     "it is on the outstanding list (calls_outstanding) and holds fn, args, kwargs and the future. If\n"
     "the pair is not enqueued (the launch failed, or the caller changes its mind), hand it back with\n"
     "_withdraw_host_call(user_data): the future is cancelled, counted in calls_cancelled, and every\n"
     "reference released. If CUDA never runs an enqueued pair, close() (and the exit) cancels the call\n"
     "and counts it; the small call item stays allocated, as for any launch CUDA never ran. Cancelling\n"
     "the future before the call runs means fn never runs.\n"
     "Counting: the pair counts as attached to CUDA (attached_to_cuda, held_by_cuda) from the return on,\n"
     "with a hand-back ticket, as a launch does: its host function's push, or a withdrawal, hands it back,\n"
     "so wait_handed_back() covers it, and waits for a pair that is never enqueued nor withdrawn. A pair\n"
     "still unfired at close stays counted as held (a pair never enqueued cannot be told from one that\n"
     "CUDA has not reached): withdraw it to hand it back.\n"
     "Enqueuing the pair more than once, in a captured graph (which fires it at every launch), or after\n"
     "withdrawing it, is a user error: the host function reads the call's memory, which may be freed by\n"
     "then; while that memory is the pair's, a firing after the first or after a withdrawal does nothing.\n"
     "After close (or while the interpreter finalizes) nothing is prepared: (0, 0, a cancelled future)."},
    {"_withdraw_host_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_withdraw_host_call)),
     METH_O,
     "_withdraw_host_call($module, user_data, /)\n--\n\n"
     "Hand back a prepared call (_prepare_host_call) whose pair CUDA never got: its future is cancelled\n"
     "(counted in calls_cancelled, unless a close cancelled it already), its references released, and\n"
     "its attach counted as handed back. A user_data of 0 does nothing. ValueError for user data that is\n"
     "not a live pair's: never prepared, withdrawn already, a stale pair whose memory went to a new one,\n"
     "or a pair whose host function CUDA ran (its call is the queue's). Only for a pair CUDA never got:\n"
     "an enqueued pair whose host function has not run yet cannot be told from one never enqueued; its\n"
     "withdrawal frees the call, and CUDA's later firing reads freed memory (a user error)."},
    {"_add_host_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_add_host_node)),
     METH_FASTCALL,
     "_add_host_node($module, cugraph, dependencies, fn, args, kwargs, ordered=False, /)\n--\n\n"
     "Add a host node that hands one call of fn(*args, **kwargs) to the queue at each firing (with\n"
     "ordered, the firing then waits until a call of the node that began after it returned); returns\n"
     "(the CUgraphNode as an int, the node's Attachment)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int add_host_call_functions(PyObject* module) {
  if (!ready_host_item_type()) return -1;
  return PyModule_AddFunctions(module, kHostCallMethods);
}

}  // namespace reclaim::bindings
