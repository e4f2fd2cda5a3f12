// bench/bench_strategies.h — the hand-over strategies of the Python benchmarks (bench/bench_python.py):
// what a native producer thread calls per reference, and what the owner calls to release what a strategy
// still holds.
//
//   noop              nothing (the cost of the timestamps themselves; the reference is released later)
//   cuda_reclaim      the capsule's host_destructor (the public path CUDA code takes)
//   mutex_vector      PyO3's reference pool pattern      } bench/anchors.h; drained on request, with the
//   mutex_deque       jaxlib's PythonRefManager pattern  } GIL, as their libraries do on GIL/API entry
//   cas_pending_call  cuda.core's design (bench/python_anchors.h): Py_IsInitialized() gate, CAS push of a
//                     preallocated node, one coalesced Py_AddPendingCall per batch
//   with_gil          PyGILState_Ensure(); Py_DECREF(obj); PyGILState_Release()

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>

#include "bench/anchors.h"
#include "bench/python_anchors.h"
#include "cuda_reclaim/cuda_reclaim.h"

namespace reclaim_bench {

enum class Strategy { kNoop, kReclaim, kMutexVector, kMutexDeque, kCasPendingCall, kWithGil };

// Loads the capsule. Call once, from PyInit, with the GIL; returns -1 with an exception set on failure.
int import_reclaim_api();

// Sets *out from a strategy's name; false with ValueError set for an unknown name. Requires the GIL.
bool parse_strategy(const char* name, Strategy* out);

// One hand-over from a producer thread (no GIL needed); steals the reference to `object`. `node` is the
// preallocated node of cas_pending_call (unused by the others). Never throws.
void hand_over(Strategy strategy, PyObject* object, StackNode* node) noexcept;

// Releases what `strategy` still holds, at most `max_items` for cuda_reclaim (-1: all). Returns how many.
// Requires the GIL.
std::size_t drain_strategy(Strategy strategy, Py_ssize_t max_items);

// What cas_pending_call's pending calls did so far. Requires the GIL.
const PendingCallStack::Totals& pending_call_totals();

}  // namespace reclaim_bench
