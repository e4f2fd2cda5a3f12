// bindings/release_loop.h — the loop of bindings' release action (drain.cc's release_references), in a
// header so that the benchmark's "drain minus the queue" row (bench/reclaim_bench_ext.cc) runs the very
// code the drain runs, over a plain array.
#pragma once

#include <Python.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "bindings/python_compat.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim::bindings {

// How many items ahead of its release each object's line is asked for, so that the fetch overlaps with
// the releases in between.
constexpr std::size_t kFetchAhead = 8;

// The private type whose objects are calls the release loop runs rather than Py_DECREFs (host calls and
// host-node calls, one type for both so that telling them from plain references is one compare:
// bindings/host_calls.h's host_item_type(); null before it exists). A plain value, read once per batch.
struct HostItemType {
  const PyTypeObject* type;
  // True when an item of `item_type` is a host call or host-node call (run by the release action, never
  // Py_DECREF'd as a plain reference).
  bool includes(const PyTypeObject* item_type) const noexcept { return item_type == type; }
};

// Whether the objects of items[from, to) follow each other in ascending address order, close together
// (sampled every kOrderSampleStep items): there the CPU's own prefetcher follows the releases from line to
// line, and asking for each object's line ahead only costs instructions. Any sample out of order or far
// apart says no: the loop fetches ahead. Any thread; never touches Python (reads only the pointers).
constexpr std::size_t kOrderSampleStep = 32;
constexpr std::uintptr_t kOrderSampleSpan = kOrderSampleStep * 256;  // bytes between two samples, at most
inline bool objects_follow_in_address_order(void* const* items, std::size_t from, std::size_t to) noexcept {
  if (to - from <= kOrderSampleStep) return false;
  std::uintptr_t here = reinterpret_cast<std::uintptr_t>(items[from]);
  for (std::size_t k = from + kOrderSampleStep; k < to; k += kOrderSampleStep) {
    const std::uintptr_t later = reinterpret_cast<std::uintptr_t>(items[k]);
    if (later <= here || later - here > kOrderSampleSpan) return false;
    here = later;
  }
  return true;
}

// Hands an exception that a release left set to sys.unraisablehook. Requires the GIL.
inline void report_leftover_exception(const PyThreadState* thread) {
  if (python_compat::exception_set(thread)) PyErr_WriteUnraisable(nullptr);
}

// Releases batch->items[batch->next ... batch->count) in order and leaves batch->next at count. An item
// whose type `host` includes is a call: `run_call(item)` runs it (and steals the reference); any other is a
// plain reference, Py_DECREF'd here without a call. Before a call the items released so far are settled
// (ReclaimQueue::settle), so that counters read while the call runs (an exit report) do not show them as
// in_drain. With a `stop` flag (the automatic drain thread's), the loop looks at it before each item and,
// once it is set, halts there (batch->halt: the drain requeues that item and the rest at the front of the
// queue); only that instantiation pays the load per item.
// Requires the GIL; re-entrant (a release may drain again); allocates nothing itself.
//
// Why it is shaped this way (the costs behind each choice: docs/benchmarks.md, "Drain throughput"):
// - Unwinding: a handler sets batch->next just past the item being released (at a call whose release never
//   began when the report before it unwinds) and rethrows (ReleaseBatchFn's contract); a store of `next`
//   before each release would cost every item an instruction.
// - Fetch ahead: unless the objects follow each other in address order, each object's line is asked for
//   kFetchAhead items before its release.
// - The error indicator is read once after the loop and before each call, not after every release: a
//   deallocator must work with an exception set (CPython's own unwinding releases references so), so a
//   plain release needs no clean indicator, and one that leaves an exception set is still reported after
//   the loop; a call runs the user's function, which must start clean.
// - `host` is taken by value (through a reference the compiler reloads it after every release) and calls
//   are marked rare, so a plain reference's release falls through as in a bare Py_DECREF loop.
// - Two loops, so that the one almost every item goes through has no bound check on its fetch: up to
//   `fetching`, the item kFetchAhead places on is in the batch; after it, none is.
// - No loop is unrolled (the library compiles with -funroll-loops, library_copts.bzl): unrolled, it ran
//   slower than a bare Py_DECREF loop although it executed fewer instructions.
template <class RunCall>
inline void release_batch(reclaim::ReleaseBatch* batch, const HostItemType host, RunCall run_call,
                          const std::atomic<bool>* stop = nullptr) {
  const PyThreadState* const thread = PyThreadState_Get();
  void* const* const items = batch->items;
  const std::size_t count = batch->count;
  std::size_t index = batch->next;
  bool reporting = false;  // in the report before a call: an unwind from there leaves the call unreleased
  // Releases items[at]. A call reads its item again after the report, so that the item need not live in
  // a register that survives a call: a plain reference's pointer then goes straight into the argument
  // register of its deallocation, as in a bare loop.
  const auto release = [&](std::size_t at) {
    PyObject* const item = static_cast<PyObject*>(items[at]);
    if (__builtin_expect(host.includes(Py_TYPE(item)), 0)) {
      reporting = true;
      report_leftover_exception(thread);
      reclaim::ReclaimQueue::settle(batch, at);
      reporting = false;
      run_call(static_cast<PyObject*>(items[at]));
    } else {
      Py_DECREF(item);
    }
  };
  const std::size_t fetching =
      count > kFetchAhead && !objects_follow_in_address_order(items, index, count) ? count - kFetchAhead : 0;
  // The first kFetchAhead objects are asked for before the loop, which asks for the rest.
  if (fetching != 0) {
    for (std::size_t ahead = index; ahead < std::min(count, index + kFetchAhead); ++ahead) {
      __builtin_prefetch(items[ahead], 1);
    }
  }
  // The stop flag is read before each item (relaxed: it only has to be seen soon, and the drain settles
  // what is requeued with its own ordering).
  const auto stopped = [&]() {
    if (stop == nullptr || !stop->load(std::memory_order_relaxed)) return false;
    // A closed queue: its close's final drain has begun or is over, and what is requeued now would wait for
    // no drain at all. This drain finishes what it took instead, as that final drain would have.
    if (batch->queue != nullptr && batch->queue->is_closed()) return false;
    batch->next = index;
    batch->halt = true;
    return true;
  };
  try {
    if (stop != nullptr) {
#pragma GCC unroll 1
      for (; index < count; ++index) {
        if (stopped()) return;
        if (index < fetching) __builtin_prefetch(items[index + kFetchAhead], 1);
        release(index);
      }
    }
#pragma GCC unroll 1
    for (; index < fetching; ++index) {
      __builtin_prefetch(items[index + kFetchAhead], 1);
      release(index);
    }
#pragma GCC unroll 1
    for (; index < count; ++index) release(index);
  } catch (...) {
    batch->next = reporting ? index : index + 1;
    throw;
  }
  batch->next = count;
  report_leftover_exception(thread);
}

}  // namespace reclaim::bindings
