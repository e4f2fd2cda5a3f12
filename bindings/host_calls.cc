// bindings/host_calls.cc — see host_calls.h.
//
// State, all of it guarded by the GIL (the module declares Py_MOD_GIL_USED and is main-interpreter only):
// the streams' orders (a map from stream handle to Order), the list of host calls not yet run or
// cancelled, and the call counters. Nothing here runs on CUDA's threads: those only run graph/'s
// trampolines, which write the slots embedded in the objects below and push.

#define PY_SSIZE_T_CLEAN
#include "bindings/host_calls.h"

#include <cstdint>
#include <map>
#include <new>
#include <unordered_map>
#include <vector>

#include "bindings/drain.h"
#include "bindings/graph_functions.h"
#include "graph/host_calls.h"

namespace reclaim_bindings {
namespace {

namespace graph = reclaim::graph;

struct HostCall;

// The host calls of one stream handle, in the order CUDA ran them. Created by the first launch on the
// handle; deleted when no host call refers to it any more (the trampolines of the calls that refer to it
// read `counters`, so it lives at least until each of them was dequeued).
struct Order {
  graph::CallOrder counters;             // written by the trampolines (atomics)
  std::uintptr_t stream = 0;             // the key in g_orders
  std::uint64_t next = 0;                // the place of the call to run next
  bool busy = false;                     // a call of this stream is running (possibly re-entered)
  std::map<std::uint64_t, HostCall*> parked;  // arrived early: each holds the queue's reference
  Py_ssize_t references = 0;             // host calls pointing here, plus running loops
};

enum class CallState : int {
  kWaiting = 0,  // launched: CUDA holds it, or the queue does
  kParked = 1,   // dequeued before a call of its stream that comes first: held by its order's parked set
  kDone = 2,     // ran, or was cancelled; fields cleared
};

// cuda_reclaim._reclaim._HostCall: one launch_host_func call. The slot is graph/'s part (the trampoline
// writes its place); everything else is touched with the GIL only.
struct HostCall {
  PyObject_HEAD
  graph::HostCallSlot slot;
  Order* order;
  CallState state;
  PyObject* fn;
  PyObject* args;    // tuple
  PyObject* kwargs;  // dict or null
  PyObject* future;  // concurrent.futures.Future
  HostCall* previous;  // the outstanding list: every call not yet kDone
  HostCall* next;
};

// cuda_reclaim._reclaim._HostNode: one add_host_node node. One Python reference stands for every native
// one (graph/host_calls.h's HostNodeSlot::native_refs) and is dropped by whoever takes that count to zero.
struct HostNode {
  PyObject_HEAD
  graph::HostNodeSlot slot;
  PyObject* fn;
  PyObject* args;  // tuple
};

// Created once per process and never released: the release action compares item types against them, and
// items may outlive any one module object (a re-import makes a new module with the same types).
PyTypeObject* g_host_call_type = nullptr;
PyTypeObject* g_host_node_type = nullptr;

std::unordered_map<std::uintptr_t, Order*>* g_orders = nullptr;  // never destroyed (static init order)
HostCall* g_outstanding = nullptr;                                // head of the outstanding list

// Calls that ran (host calls and host-node firings; an exception counts: the call ran), and host calls
// that never will (cancelled through their future before they ran, at close, in a fork child, or refused
// because the queue was already closed).
std::uint64_t g_calls_run = 0;
std::uint64_t g_calls_cancelled = 0;
std::uint64_t g_calls_outstanding = 0;  // length of the outstanding list
std::uint64_t g_calls_parked = 0;       // host calls that arrived before their turn (diagnostics, tests)

std::unordered_map<std::uintptr_t, Order*>& orders() {
  if (g_orders == nullptr) g_orders = new std::unordered_map<std::uintptr_t, Order*>();
  return *g_orders;
}

Order* order_for(std::uintptr_t stream) {
  Order*& order = orders()[stream];
  if (order == nullptr) {
    order = new Order();
    order->stream = stream;
  }
  ++order->references;
  return order;
}

void release_order(Order* order) {
  if (--order->references != 0) return;
  auto found = orders().find(order->stream);
  if (found != orders().end() && found->second == order) orders().erase(found);
  delete order;
}

void link(HostCall* call) {
  call->previous = nullptr;
  call->next = g_outstanding;
  if (g_outstanding != nullptr) g_outstanding->previous = call;
  g_outstanding = call;
  ++g_calls_outstanding;
}

void unlink(HostCall* call) {
  if (call->previous == nullptr && g_outstanding != call) return;  // not linked
  if (call->previous != nullptr) call->previous->next = call->next;
  if (call->next != nullptr) call->next->previous = call->previous;
  if (g_outstanding == call) g_outstanding = call->next;
  call->previous = call->next = nullptr;
  --g_calls_outstanding;
}

// The references a call still holds, taken out of it so that a re-entrant pass never sees them twice.
// Released explicitly (release_parts), not by a destructor: CPython may end a thread that runs a call with
// a forced unwind (pthread_exit, a daemon thread taking the GIL during finalization), and nothing on that
// way out may touch Python.
struct CallParts {
  PyObject* fn = nullptr;
  PyObject* args = nullptr;
  PyObject* kwargs = nullptr;
  PyObject* future = nullptr;
};

void release_parts(const CallParts& parts) {
  Py_XDECREF(parts.fn);
  Py_XDECREF(parts.args);
  Py_XDECREF(parts.kwargs);
  Py_XDECREF(parts.future);
}

// Marks `call` done and moves its references into `parts`.
void finish(HostCall* call, CallParts* parts) {
  unlink(call);
  call->state = CallState::kDone;
  parts->fn = call->fn;
  parts->args = call->args;
  parts->kwargs = call->kwargs;
  parts->future = call->future;
  call->fn = call->args = call->kwargs = call->future = nullptr;
}

// future.<method>() or future.<method>(argument); a failure goes to sys.unraisablehook. Returns the
// result (new) or null.
PyObject* call_future(PyObject* future, const char* method, PyObject* argument = nullptr) {
  PyObject* name = PyUnicode_InternFromString(method);
  PyObject* result = nullptr;
  if (name != nullptr) {
    result = PyObject_CallMethodObjArgs(future, name, argument, nullptr);  // argument null: no arguments
    Py_DECREF(name);
  }
  if (result == nullptr) PyErr_WriteUnraisable(future);
  return result;
}

void cancel_future(PyObject* future) {
  if (future == nullptr) return;
  PyObject* result = call_future(future, "cancel");
  Py_XDECREF(result);
  ++g_calls_cancelled;
}

// fn(*args, **kwargs) into `future`.
void call_into_future(const CallParts& parts) {
  PyObject* result = PyObject_Call(parts.fn, parts.args, parts.kwargs);
  if (result != nullptr) {
    Py_XDECREF(call_future(parts.future, "set_result", result));
    Py_DECREF(result);
    return;
  }
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value != nullptr && traceback != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(call_future(parts.future, "set_exception", value != nullptr ? value : Py_None));
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
}

// Runs one host call whose turn it is: fn(*args, **kwargs) into its future. The caller holds a reference.
void run_call(HostCall* call) {
  CallParts parts;
  finish(call, &parts);
  PyObject* running = call_future(parts.future, "set_running_or_notify_cancel");
  const bool run = running == Py_True;
  Py_XDECREF(running);
  if (run) {
    ++g_calls_run;
    call_into_future(parts);
  } else {
    ++g_calls_cancelled;  // cancelled through its future before its turn
  }
  release_parts(parts);
}

// Runs `call` (its turn has come; the caller passes the queue's reference) and then every parked call of
// its stream whose turn follows. Once a push of the stream was rejected, a missing place may never arrive:
// parked calls then run in place order without waiting for the gaps.
void run_in_order(Order* order, HostCall* call) {
  ++order->references;  // the calls released below may be the last ones pointing here
  order->busy = true;
  while (call != nullptr) {
    if (call->slot.place >= order->next) order->next = call->slot.place + 1;
    run_call(call);
    Py_DECREF(call);
    call = nullptr;
    auto found = order->parked.find(order->next);
    if (found == order->parked.end() && !order->parked.empty() &&
        order->counters.rejected.load(std::memory_order_relaxed) != 0) {
      found = order->parked.begin();
    }
    if (found != order->parked.end()) {
      call = found->second;
      order->parked.erase(found);
    }
  }
  order->busy = false;
  release_order(order);
}

void host_call_arrived(HostCall* call) {
  if (call->state == CallState::kDone) {  // cancelled by a close() that ran while its batch was dequeued
    Py_DECREF(call);
    return;
  }
  Order* order = call->order;
  const bool gap = call->slot.place > order->next && order->counters.rejected.load(std::memory_order_relaxed) == 0;
  if (order->busy || gap) {
    // Its turn comes after a call that is running (this drain was re-entered, or another thread's drain
    // is running it) or that has not been dequeued yet: it runs right after that one.
    call->state = CallState::kParked;
    order->parked.emplace(call->slot.place, call);
    ++g_calls_parked;
    return;
  }
  run_in_order(order, call);
}

void host_node_arrived(HostNode* node) {
  if (graph::host_node_entry_is_final(&node->slot)) {
    Py_DECREF(node);  // the user object went last: the native count's Python reference
    return;
  }
  ++g_calls_run;
  PyObject* result = PyObject_Call(node->fn, node->args, nullptr);
  if (result == nullptr) {
    PyErr_WriteUnraisable(node->fn);  // no future to carry it: a host node's result is not kept
  } else {
    Py_DECREF(result);
  }
  if (graph::host_node_call_done(&node->slot)) Py_DECREF(node);
}

// Cancels every call still on the outstanding list (close, fork child).
void cancel_all() {
  while (HostCall* call = g_outstanding) {
    const bool parked = call->state == CallState::kParked;
    CallParts parts;
    finish(call, &parts);
    if (parked) {
      auto& parked_calls = call->order->parked;
      auto found = parked_calls.find(call->slot.place);
      if (found != parked_calls.end() && found->second == call) parked_calls.erase(found);
    }
    cancel_future(parts.future);  // may run done-callbacks, which may re-enter: the list is re-read
    release_parts(parts);
    // A parked call was the queue's reference, now ours; a waiting one stays CUDA's (or the queue's, when
    // a drain on another thread dequeued it and has yet to release it: host_call_arrived then drops it).
    if (parked) Py_DECREF(call);
  }
}

// --- types ------------------------------------------------------------------------------------------------

void host_call_dealloc(PyObject* object) {
  auto* call = reinterpret_cast<HostCall*>(object);
  PyTypeObject* type = Py_TYPE(object);
  if (call->state != CallState::kDone) {
    // Released by something other than this module's release action (a drain through another copy's
    // table with its own action): it never runs, so say so through its future.
    CallParts parts;
    finish(call, &parts);
    cancel_future(parts.future);
    release_parts(parts);
  }
  if (call->order != nullptr) release_order(call->order);
  type->tp_free(object);
  Py_DECREF(type);
}

void host_node_dealloc(PyObject* object) {
  auto* node = reinterpret_cast<HostNode*>(object);
  PyTypeObject* type = Py_TYPE(object);
  Py_XDECREF(node->fn);
  Py_XDECREF(node->args);
  node->slot.~HostNodeSlot();
  type->tp_free(object);
  Py_DECREF(type);
}

PyType_Slot kHostCallSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(host_call_dealloc)},
    {Py_tp_doc, const_cast<char*>("A launch_host_func call on its way through CUDA and the queue (private).")},
    {0, nullptr},
};

PyType_Spec kHostCallSpec = {
    "cuda_reclaim._reclaim._HostCall", sizeof(HostCall), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kHostCallSlots,
};

PyType_Slot kHostNodeSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(host_node_dealloc)},
    {Py_tp_doc, const_cast<char*>("An add_host_node function, called once per firing (private).")},
    {0, nullptr},
};

PyType_Spec kHostNodeSpec = {
    "cuda_reclaim._reclaim._HostNode", sizeof(HostNode), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kHostNodeSlots,
};

// --- module functions -----------------------------------------------------------------------------------

bool parse_handle(const char* name, PyObject* value, std::uintptr_t* handle) {
  if (!PyLong_Check(value)) {
    PyErr_Format(PyExc_TypeError, "%s(): the handle must be an int, not %.100s", name, Py_TYPE(value)->tp_name);
    return false;
  }
  const unsigned long long parsed = PyLong_AsUnsignedLongLong(value);
  if (parsed == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Format(PyExc_ValueError, "%s(): the handle must be an int in [0, 2**64)", name);
    return false;
  }
  *handle = static_cast<std::uintptr_t>(parsed);
  return true;
}

// _launch_host_call(stream: int, future, fn, args: tuple, kwargs: dict | None) -> bool
PyObject* py_launch_host_call(PyObject* module, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError, "_launch_host_call() takes exactly 5 arguments (%zd given)", nargs);
    return nullptr;
  }
  std::uintptr_t stream;
  if (!parse_handle("_launch_host_call", argv[0], &stream)) return nullptr;
  PyObject* future = argv[1];
  PyObject* fn = argv[2];
  PyObject* args = argv[3];
  PyObject* kwargs = argv[4] == Py_None ? nullptr : argv[4];
  if (!PyCallable_Check(fn) || !PyTuple_Check(args) || (kwargs != nullptr && !PyDict_Check(kwargs))) {
    PyErr_SetString(PyExc_TypeError, "_launch_host_call(): expected a callable, a tuple and a dict or None");
    return nullptr;
  }
  if (queue().is_closed() || interpreter_finalizing()) {
    // After close nothing runs: the future says so at once, and nothing is handed to CUDA.
    cancel_future(future);
    Py_RETURN_FALSE;
  }
  const reclaim::graph::Driver* driver = usable_driver(module);
  if (driver == nullptr) return nullptr;

  auto* call = PyObject_New(HostCall, g_host_call_type);
  if (call == nullptr) return nullptr;
  new (&call->slot) graph::HostCallSlot();
  Py_INCREF(fn);
  Py_INCREF(args);
  Py_XINCREF(kwargs);
  Py_INCREF(future);
  call->fn = fn;
  call->args = args;
  call->kwargs = kwargs;
  call->future = future;
  call->order = order_for(stream);
  call->slot.payload = call;
  call->slot.order = &call->order->counters;
  call->state = CallState::kWaiting;
  call->previous = call->next = nullptr;
  // Linked before the launch: the host function may run, and a drain on another thread run the call,
  // before the driver call returns here.
  link(call);
  Py_INCREF(call);  // the reference CUDA holds until the host function pushes it
  graph::AttachResult result;
  Py_BEGIN_ALLOW_THREADS
  result = graph::launch_host_call(driver->api, reinterpret_cast<CUstream>(stream), &call->slot);
  Py_END_ALLOW_THREADS
  if (result.handover == graph::Handover::kAttached) {
    Py_DECREF(call);
    Py_RETURN_TRUE;
  }
  // Never launched: nothing will run it (a close() meanwhile may already have cancelled its future).
  if (call->state != CallState::kDone) {
    CallParts parts;
    finish(call, &parts);
    release_parts(parts);
  }
  Py_DECREF(call);  // CUDA's
  Py_DECREF(call);  // ours
  PyErr_Format(driver_error(module), "%s failed with %s; nothing was launched", result.call,
               graph::error_name(*driver, result.error));
  return nullptr;
}

// _add_host_node(graph: int, dependencies: tuple[int, ...], fn, args: tuple) -> int (the CUgraphNode)
PyObject* py_add_host_node(PyObject* module, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_Format(PyExc_TypeError, "_add_host_node() takes exactly 4 arguments (%zd given)", nargs);
    return nullptr;
  }
  std::uintptr_t graph_handle;
  if (!parse_handle("_add_host_node", argv[0], &graph_handle)) return nullptr;
  PyObject* dependencies = argv[1];
  PyObject* fn = argv[2];
  PyObject* args = argv[3];
  if (!PyTuple_Check(dependencies) || !PyCallable_Check(fn) || !PyTuple_Check(args)) {
    PyErr_SetString(PyExc_TypeError, "_add_host_node(): expected a tuple of node handles, a callable and a tuple");
    return nullptr;
  }
  std::vector<CUgraphNode> nodes;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dependencies); ++i) {
    std::uintptr_t node;
    if (!parse_handle("_add_host_node", PyTuple_GET_ITEM(dependencies, i), &node)) return nullptr;
    nodes.push_back(reinterpret_cast<CUgraphNode>(node));
  }
  const reclaim::graph::Driver* driver = usable_driver(module);
  if (driver == nullptr) return nullptr;

  auto* node = PyObject_New(HostNode, g_host_node_type);
  if (node == nullptr) return nullptr;
  new (&node->slot) graph::HostNodeSlot();
  node->slot.payload = node;
  Py_INCREF(fn);
  Py_INCREF(args);
  node->fn = fn;
  node->args = args;
  Py_INCREF(node);  // the native count's reference
  graph::HostNodeResult result;
  Py_BEGIN_ALLOW_THREADS
  result = graph::add_host_node(driver->api, reinterpret_cast<CUgraph>(graph_handle), nodes.data(), nodes.size(),
                                &node->slot);
  Py_END_ALLOW_THREADS
  PyObject* handle = nullptr;
  switch (result.attach.handover) {
    case graph::Handover::kAttached:
      if (result.node != nullptr) {
        handle = PyLong_FromUnsignedLongLong(reinterpret_cast<std::uintptr_t>(result.node));
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
      PyErr_Format(driver_error(module),
                   "%s failed with %s; no node was added (CUDA releases the function through the queue)",
                   result.attach.call, graph::error_name(*driver, result.attach.error));
      break;
  }
  Py_DECREF(node);
  return handle;
}

PyObject* py_call_stats(PyObject*, PyObject*) {
  return Py_BuildValue("{s:K,s:K,s:K,s:K}", "calls_run", static_cast<unsigned long long>(g_calls_run),
                       "calls_cancelled", static_cast<unsigned long long>(g_calls_cancelled),
                       "calls_outstanding", static_cast<unsigned long long>(g_calls_outstanding),
                       "calls_parked", static_cast<unsigned long long>(g_calls_parked));
}

PyMethodDef kHostCallMethods[] = {
    {"_launch_host_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_launch_host_call)),
     METH_FASTCALL,
     "_launch_host_call(custream: int, future, fn, args: tuple, kwargs: dict | None) -> bool\n\n"
     "Launch a host function that hands a call of fn to the queue when the stream reaches it; a drain\n"
     "runs it into future. False (and the future cancelled) if the queue is already closed."},
    {"_add_host_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_add_host_node)),
     METH_FASTCALL,
     "_add_host_node(cugraph: int, dependencies: tuple, fn, args: tuple) -> int\n\n"
     "Add a host node that hands one call of fn(*args) to the queue at each firing; returns the\n"
     "CUgraphNode."},
    {"_call_stats", py_call_stats, METH_NOARGS,
     "_call_stats() -> dict\n\ncalls_run, calls_cancelled, calls_outstanding, and calls_parked (host calls\n"
     "that arrived before their turn on their stream and waited for it)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

void release_queued_item(PyObject* item) {
  PyTypeObject* type = Py_TYPE(item);
  if (type == g_host_call_type) {
    host_call_arrived(reinterpret_cast<HostCall*>(item));
  } else if (type == g_host_node_type) {
    host_node_arrived(reinterpret_cast<HostNode*>(item));
  } else {
    Py_DECREF(item);
  }
}

HostItemTypes host_item_types() noexcept { return HostItemTypes{g_host_call_type, g_host_node_type}; }

void cancel_outstanding_calls() { cancel_all(); }

void forget_calls_after_fork() {
  cancel_all();
  // Calls CUDA still holds point to their orders; those stay until they are gone, but new launches in
  // this process start with fresh ones.
  orders().clear();
}

int add_host_call_functions(PyObject* module) {
  if (g_host_call_type == nullptr) {
    g_host_call_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHostCallSpec));
    if (g_host_call_type == nullptr) return -1;
  }
  if (g_host_node_type == nullptr) {
    g_host_node_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHostNodeSpec));
    if (g_host_node_type == nullptr) return -1;
  }
  return PyModule_AddFunctions(module, kHostCallMethods);
}

}  // namespace reclaim_bindings
