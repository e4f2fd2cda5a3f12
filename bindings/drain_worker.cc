// bindings/drain_worker.cc — cuda_reclaim._reclaim._DrainWorker: the automatic drain loop, in one place.
//
// A worker is one run of the loop on one Python thread. The loop rests with the GIL released and takes it
// only to drain:
//
//   wait   — GIL released, poll(2) on the queue's wake-up fd, the queue's closed fd and this worker's own
//            stop fd. (No drain through Py_AddPendingCall: a pending call runs between any two bytecodes,
//            also inside threading's locked sections, where a finalizer that sets an Event the main thread
//            waits on deadlocks it. The pending calls are the step-aside, drain_step_aside.h, and the
//            restart of the parent's drain thread once os.fork() has returned, drain_fork_return.h.)
//   drain  — take the GIL (3.15+: under a PEP 788 guard, refused once finalization is under way; see
//            interpreter_entry.h), release everything queued, keeping the wake-up signal set (linger) when it
//            found work, so producers on CUDA's thread skip the eventfd write while traffic continues.
//            When taking the GIL was contended, the linger ends at once and the loop waits.
//   linger — GIL released: sleep kLingerMilliseconds on the stop fd, then look at the queue without the
//            GIL; work pending: drain again; nothing: end the linger and wait.
//   trim   — after a burst beyond the reserved capacity, once pending has stayed at or below it for the
//            trim delay, the burst's memory goes back (ReclaimQueue::trim(), GIL released).
//   exit   — when stopped, when the queue is closed, or once the interpreter finalizes; on every way out
//            the signal is settled (end_linger), so no later push can lose its wake-up.
//
// A contended drain does not linger: a busy GIL holder hands the GIL over only after a waiter waited a
// switch interval, so each linger round would pay that interval again on top of its sleep; waiting on the
// eventfd instead lets the next push wake the loop, which then asks for the GIL at once (the producers still
// write the fd at most once per hand-over). See docs/benchmarks.md, "Release latency, busy main thread".
//
// Each worker has its own stop eventfd, so stopping one never depends on who else reads the queue's fd
// (an asyncio reader or a drain(timeout) may empty it first) and never wakes another worker.

#include <Python.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <new>

#include "bindings/drain.h"
#include "bindings/drain_fork_return.h"
#include "bindings/drain_native_thread.h"
#include "bindings/drain_step_aside.h"
#include "bindings/drain_worker.h"
#include "bindings/interpreter_entry.h"

namespace reclaim::bindings {
namespace {

// How long the loop lingers after a drain that found work: bounds the extra release latency for
// references that arrive meanwhile, and the producers' eventfd writes to about one per period.
constexpr int kLingerMilliseconds = 1;

// How long pending must stay at or below the reserved capacity after a burst before the loop gives the
// burst's memory back (ReclaimQueue::trim()): long enough that a stream of bursts keeps its blocks instead
// of allocating them again on CUDA's thread each time, short enough that a one-off burst does not stay
// resident. Settable for tests (_reclaim._set_trim_delay); read by each loop round.
constexpr int kTrimAfterMilliseconds = 1000;
std::atomic<int> g_trim_delay_ms{kTrimAfterMilliseconds};

// A GIL acquisition that took longer than this was contended: another thread held the GIL and was made
// to drop it (or dropped it on its own after running a while). An uncontended one takes microseconds. One
// linger period: once taking the GIL costs more than the linger's sleep, a linger round costs more than
// twice what lingering is for, and the wait on the eventfd batches the producers' writes as well.
constexpr auto kContendedAcquisition = std::chrono::milliseconds(kLingerMilliseconds);

namespace entry = interpreter_entry;

struct DrainWorker {
  PyObject_HEAD
  int stop_fd;            // eventfd, readable once stop() was called (in the process that made it)
  entry::View* view;      // the interpreter run() enters again; opened and closed by run()
  pid_t creator_pid;      // the process that made stop_fd; a fork child never writes to it (shared)
  std::atomic<bool> stop_requested;  // set (seq_cst) by stop() before the write; read by the loop
  std::atomic<bool> started;         // exchange by run(): a worker runs once
};

bool stopping(const DrainWorker* self) { return self->stop_requested.load(std::memory_order_seq_cst); }

// Ends a linger on every way out of the loop, including an unwind: never touches Python.
struct SettleSignalOnExit {
  ~SettleSignalOnExit() { queue().end_linger(); }
};

PyObject* worker_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if ((args != nullptr && PyTuple_GET_SIZE(args) != 0) || (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0)) {
    PyErr_SetString(PyExc_TypeError, "_DrainWorker() takes no arguments");
    return nullptr;
  }
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return PyErr_SetFromErrno(PyExc_OSError);
  auto* self = reinterpret_cast<DrainWorker*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    ::close(fd);
    return nullptr;
  }
  self->stop_fd = fd;
  self->creator_pid = ::getpid();
  new (&self->stop_requested) std::atomic<bool>(false);
  new (&self->started) std::atomic<bool>(false);
  self->view = nullptr;
  return reinterpret_cast<PyObject*>(self);
}

void worker_dealloc(PyObject* object) {
  auto* self = reinterpret_cast<DrainWorker*>(object);
  PyTypeObject* type = Py_TYPE(object);
  if (self->stop_fd >= 0) ::close(self->stop_fd);
  delete self->view;
  type->tp_free(object);
  Py_DECREF(type);
}

// Sleeps up to `milliseconds` on the stop fd. GIL released by the caller.
void sleep_unless_stopped(const DrainWorker* self, int milliseconds) {
  struct pollfd waiter = {self->stop_fd, POLLIN, 0};
  (void)::poll(&waiter, 1, milliseconds);
}

// Takes the GIL back for `state` unless the interpreter's finalization is under way, and says whether
// that had to wait for another thread (see kContendedAcquisition). A drain thread, GIL released; blocks
// until it holds the GIL. Returns false, GIL still released, when a PEP 788 guard could not be had (3.15+:
// finalization went past its wait for guards; taking the GIL would hang the thread for good). The guard
// covers the wait for the GIL only: Py_FinalizeEx waits for guards with the GIL released, so that wait
// ends. Before 3.15 there is no guard: on 3.10-3.13 a thread that takes the GIL once the interpreter is
// finalizing is ended here by a forced unwind; SettleSignalOnExit covers that way out.
bool take_gil_unless_finalizing(const DrainWorker* self, PyThreadState* state, bool* contended) {
  entry::EntryGuard guard;
  if (!guard.acquire(*self->view)) return false;
  *contended = take_gil_asking_main_thread_to_step_aside(state) > kContendedAcquisition;
  guard.entered();
  return true;
}

// Called after a wake-up, GIL released; returns with the GIL released and `*state` its thread state.
// Drains while work keeps arriving (the linger); the first look that finds nothing settles the signal,
// including a wake-up fd left readable with nothing pending. Returns false once the
// interpreter is finalizing: the loop must leave.
bool drain_while_work_arrives(const DrainWorker* self, PyThreadState** state) {
  for (;;) {
    bool contended = false;
    if (!take_gil_unless_finalizing(self, *state, &contended)) return false;
    if (interpreter_finalizing()) {
      *state = PyEval_SaveThread();
      return false;  // nothing may be released now; the exit settles the signal
    }
    // The stop flag reaches the drain: a stopped worker leaves before its next item (the rest goes back).
    const Py_ssize_t released = stopping(self) ? 0 : drain_safely(SIZE_MAX, /*linger=*/true, &self->stop_requested);
    *state = PyEval_SaveThread();
    // A contended drain does not linger (see the top of this file): it ends the linger at once, like a
    // drain that found nothing. Always through end_linger(), never by draining without the linger flag:
    // after an earlier round of this linger the fd is unreadable while the signal is set, and a plain
    // drain that leaves work behind (it arrived during the drain) would keep it that way, a lost wake-up.
    if (released == 0 || contended) {
      queue().end_linger();
      return true;
    }
    // Lingering: the signal stays set, so pushes meanwhile do not write the fd and only the queue itself
    // says whether work arrived. Reading it needs no GIL; when nothing is pending, end_linger() settles
    // the signal (it re-arms for a push that raced with it: no lost wake-up) without taking the GIL.
    sleep_unless_stopped(self, kLingerMilliseconds);
    if (stopping(self) || queue().pending() == 0) {
      queue().end_linger();
      return true;
    }
  }
}

// When the loop gives a burst's memory back: once pending has stayed at or below the reserved capacity
// for the trim delay since it was last seen above it. GIL not needed.
class TrimClock {
 public:
  // Trims if due; returns how long the loop may wait before asking again (ms; -1: no trim pending).
  int trim_if_due() {
    if (!queue().trim_would_help()) {
      watching_ = false;
      return -1;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!watching_ || queue().pending() > queue().reserved_capacity()) {
      watching_ = true;
      low_since_ = now;  // the burst is still here (or just noticed): the delay starts again
    }
    const auto delay = std::chrono::milliseconds(g_trim_delay_ms.load(std::memory_order_relaxed));
    if (now - low_since_ >= delay) {
      if (queue().trim() == reclaim::TrimStatus::kTrimmed) {
        watching_ = false;  // the next burst waits a whole delay of its own
      } else {
        low_since_ = now;  // busy: one delay later
      }
      return queue().trim_would_help() ? static_cast<int>(delay.count()) : -1;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(low_since_ + delay - now);
    return static_cast<int>(left.count()) + 1;
  }

 private:
  bool watching_ = false;
  std::chrono::steady_clock::time_point low_since_;
};

PyObject* worker_run(PyObject* object, PyObject*) {
  auto* self = reinterpret_cast<DrainWorker*>(object);
  if (self->started.exchange(true, std::memory_order_acq_rel)) {
    PyErr_SetString(PyExc_RuntimeError, "a _DrainWorker runs once; make a new one");
    return nullptr;
  }
  SettleSignalOnExit settle;
  if (interpreter_finalizing()) Py_RETURN_NONE;
  // Opened here, on the thread that enters it again; leaked if the thread hangs at the end.
  self->view = new (std::nothrow) entry::View();
  if (self->view == nullptr) return PyErr_NoMemory();
  if (!self->view->open()) return nullptr;
  // From here on the loop holds the GIL only to drain.
  PyThreadState* state = PyEval_SaveThread();
  TrimClock trim_clock;
  while (!stopping(self) && !queue().is_closed()) {
    // After a burst beyond the reserved capacity the wait is bounded by when the trim is due (trim() runs
    // no Python and needs no GIL; busy: a drain elsewhere is in the storage, so it tries again one delay
    // later). Otherwise the wait has no limit: an idle process never wakes this thread.
    const int timeout_ms = trim_clock.trim_if_due();
    // false: a timeout, or EINTR (the loop condition decides); stopped: the loop condition decides.
    if (!queue().wait_for_work_or(self->stop_fd, timeout_ms)) continue;
    if (stopping(self)) continue;
    if (!drain_while_work_arrives(self, &state)) break;
  }
  // Settled and let go of before the GIL is asked for: once finalizing, a thread that asks never returns.
  queue().end_linger();
  self->view->close();
  PyEval_RestoreThread(state);
  Py_RETURN_NONE;
}

PyObject* worker_stop(PyObject* object, PyObject*) {
  auto* self = reinterpret_cast<DrainWorker*>(object);
  self->stop_requested.store(true, std::memory_order_seq_cst);
  // In a fork child the eventfd is the parent's too: only the flag, which the child's copy of the loop
  // (the forking thread, if it was this worker's) reads before it waits again.
  if (self->creator_pid == ::getpid()) {
    const std::uint64_t one = 1;
    (void)!::write(self->stop_fd, &one, sizeof one);
  }
  Py_RETURN_NONE;
}

PyObject* worker_stopped(PyObject* object, void*) {
  return PyBool_FromLong(stopping(reinterpret_cast<DrainWorker*>(object)));
}

// The PEP 788 branch's counts (interpreter_entry.h), for the drain threads and _NativeThread alike. A static
// method of the type, not a module function: it belongs to the drain threads and serves tests only.
PyObject* worker_entry_stats(PyObject*, PyObject*) {
  const auto guarded = entry::g_guarded_entries.load(std::memory_order_relaxed);
  const auto refused = entry::g_refused_entries.load(std::memory_order_relaxed);
  return Py_BuildValue("{s:O,s:K,s:K}", "pep788", entry::kPep788 ? Py_True : Py_False, "guarded_entries",
                       static_cast<unsigned long long>(guarded), "refused_entries",
                       static_cast<unsigned long long>(refused));
}

PyMethodDef kWorkerMethods[] = {
    {"run", worker_run, METH_NOARGS,
     "run($self, /)\n--\n\n"
     "Run the automatic drain loop on this thread until stop(), close() or finalization. Releases the\n"
     "GIL while it waits. Runs once per worker."},
    {"stop", worker_stop, METH_NOARGS,
     "stop($self, /)\n--\n\n"
     "Ask the loop to leave: it returns after the release in progress, if any. Any thread; never\n"
     "blocks; safe from a finalizer that the loop itself is running."},
    {"_entry_stats", worker_entry_stats, METH_NOARGS | METH_STATIC,
     "_entry_stats()\n--\n\nInternal (tests): {'pep788': whether the drain threads enter through PEP 788\n"
     "(CPython 3.15+), 'guarded_entries': entries made that way, 'refused_entries': entries it refused\n"
     "because finalization was under way}. Process-wide counts, 0 where the branch is compiled out."},
    {"_call_once_fork_returned", drain_worker_call_once_fork_returned, METH_O | METH_STATIC,
     "_call_once_fork_returned(callback, /)\n--\n\nInternal (cuda_reclaim._auto_fork's after-fork hook in the\n"
     "parent, which calls it itself, on the main thread): call callback() on the main thread once the os.fork() in\n"
     "progress has returned to its caller. Returns False, scheduling nothing, when that cannot be told (no\n"
     "Python frame called os.fork(), or its frame object could not be made) or no pending call can be added;\n"
     "the caller then acts at once."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef kWorkerGetSet[] = {
    {"stopped", worker_stopped, nullptr, "True once stop() was called.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// Private (_DrainWorker): only cuda_reclaim._auto makes workers.
PyType_Slot kWorkerSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(worker_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(worker_dealloc)},
    {Py_tp_methods, kWorkerMethods},
    {Py_tp_getset, kWorkerGetSet},
    {Py_tp_doc, const_cast<char*>("_DrainWorker()\n--\n\n"
                                  "One run of the automatic drain loop (see cuda_reclaim._auto).")},
    {0, nullptr},
};

PyType_Spec kWorkerSpec = {
    "cuda_reclaim._reclaim._DrainWorker",
    sizeof(DrainWorker),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    kWorkerSlots,
};

PyObject* py_set_trim_delay(PyObject*, PyObject* seconds) {
  const double value = PyFloat_AsDouble(seconds);
  if (value == -1.0 && PyErr_Occurred()) return nullptr;
  if (!(value >= 0.0 && value <= 3600.0)) {
    PyErr_Format(PyExc_ValueError, "_set_trim_delay(): seconds must be in [0, 3600], not %R", seconds);
    return nullptr;
  }
  const int previous = g_trim_delay_ms.exchange(static_cast<int>(value * 1000.0), std::memory_order_relaxed);
  return PyFloat_FromDouble(previous / 1000.0);
}

PyMethodDef kWorkerFunctions[] = {
    {"_set_trim_delay", py_set_trim_delay, METH_O,
     "_set_trim_delay(seconds, /)\n--\n\nInternal (tests): how long pending must stay at or below the reserved\n"
     "capacity after a burst before the drain thread trims; returns the previous delay. Default 1.0."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int add_drain_worker_types(PyObject* module) {
  if (PyModule_AddFunctions(module, kWorkerFunctions) < 0) return -1;
  if (add_native_thread_type(module) < 0) return -1;
  PyObject* type = PyType_FromSpec(&kWorkerSpec);
  if (type == nullptr) return -1;
  if (PyModule_AddObject(module, "_DrainWorker", type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

}  // namespace reclaim::bindings
