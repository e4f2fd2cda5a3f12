// bench/reclaim_bench_ext.cc — bench-only extension `_reclaim_bench`: native producer threads (std::thread,
// never created by Python, like CUDA's callback thread) that hand references over by one of the strategies
// of bench/bench_strategies.h.
//
// Producer threads take a steady_clock timestamp around every hand-over and keep it; Python collects the
// samples after the run. Release latency uses `Probe` objects (bench/probe_type.h) whose tp_dealloc stamps
// the time of release. One run at a time; every function here requires the GIL (producer threads run
// without it).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "bench/bench_strategies.h"
#include "bench/probe_type.h"
#include "bench/release_like_bindings.h"
#include "bindings/python_compat.h"

namespace {

using reclaim_bench::drain_strategy;
using reclaim_bench::hand_over;
using reclaim_bench::new_probe;
using reclaim_bench::now_ns;
using reclaim_bench::parse_strategy;
using reclaim_bench::StackNode;
using reclaim_bench::Strategy;

// --- runs ---------------------------------------------------------------------------------------------

struct Run {
  Strategy strategy = Strategy::kNoop;
  int threads = 0;
  std::size_t per_thread = 0;
  int spacing_us = 0;
  std::int64_t deadline_ns = 0;
  std::vector<PyObject*> items;      // one new reference each; thread t owns [t*per_thread, (t+1)*per_thread)
  std::vector<StackNode> nodes;      // cas_pending_call's preallocated nodes, parallel to items
  std::vector<std::int64_t> cost_ns;  // per-call duration, parallel to items
  std::vector<std::int64_t> push_ns;  // time just before each hand-over, parallel to items
  // Hand-overs completed, per thread, each on its own cache line: a producer stores to it after every
  // hand-over, and neighbouring counters on one line would make every producer's store miss (the line
  // moves between their cores), a miss that the next locked instruction inside the timed hand-over (the
  // queue's lane exchange, the stack's compare-exchange, the mutex) waits for. That would charge the
  // lock-free strategies for the harness; a mutex whose threads take turns sleeping would escape it.
  struct alignas(64) Progress {
    std::atomic<std::size_t> done{0};
  };
  std::unique_ptr<Progress[]> progress;
  std::atomic<int> started{0};   // producers at the start line; they go together, so that they contend
  std::atomic<int> finished{0};
  std::vector<std::thread> workers;
};

std::unique_ptr<Run> g_run;

void produce(Run* run, int thread) noexcept {
  // Thread start-up is staggered by far more than a short run lasts: wait for every producer first.
  run->started.fetch_add(1, std::memory_order_acq_rel);
  while (run->started.load(std::memory_order_acquire) < run->threads) std::this_thread::yield();
  const std::size_t first = static_cast<std::size_t>(thread) * run->per_thread;
  // Spaced hand-overs follow a fixed schedule (not sleep-after-each), so that a loaded machine's sleep
  // overshoot does not push the last ones past the window the main thread waits for.
  const auto begin = std::chrono::steady_clock::now();
  std::size_t i = 0;
  for (; i < run->per_thread; ++i) {
    const std::size_t k = first + i;
    const std::int64_t start = now_ns();
    if (start > run->deadline_ns) break;
    run->push_ns[k] = start;
    hand_over(run->strategy, run->items[k], &run->nodes[k]);
    run->cost_ns[k] = now_ns() - start;
    run->progress[thread].done.store(i + 1, std::memory_order_release);
    if (run->spacing_us > 0) {
      std::this_thread::sleep_until(begin + std::chrono::microseconds(run->spacing_us) * static_cast<long>(i + 1));
    }
  }
  run->finished.fetch_add(1, std::memory_order_release);
}

// start(strategy, threads, per_thread, spacing_us=0, budget_s=10.0, probes=False): creates the objects
// (Probes stamped on release when probes=True), starts the producer threads and returns at once.
PyObject* py_start(PyObject*, PyObject* args) {
  const char* name;
  int threads, spacing_us = 0, probes = 0;
  Py_ssize_t per_thread;
  double budget_s = 10.0;
  if (!PyArg_ParseTuple(args, "sin|idp", &name, &threads, &per_thread, &spacing_us, &budget_s, &probes)) {
    return nullptr;
  }
  auto run = std::make_unique<Run>();
  if (!parse_strategy(name, &run->strategy)) return nullptr;
  if (g_run != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "a run is in progress: call finish() first");
    return nullptr;
  }
  if (threads < 1 || threads > 64 || per_thread < 1 || spacing_us < 0 || !(budget_s > 0)) {
    PyErr_SetString(PyExc_ValueError, "need 1 <= threads <= 64, per_thread >= 1, spacing_us >= 0, budget_s > 0");
    return nullptr;
  }
  const std::size_t total = static_cast<std::size_t>(threads) * static_cast<std::size_t>(per_thread);
  reclaim_bench::begin_probe_run(probes ? total : 0);
  run->threads = threads;
  run->per_thread = static_cast<std::size_t>(per_thread);
  run->spacing_us = spacing_us;
  run->items.reserve(total);
  for (std::size_t k = 0; k < total; ++k) {
    PyObject* object = new_probe(probes ? static_cast<Py_ssize_t>(k) : -1);
    if (object == nullptr) {
      for (PyObject* made : run->items) Py_DECREF(made);
      return nullptr;
    }
    run->items.push_back(object);
  }
  run->nodes.resize(total);
  run->cost_ns.assign(total, 0);
  run->push_ns.assign(total, 0);
  run->progress.reset(new Run::Progress[static_cast<std::size_t>(threads)]);
  run->deadline_ns = now_ns() + static_cast<std::int64_t>(budget_s * 1e9);
  for (int t = 0; t < threads; ++t) run->workers.emplace_back(produce, run.get(), t);
  g_run = std::move(run);
  Py_RETURN_NONE;
}

// done() -> bool: every producer thread has finished. Cheap; for busy loops.
PyObject* py_done(PyObject*, PyObject*) {
  return PyBool_FromLong(g_run != nullptr && g_run->finished.load(std::memory_order_acquire) == g_run->threads);
}

// wait(): joins the producers with the GIL released (the main thread is blocked in C meanwhile).
PyObject* py_wait(PyObject*, PyObject*) {
  if (g_run == nullptr) Py_RETURN_NONE;
  Run* run = g_run.get();
  Py_BEGIN_ALLOW_THREADS
  for (auto& worker : run->workers) worker.join();
  Py_END_ALLOW_THREADS
  run->workers.clear();
  Py_RETURN_NONE;
}

PyObject* bytes_of(const std::vector<std::int64_t>& values) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(values.data()),
                                   static_cast<Py_ssize_t>(values.size() * sizeof(std::int64_t)));
}

// finish() -> (cost_ns, push_ns, release_ns): joins the producers and returns the samples of completed
// hand-overs as bytes of int64 (array('q')); release_ns is 0 where the object was not released yet.
// Samples are taken before anything is drained here; then the run's leftovers are released (objects
// not handed over, and everything the strategy still holds), so that no reference outlives the run.
PyObject* py_finish(PyObject* self, PyObject*) {
  if (g_run == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "no run in progress");
    return nullptr;
  }
  if (py_wait(self, nullptr) == nullptr) return nullptr;
  std::unique_ptr<Run> run = std::move(g_run);
  const std::vector<std::int64_t>& release_ns = reclaim_bench::release_times();
  std::vector<std::int64_t> cost, pushed, released;
  for (int t = 0; t < run->threads; ++t) {
    const std::size_t first = static_cast<std::size_t>(t) * run->per_thread;
    const std::size_t count = run->progress[t].done.load(std::memory_order_acquire);
    for (std::size_t k = first; k < first + count; ++k) {
      cost.push_back(run->cost_ns[k]);
      pushed.push_back(run->push_ns[k]);
      if (!release_ns.empty()) released.push_back(release_ns[k]);
    }
    // Not handed over (the run's budget ran out), or handed to nobody (noop): ours to release.
    const std::size_t from = run->strategy == Strategy::kNoop ? first : first + count;
    for (std::size_t k = from; k < first + run->per_thread; ++k) Py_DECREF(run->items[k]);
  }
  PyObject* result = Py_BuildValue("(NNN)", bytes_of(cost), bytes_of(pushed), bytes_of(released));
  // The pending call may still be scheduled: it will find the stack empty. Nodes die with the run, so
  // take them off the stack now.
  drain_strategy(run->strategy, -1);
  return result;
}

// drain(strategy, max_items=-1) -> int: releases what the strategy holds, on this thread (GIL held).
PyObject* py_drain(PyObject*, PyObject* args) {
  const char* name;
  Py_ssize_t max_items = -1;
  Strategy strategy;
  if (!PyArg_ParseTuple(args, "s|n", &name, &max_items) || !parse_strategy(name, &strategy)) return nullptr;
  return PyLong_FromSize_t(drain_strategy(strategy, max_items));
}

// --- bursts (throughput and memory) --------------------------------------------------------------------

std::vector<std::unique_ptr<StackNode[]>> g_burst_nodes;  // cas_pending_call nodes of bursts not yet freed

// burst(strategy, objects, die=False) -> None: one native thread hands over one new reference to each
// object of the list, GIL released meanwhile; nothing drains during the burst (the main thread is blocked
// in C). With die=False the thread reads the list's item array in place (nobody mutates the list
// meanwhile), so that the burst allocates nothing but what the strategy allocates: RSS deltas are the
// strategy's. With die=True the list is emptied first, so that the strategy holds the only references
// (before any pending call can run).
PyObject* py_burst(PyObject*, PyObject* args) {
  const char* name;
  PyObject* list;
  int die = 0;
  Strategy strategy;
  if (!PyArg_ParseTuple(args, "sO!|p", &name, &PyList_Type, &list, &die) || !parse_strategy(name, &strategy)) {
    return nullptr;
  }
  if (strategy == Strategy::kNoop || strategy == Strategy::kWithGil) {
    PyErr_SetString(PyExc_ValueError, "burst() needs a strategy that queues references");
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(list);
  std::vector<PyObject*> copy;
  PyObject** items = PySequence_Fast_ITEMS(list);
  for (Py_ssize_t i = 0; i < n; ++i) Py_INCREF(items[i]);
  if (die) {
    copy.assign(items, items + n);
    items = copy.data();
    if (PyList_SetSlice(list, 0, n, nullptr) < 0) {
      for (PyObject* item : copy) Py_DECREF(item);
      return nullptr;
    }
  }
  // One node per reference, allocated up front as cuda.core does when a reference is registered; part of
  // the pending memory, freed by free_nodes() after the drain.
  StackNode* nodes = nullptr;
  if (strategy == Strategy::kCasPendingCall) {
    g_burst_nodes.emplace_back(new StackNode[static_cast<std::size_t>(n)]);
    nodes = g_burst_nodes.back().get();
  }
  Py_BEGIN_ALLOW_THREADS
  std::thread producer([=] {
    for (Py_ssize_t i = 0; i < n; ++i) hand_over(strategy, items[i], nodes != nullptr ? &nodes[i] : nullptr);
  });
  producer.join();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// free_nodes(): frees the burst nodes of cas_pending_call; call only after draining it.
PyObject* py_free_nodes(PyObject*, PyObject*) {
  drain_strategy(Strategy::kCasPendingCall, -1);
  g_burst_nodes.clear();
  Py_RETURN_NONE;
}

// The limit's loop, out of line so that an instruction count can be restricted to it
// (bench/count_instructions.py).
__attribute__((noinline)) void decref_each(PyObject* const* items, std::size_t count) {
  for (std::size_t index = 0; index < count; ++index) Py_DECREF(items[index]);
}

// decref_loop(objects, die, like_bindings=False, written_elsewhere=False) -> int: the physical limit of a
// drain, timed here: one Py_DECREF per item over a plain array (with like_bindings: through bindings'
// release action instead). Each item gets one new reference first; with die=True the list is emptied
// before the loop, so each release deallocates. With written_elsewhere=True a native thread writes the
// array (as CUDA's thread writes a queue's storage), so that the loop reads pointers from lines another
// core wrote: the limit of any hand-over between threads. Returns nanoseconds.
PyObject* py_decref_loop(PyObject*, PyObject* args) {
  PyObject* list;
  int die, like_bindings = 0, written_elsewhere = 0;
  if (!PyArg_ParseTuple(args, "O!p|pp", &PyList_Type, &list, &die, &like_bindings, &written_elsewhere)) {
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(list);
  // The same steps as burst(), in its order: the objects are touched (a new reference each, and with die
  // the list's dropped), and only then is the array the loop reads written, as a strategy's pushes are
  // after the objects' last touch. So the loop meets the objects' lines as the drains do.
  PyObject** const listed = PySequence_Fast_ITEMS(list);
  for (Py_ssize_t i = 0; i < n; ++i) Py_INCREF(listed[i]);
  const std::vector<PyObject*> taken(listed, listed + n);
  if (die && PyList_SetSlice(list, 0, n, nullptr) < 0) {
    for (PyObject* item : taken) Py_DECREF(item);
    return nullptr;
  }
  std::vector<PyObject*> items(static_cast<std::size_t>(n));
  const auto fill = [&items, &taken] { std::copy(taken.begin(), taken.end(), items.begin()); };
  if (written_elsewhere) {
    std::thread writer(fill);  // the main thread waits here, holding the GIL
    writer.join();
  } else {
    fill();
  }
  const std::int64_t start = now_ns();
  if (like_bindings) {
    reclaim_bench::release_like_bindings(items.data(), items.size());
  } else {
    decref_each(items.data(), items.size());
  }
  return PyLong_FromLongLong(now_ns() - start);
}

// probes(n, scattered=False) -> list of n Probe objects (not stamped): cheap distinct objects for bursts,
// listed in address order, or with scattered=True in one fixed pseudo-random order of their addresses.
// pymalloc hands out addresses in an order that depends on what was freed before, so without the sort
// each drain method would meet its own memory order; sorted, every method meets the same one (the plain
// loop's best: the hardware's own prefetcher follows it), and scattered, every method meets the same
// order of objects that were not released in the order they were made (as CUDA hands references back).
PyObject* py_probes(PyObject*, PyObject* args) {
  Py_ssize_t n;
  int scattered = 0;
  if (!PyArg_ParseTuple(args, "n|p", &n, &scattered)) return nullptr;
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "n must be >= 0");
    return nullptr;
  }
  PyObject* list = PyList_New(n);
  if (list == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* probe = new_probe(-1);
    if (probe == nullptr) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, i, probe);
  }
  PyObject** const items = PySequence_Fast_ITEMS(list);
  std::sort(items, items + n, std::less<PyObject*>());
  if (scattered) std::shuffle(items, items + n, std::mt19937_64(20261203));
  return list;
}

// pending_call_totals() -> (calls, released, ns): what cas_pending_call's pending calls did so far.
PyObject* py_pending_call_totals(PyObject*, PyObject*) {
  const auto& totals = reclaim_bench::pending_call_totals();
  return Py_BuildValue("(KKL)", static_cast<unsigned long long>(totals.calls),
                       static_cast<unsigned long long>(totals.released), static_cast<long long>(totals.ns));
}

// noop() -> None: the cheapest C function call, the baseline of an empty drain().
PyObject* py_noop(PyObject*, PyObject*) { Py_RETURN_NONE; }

PyMethodDef kMethods[] = {
    {"start", py_start, METH_VARARGS, "start(strategy, threads, per_thread, spacing_us=0, budget_s=10, probes=False)"},
    {"done", py_done, METH_NOARGS, "done() -> bool"},
    {"wait", py_wait, METH_NOARGS, "wait(): join the producers, GIL released"},
    {"finish", py_finish, METH_NOARGS, "finish() -> (cost_ns, push_ns, release_ns) as int64 bytes"},
    {"drain", py_drain, METH_VARARGS, "drain(strategy, max_items=-1) -> int"},
    {"burst", py_burst, METH_VARARGS, "burst(strategy, objects, die=False): hand over one reference to each, natively"},
    {"free_nodes", py_free_nodes, METH_NOARGS, "free_nodes(): free cas_pending_call burst nodes"},
    {"decref_loop", py_decref_loop, METH_VARARGS,
     "decref_loop(objects, die, like_bindings=False, written_elsewhere=False) -> ns"},
    {"probes", py_probes, METH_VARARGS, "probes(n, scattered=False) -> list of n objects"},
    {"pending_call_totals", py_pending_call_totals, METH_NOARGS, "pending_call_totals() -> (calls, released, ns)"},
    {"noop", py_noop, METH_NOARGS, "noop() -> None"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_reclaim_bench", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__reclaim_bench(void) {
  if (reclaim_bench::import_reclaim_api() < 0) return nullptr;
  PyTypeObject* probe_type = reclaim_bench::create_probe_type();
  if (probe_type == nullptr) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  Py_INCREF(probe_type);  // one for the module, one kept by probe_type.cc for the life of the process
  if (PyModule_AddObject(module, "Probe", reinterpret_cast<PyObject*>(probe_type)) < 0) {
    Py_DECREF(probe_type);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
