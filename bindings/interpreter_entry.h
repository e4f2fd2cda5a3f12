// bindings/interpreter_entry.h — how a thread with no attached thread state enters the interpreter
// without racing its finalization: PEP 788 (interpreter views and guards) where CPython has it (3.15+),
// the older calls before, chosen at compile time so that the call sites read the same.
//
// With PEP 788, "not finalizing → enter" is one step: a guard taken from a view keeps Py_FinalizeEx
// from going past the point where it waits for guards (after threading's shutdown and the atexit hooks,
// with the GIL released), and a guard cannot be had once it went past it. Before 3.15 the entry is
// unconditional: on 3.10–3.13 a thread that takes the GIL once finalizing is ended by a forced unwind,
// on 3.14 it may hang or be let in; the callers check interpreter_finalizing() once inside, as they
// always did.
//
// Header-only, C++.

#pragma once

#include <Python.h>

#include <atomic>
#include <cstdint>

#if PY_VERSION_HEX >= 0x030F0000 && !defined(Py_LIMITED_API)
#define CUDA_RECLAIM_HAVE_PEP788 1
#else
#define CUDA_RECLAIM_HAVE_PEP788 0
#endif

namespace reclaim::bindings::interpreter_entry {

// Whether the PEP 788 branch is compiled in.
inline constexpr bool kPep788 = CUDA_RECLAIM_HAVE_PEP788 != 0;

// Process-wide counts of the PEP 788 branch (always 0 without it): entries it made (a guard or an
// ensure that succeeded, then the entry), and entries it refused (finalization under way, or no memory).
// Any thread; relaxed atomics; never reset (a fork child keeps the parent's counts).
inline std::atomic<std::uint64_t> g_guarded_entries{0};
inline std::atomic<std::uint64_t> g_refused_entries{0};

// A view of the interpreter it was opened in, for a thread that enters later. Empty before 3.15.
// Owns its PEP 788 view; not copyable; close() before it goes (or let the destructor do it).
class View {
 public:
  View() = default;
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  ~View() { close(); }

  // Opens a view of the current interpreter. Returns false with an exception set (no memory).
  // Requires an attached thread state (GIL); never blocks.
  bool open() noexcept {
#if CUDA_RECLAIM_HAVE_PEP788
    view_ = PyInterpreterView_FromCurrent();
    return view_ != nullptr;
#else
    return true;
#endif
  }

  // Gives the view up; idempotent. Any thread; no GIL needed; never blocks.
  void close() noexcept {
#if CUDA_RECLAIM_HAVE_PEP788
    if (view_ != nullptr) PyInterpreterView_Close(view_);
    view_ = nullptr;
#endif
  }

#if CUDA_RECLAIM_HAVE_PEP788
  // The view, or null when none could be opened; valid until this View is destroyed. Any thread.
  PyInterpreterView* get() const noexcept { return view_; }

 private:
  PyInterpreterView* view_ = nullptr;
#endif
};

// Keeps finalization from starting while a thread that has a thread state of its own (a drain thread)
// takes the GIL back: acquire() before PyEval_RestoreThread, entered() once it returned. Closed as soon
// as the thread is inside, never held across what the thread runs then: a finalizer may wait for
// something the exiting main thread holds, and Py_FinalizeEx would wait for the guard for ever. Once
// inside, the GIL the thread holds is what keeps finalization from starting (Py_FinalizeEx needs it).
class EntryGuard {
 public:
  EntryGuard() = default;
  EntryGuard(const EntryGuard&) = delete;
  EntryGuard& operator=(const EntryGuard&) = delete;
  ~EntryGuard() { close(); }

  // True when the thread may take the GIL back: 3.15+, a guard from `view` was had (false: finalization
  // is past its wait for guards; counted as refused); before, always true.
  // A thread without an attached thread state; never blocks; `view` must be open.
  bool acquire(const View& view) noexcept {
#if CUDA_RECLAIM_HAVE_PEP788
    guard_ = PyInterpreterGuard_FromView(view.get());
    if (guard_ == nullptr) {
      g_refused_entries.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
#else
    (void)view;
#endif
    return true;
  }

  // The thread is inside again (GIL held): counts the guarded entry and closes the guard.
  // Requires the GIL taken back after a successful acquire(); never blocks.
  void entered() noexcept {
#if CUDA_RECLAIM_HAVE_PEP788
    if (guard_ != nullptr) g_guarded_entries.fetch_add(1, std::memory_order_relaxed);
#endif
    close();
  }

 private:
  // Any thread; no GIL needed; idempotent.
  void close() noexcept {
#if CUDA_RECLAIM_HAVE_PEP788
    if (guard_ != nullptr) PyInterpreterGuard_Close(guard_);
    guard_ = nullptr;
#endif
  }

#if CUDA_RECLAIM_HAVE_PEP788
  PyInterpreterGuard* guard_ = nullptr;
#endif
};

// A thread state for a native thread that has none: 3.15+, PyThreadState_EnsureFromView (which holds a
// guard of its own until release(), so Py_FinalizeEx waits for the thread to let go); before,
// PyGILState_Ensure. Not copyable; release() exactly once after a successful ensure().
class NativeEntry {
 public:
  NativeEntry() = default;
  NativeEntry(const NativeEntry&) = delete;
  NativeEntry& operator=(const NativeEntry&) = delete;

  // Enters the interpreter on the calling thread (blocks for the GIL). 3.15+: false when refused
  // (finalization under way or no memory; counted), the thread is then not inside and must not call
  // Python. Before: true (on 3.10-3.13 the thread may be ended here by a forced unwind once the runtime
  // finalizes).
  // A thread without an attached thread state; `view` must be open (3.15+). Not noexcept: the forced
  // unwind must pass through.
  bool ensure(const View& view) {
#if CUDA_RECLAIM_HAVE_PEP788
    token_ = PyThreadState_EnsureFromView(view.get());
    if (token_ == nullptr) {
      g_refused_entries.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    g_guarded_entries.fetch_add(1, std::memory_order_relaxed);
#else
    (void)view;
    state_ = PyGILState_Ensure();
#endif
    return true;
  }

  // Lets go of the thread state ensure() gave (and, 3.15+, of its guard).
  // The thread that called ensure(), inside; never blocks.
  void release() noexcept {
#if CUDA_RECLAIM_HAVE_PEP788
    PyThreadState_Release(token_);
    token_ = nullptr;
#else
    PyGILState_Release(state_);
#endif
  }

 private:
#if CUDA_RECLAIM_HAVE_PEP788
  PyThreadStateToken* token_ = nullptr;
#else
  PyGILState_STATE state_ = PyGILState_UNLOCKED;
#endif
};

}  // namespace reclaim::bindings::interpreter_entry
