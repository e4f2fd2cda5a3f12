// bench/python_anchors.h — the anchor strategies that release Python objects from a thread Python did
// not create, as other projects do it today. One copy serves the Python benchmarks
// (bench/reclaim_bench_ext.cc) and the shutdown comparison (bench/shutdown/). Written from each design's
// published description (docs/shutdown.md, docs/benchmarks.md); no code copied.
//
//   release_with_gil           (A) PyGILState_Ensure(); Py_DECREF(obj); PyGILState_Release() — what
//                              Cython's `with gil:` does around a Py_DECREF
//   release_if_initialized     (B) A, skipped unless Py_IsInitialized()
//   release_unless_finalizing  (C) A, skipped unless Py_IsInitialized() and the interpreter is not
//                              finalizing
//   PendingCallStack           (D) cuda.core's deferred cleanup: a CoalescedStack (bench/anchors.h) whose
//                              first push after a drain schedules one Py_AddPendingCall; the pending call
//                              releases the whole stack on the main thread, between bytecodes
//
// None of these is a cuda-reclaim API. They call the Python C API from the producer thread, which is
// exactly what cuda-reclaim's producer path never does.

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "bench/anchors.h"
#include "bindings/python_compat.h"

namespace reclaim_bench {

// The interpreter's finalizing flag: public API from CPython 3.13, private before.
// Any thread; reads one field of the runtime; never blocks.
inline bool interpreter_finalizing() noexcept { return reclaim::bindings::python_compat::is_finalizing(); }

// (A) Steals a reference to `obj`. Any thread; blocks until it holds the GIL. During finalization
// CPython may end the calling thread inside PyGILState_Ensure (pthread_exit): in a noexcept frame that is
// std::terminate.
inline void release_with_gil(PyObject* obj) noexcept {
  const PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(obj);
  PyGILState_Release(state);
}

// (B) Steals a reference to `obj`. Returns false, leaking it silently, when Python is not initialized.
// Any thread; blocks like A.
inline bool release_if_initialized(PyObject* obj) noexcept {
  if (!Py_IsInitialized()) return false;
  release_with_gil(obj);
  return true;
}

// (C) Steals a reference to `obj`. Returns false, leaking it silently, when Python is not initialized or
// is finalizing. Any thread; blocks like A.
inline bool release_unless_finalizing(PyObject* obj) noexcept {
  if (!Py_IsInitialized() || interpreter_finalizing()) return false;
  release_with_gil(obj);
  return true;
}

// (D) cuda.core's pattern. push: any thread (calls Py_IsInitialized, and Py_AddPendingCall on the first
// push after a drain); drain: requires an attached thread state (GIL). A scheduled pending call refers to
// the instance by address, so it must outlive the interpreter: make it a global.
class PendingCallStack {
 public:
  // Which interpreter states make push() decline (and leak the reference).
  enum class Gate {
    kInitialized,                 // declines once Py_IsInitialized() is false
    kInitializedAndNotFinalizing  // also declines while the interpreter is finalizing
  };
  enum class PushResult {
    kQueued,     // on the stack; a drain was already scheduled
    kScheduled,  // on the stack; this push scheduled the pending call
    kDeclined    // the gate declined: the node is not on the stack and its reference is leaked
  };
  // What the pending calls did: written by them with the GIL held; read with the GIL held.
  struct Totals {
    std::uint64_t calls = 0;
    std::uint64_t released = 0;
    std::int64_t ns = 0;  // steady_clock time spent inside the pending calls
  };
  // Called at the end of every pending call (GIL held), e.g. to count it somewhere that outlives a crash.
  using PendingCallHook = void (*)(std::size_t released);

  explicit PendingCallStack(Gate gate, PendingCallHook hook = nullptr) noexcept : gate_(gate), hook_(hook) {}
  PendingCallStack(const PendingCallStack&) = delete;
  PendingCallStack& operator=(const PendingCallStack&) = delete;

  // Hands over `node->item` (a PyObject* whose reference the stack steals). `node` belongs to the stack
  // until a drain has released it; the caller keeps its storage alive for that long.
  PushResult push(StackNode* node) noexcept {
    if (!Py_IsInitialized() || (gate_ == Gate::kInitializedAndNotFinalizing && interpreter_finalizing())) {
      return PushResult::kDeclined;
    }
    if (!stack_.push(node)) return PushResult::kQueued;
    if (Py_AddPendingCall(&PendingCallStack::pending_call, this) == 0) return PushResult::kScheduled;
    stack_.unschedule();  // the pending-call table is full: the next push asks again
    return PushResult::kQueued;
  }

  // Releases every reference on the stack now, on this thread. Returns how many. Requires the GIL.
  std::size_t drain() noexcept { return CoalescedStack::release_list(stack_.take_all(), decref); }

  const Totals& totals() const noexcept { return totals_; }

 private:
  static void decref(void* item) noexcept { Py_DECREF(static_cast<PyObject*>(item)); }

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Runs on the main thread between bytecodes, GIL held.
  static int pending_call(void* self_pointer) noexcept {
    auto* self = static_cast<PendingCallStack*>(self_pointer);
    const std::int64_t start = now_ns();
    const std::size_t released = self->drain();
    self->totals_.ns += now_ns() - start;
    self->totals_.released += released;
    ++self->totals_.calls;
    if (self->hook_ != nullptr) self->hook_(released);
    return 0;
  }

  const Gate gate_;
  const PendingCallHook hook_;
  CoalescedStack stack_;
  Totals totals_;
};

}  // namespace reclaim_bench
