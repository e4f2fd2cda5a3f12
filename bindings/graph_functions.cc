// bindings/graph_functions.cc — Python entry points for graph/: attach a payload (one object, or a tuple
// of them) to a CUDA graph or stream, and read the per-source counters.
//
// The caller's reference is handed to graph/ and comes back only when graph/ says so (Handover::kReturned):
// then it is given back here, at once, with the GIL. Driver calls run with the GIL released: they may
// block (a full stream queue), and other libraries' host callbacks on CUDA's thread may need the GIL.
// Handles are plain ints here; bindings/cuda_reclaim/_graph.py turns cuda.core / cuda.bindings objects
// into them and checks them.

#define PY_SSIZE_T_CLEAN
#include "bindings/graph_functions.h"

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "bindings/call_items.h"
#include "bindings/drain.h"
#include "bindings/module_state.h"
#include "graph/counters.h"
#include "graph/driver.h"
#include "graph/keep_alive.h"

namespace {

namespace graph = reclaim::graph;

// Parses (handle: int, payload: object). Returns false with an exception set.
bool parse_handle_and_payload(const char* name, PyObject* const* args, Py_ssize_t nargs, void** handle,
                              PyObject** payload) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "%s() takes exactly 2 arguments (%zd given)", name, nargs);
    return false;
  }
  if (!PyLong_Check(args[0])) {
    PyErr_Format(PyExc_TypeError, "%s(): the handle must be an int, not %.100s", name,
                 Py_TYPE(args[0])->tp_name);
    return false;
  }
  const unsigned long long value = PyLong_AsUnsignedLongLong(args[0]);
  if (value == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Format(PyExc_ValueError, "%s(): the handle must be an int in [0, 2**64)", name);
    return false;
  }
  *handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(value));
  *payload = args[1];
  return true;
}

enum class Target { kGraph, kCapture, kStream };

// Hands a new reference to `payload` to graph/ for `target`. Returns None, or null with DriverError set;
// on every failure the reference is given back here or, if CUDA still holds it, left to CUDA's push.
PyObject* attach(PyObject* module, Target target, const char* name, PyObject* const* args, Py_ssize_t nargs) {
  void* handle;
  PyObject* payload;
  if (!parse_handle_and_payload(name, args, nargs, &handle, &payload)) return nullptr;
  const graph::Driver* driver = usable_driver(module);
  if (driver == nullptr) return nullptr;

  Py_INCREF(payload);  // the reference CUDA will own
  graph::AttachResult result;
  Py_BEGIN_ALLOW_THREADS
  switch (target) {
    case Target::kGraph:
      result = graph::retain_on_graph(driver->api, static_cast<CUgraph>(handle), payload);
      break;
    case Target::kCapture:
      result = graph::retain_on_capture(driver->api, static_cast<CUstream>(handle), payload);
      break;
    case Target::kStream:
      result = graph::retain_until_stream(driver->api, static_cast<CUstream>(handle), payload);
      break;
  }
  Py_END_ALLOW_THREADS

  switch (result.handover) {
    case graph::Handover::kAttached:
      Py_RETURN_NONE;
    case graph::Handover::kReturned:
      Py_DECREF(payload);  // given back at once: the objects are not kept alive by CUDA
      PyErr_Format(driver_error(module), "%s failed with %s; nothing was attached", result.call,
                   graph::error_name(*driver, result.error));
      return nullptr;
    case graph::Handover::kInFlight:
      // CUDA still owns the reference and will hand it to the queue; touching it here would release it
      // twice.
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

// Sets dict[name] = value; false with an exception set.
bool set_counter(PyObject* dict, const char* name, unsigned long long value) {
  PyObject* number = PyLong_FromUnsignedLongLong(value);
  const bool ok = number != nullptr && PyDict_SetItemString(dict, name, number) == 0;
  Py_XDECREF(number);
  return ok;
}

PyObject* py_source_stats(PyObject*, PyObject*) {
  // The table of graph/counters.h first: a trampoline counts a payload as handed back after its push, so
  // read before the pushes by source, no snapshot shows more handed back than pushed.
  const graph::GraphCounters held = graph::graph_counters();
  const graph::SourceCounters counters = graph::source_counters();
  // Thread ids as threading.get_ident() gives them (pthread_self on POSIX).
  PyObject* dict = Py_BuildValue(
      "{s:K,s:K,s:K,s:K,s:K}", "graph_user_objects", static_cast<unsigned long long>(counters.graph_user_objects),
      "stream_host_functions", static_cast<unsigned long long>(counters.stream_host_functions), "withdrawn",
      static_cast<unsigned long long>(counters.withdrawn), "last_destructor_thread",
      static_cast<unsigned long long>(counters.last_destructor_thread), "last_host_function_thread",
      static_cast<unsigned long long>(counters.last_host_function_thread));
  if (dict == nullptr) return nullptr;
#define RECLAIM_GRAPH_COUNTER_ITEM(name, in_report, meaning) \
  if (!set_counter(dict, #name, held.name)) {                \
    Py_DECREF(dict);                                         \
    return nullptr;                                          \
  }
  RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_COUNTER_ITEM)
#undef RECLAIM_GRAPH_COUNTER_ITEM
  return dict;
}

// The highest direct_pushes reported so far: each read reports at least this, so the counter never goes
// down (see py_all_stats).
std::atomic<std::uint64_t> g_direct_pushes_reported{0};

// Every counter of cuda_reclaim.stats(), in one read: the queue's (STATS_KEYS), pushes by source, what CUDA
// holds, and the calls. direct_pushes is handed_over minus the pushes by source; a trampoline counts its
// source just after its push, so a read that catches one in between would count its push as direct. The
// read is therefore bracketed by the trampolines' in-flight counts (left first, entered last) and repeated
// (bounded) until no trampoline push was in flight: then it is exact. Otherwise it reports a lower bound
// (every push that might have been half-counted is taken as not direct), and never less than an earlier
// read: every counter but the gauges only grows. Requires the GIL (the call counters).
PyObject* py_all_stats(PyObject*, PyObject*) {
  constexpr int kAttempts = 64;
  reclaim::CounterSnapshot queue_counters;
  graph::GraphCounters held;
  graph::SourceCounters sources;
  std::uint64_t in_flight = 0;
  Py_BEGIN_ALLOW_THREADS
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt >= 8) sched_yield();
    const std::uint64_t left = graph::trampolines_left();
    held = graph::graph_counters();
    sources = graph::source_counters();
    queue_counters = reclaim_bindings::queue().snapshot();
    in_flight = graph::trampolines_entered() - left;
    if (in_flight == 0) break;
  }
  Py_END_ALLOW_THREADS
  const std::uint64_t by_source =
      sources.graph_user_objects + sources.stream_host_functions + held.host_calls + held.host_node_calls;
  const std::uint64_t lower =
      queue_counters.handed_over > by_source + in_flight ? queue_counters.handed_over - by_source - in_flight : 0;
  std::uint64_t direct = g_direct_pushes_reported.load(std::memory_order_relaxed);
  while (lower > direct &&
         !g_direct_pushes_reported.compare_exchange_weak(direct, lower, std::memory_order_relaxed)) {
  }
  if (lower > direct) direct = lower;

  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  bool ok = true;
#define RECLAIM_ALL_STATS_QUEUE_ITEM_(name, description) ok = ok && set_counter(dict, #name, queue_counters.name);
  RECLAIM_COUNTERS(RECLAIM_ALL_STATS_QUEUE_ITEM_)
#undef RECLAIM_ALL_STATS_QUEUE_ITEM_
  ok = ok && set_counter(dict, "graph_user_objects", sources.graph_user_objects) &&
       set_counter(dict, "stream_host_functions", sources.stream_host_functions) &&
       set_counter(dict, "host_calls", held.host_calls) && set_counter(dict, "host_node_calls", held.host_node_calls) &&
       set_counter(dict, "direct_pushes", direct) && set_counter(dict, "attached_to_cuda", held.attached_to_cuda) &&
       set_counter(dict, "handed_back_by_cuda", held.handed_back_by_cuda) &&
       set_counter(dict, "held_by_cuda", held.held_by_cuda) && set_counter(dict, "calls_run", reclaim_bindings::g_call_counters.run) &&
       set_counter(dict, "calls_cancelled", reclaim_bindings::g_call_counters.cancelled) &&
       set_counter(dict, "calls_outstanding", reclaim_bindings::g_call_counters.outstanding);
  if (!ok) {
    Py_DECREF(dict);
    return nullptr;
  }
  return dict;
}

PyObject* py_driver_info(PyObject*, PyObject*) {
  const graph::Driver* driver;
  Py_BEGIN_ALLOW_THREADS
  driver = &graph::driver();
  Py_END_ALLOW_THREADS
  static const char* const kStatus[] = {"ok", "library_missing", "driver_too_old", "init_failed"};
  return Py_BuildValue("{s:s,s:i,s:s}", "status", kStatus[static_cast<int>(driver->status)], "version",
                       driver->version, "message", driver->message);
}

PyMethodDef kGraphMethods[] = {
    {"_keep_alive_graph", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_keep_alive_graph)),
     METH_FASTCALL,
     "_keep_alive_graph(cugraph: int, payload)\n\nRetain payload on the CUgraph as a user object; it is "
     "handed to the queue when CUDA destroys the user object."},
    {"_keep_alive_capture",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_keep_alive_capture)), METH_FASTCALL,
     "_keep_alive_capture(custream: int, payload)\n\nAs _keep_alive_graph, on the graph the stream is "
     "capturing."},
    {"_keep_alive_stream", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_keep_alive_stream)),
     METH_FASTCALL,
     "_keep_alive_stream(custream: int, payload)\n\nHand payload to the queue when the stream reaches "
     "this point (a host function)."},
    {"_all_stats", py_all_stats, METH_NOARGS,
     "_all_stats() -> dict\n\nEvery counter of cuda_reclaim.stats(), read together (see stats())."},
    {"_source_stats", py_source_stats, METH_NOARGS,
     "_source_stats() -> dict\n\nPushes made by graph user-object destructors and stream host functions, "
     "destructors whose payload was withdrawn after a failed attach, the threads (as "
     "threading.get_ident()) that last ran each trampoline, and graph/counters.h's table: pushes by host "
     "calls and host nodes, attached_to_cuda, handed_back_by_cuda, held_by_cuda."},
    {"_driver_info", py_driver_info, METH_NOARGS,
     "_driver_info() -> dict\n\nLoads the CUDA driver if needed; its status, version and message."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

// Loaded with the GIL released: dlopen and cuInit can be slow.
const graph::Driver* usable_driver(PyObject* module) {
  const graph::Driver* driver;
  Py_BEGIN_ALLOW_THREADS
  driver = &graph::driver();
  Py_END_ALLOW_THREADS
  if (driver->status != graph::DriverStatus::kOk) {
    PyErr_SetString(driver_error(module), driver->message);
    return nullptr;
  }
  return driver;
}

PyObject* driver_error(PyObject* module) { return reclaim_bindings::module_state(module)->driver_error; }

int add_graph_functions(PyObject* module) {
  PyObject* error = PyErr_NewExceptionWithDoc(
      "cuda_reclaim._reclaim.DriverError",
      "The CUDA driver is missing or too old for graph/stream keep-alive, or a driver call failed.",
      PyExc_RuntimeError, nullptr);
  if (error == nullptr) return -1;
  reclaim_bindings::module_state(module)->driver_error = error;  // the state's reference
  if (PyModule_AddObjectRef(module, "DriverError", error) < 0) return -1;
  return PyModule_AddFunctions(module, kGraphMethods);
}
