// bindings/drain_worker.cc — cuda_reclaim._reclaim._DrainWorker: the automatic drain loop, in one place.
//
// A worker is one run of the loop on one Python thread (cuda_reclaim._auto starts and stops workers; it
// owns the lifecycle, this file owns the protocol). The loop rests with the GIL released and takes it only
// to drain:
//
//   wait   — GIL released, poll(2) on the queue's wake-up fd, the queue's closed fd and this worker's own
//            stop fd. (No main-thread drain through Py_AddPendingCall: a pending call runs between any two
//            bytecodes, also inside threading's own locked sections, and a finalizer that sets an Event
//            while the main thread waits on it deadlocks the main thread with itself. The only pending
//            call is the step-aside below, which runs no Python.)
//   drain  — take the GIL (timed), release everything queued, keeping the wake-up signal set (linger)
//            when it found work, so producers on CUDA's thread skip the eventfd write while traffic
//            continues. When taking the GIL was contended (another thread held it: a busy main thread
//            gives it up only after a switch interval), the linger ends at once and the loop waits.
//   linger — GIL released: sleep kLingerMilliseconds on the stop fd, then look at the queue without the
//            GIL; work pending: drain again; nothing: end the linger and wait. No GIL is taken to find
//            nothing.
//   trim   — after a burst beyond the reserved capacity, once pending has stayed at or below the reserved
//            capacity for the trim delay (a trickle of new work does not hold it up), the burst's memory
//            goes back (ReclaimQueue::trim(), GIL released).
//   exit   — when stopped, when the queue is closed, or once the interpreter finalizes; on every way out
//            the signal is settled (end_linger): the fd is readable exactly when work is pending, so no
//            later push can lose its wake-up.
//
// Why a contended drain does not linger. A thread that runs bytecode and never blocks (the GIL holder)
// hands the GIL over only when a waiter has waited one full switch interval (sys.getswitchinterval(),
// 5 ms by default) and then asked it to drop it. Every linger round that takes the GIL again pays that
// interval anew, on top of the linger's sleep: a reference that arrived just after a drain waited
// linger + interval (+ scheduling), once per round. Going back to the wait instead, with the signal
// settled, makes the next push write the eventfd, and the loop asks for the GIL at that instant: the
// interval it must wait then overlaps with whatever arrives meanwhile. Lingering gains nothing there:
// the producers skip the write anyway while the loop waits for the GIL with the signal set, so a busy
// main thread still costs at most one eventfd write per GIL hand-over (per switch interval). On 3.13+ the
// step-aside call below makes a busy main thread let go at its next eval-breaker check. On 3.10-3.12.1 the
// floor stays for a main thread that runs bytecode and never blocks: a reference that arrives just after a
// drain gave the GIL back is released about one interval later at best (this loop never changes the
// switch interval, and never asks the main thread to drain through a pending call); the step-aside call
// there serves a main thread that gives the GIL up often but briefly (below).
//
// Each worker has its own stop eventfd, so stopping one never depends on who else reads the queue's fd
// (an asyncio reader or a drain(timeout) may empty it first) and never wakes another worker.

#include <Python.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "bindings/drain.h"

namespace reclaim_bindings {
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

struct DrainWorker {
  PyObject_HEAD
  int stop_fd;            // eventfd, readable once stop() was called (in the process that made it)
  pid_t owner_pid;        // the process that made stop_fd; a fork child never writes to it (shared)
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
  self->owner_pid = ::getpid();
  new (&self->stop_requested) std::atomic<bool>(false);
  new (&self->started) std::atomic<bool>(false);
  return reinterpret_cast<PyObject*>(self);
}

void worker_dealloc(PyObject* object) {
  auto* self = reinterpret_cast<DrainWorker*>(object);
  PyTypeObject* type = Py_TYPE(object);
  if (self->stop_fd >= 0) ::close(self->stop_fd);
  type->tp_free(object);
  Py_DECREF(type);
}

// Sleeps up to `milliseconds` on the stop fd. GIL released by the caller.
void sleep_unless_stopped(const DrainWorker* self, int milliseconds) {
  struct pollfd waiter = {self->stop_fd, POLLIN, 0};
  (void)::poll(&waiter, 1, milliseconds);
}

// --- Asking a busy main thread to step aside ---------------------------------------------------------------
//
// A main thread that runs bytecode gives the GIL up only after a waiter has waited a switch interval. On
// 3.13+ (and later 3.12 releases) a pending call reaches it at its next eval-breaker check, within
// microseconds. On 3.10, 3.11 and early 3.12 releases (3.12.1 checked) a pending call added by another thread
// reaches it only when something else makes it look: its own re-taking of the GIL after a blocking call, a
// garbage collection, or the waiter's drop request after a switch interval. The first is the case that
// matters there. A main thread that gives the GIL up often but briefly (an event loop's select(0) between
// callbacks, a library call that releases the GIL for microseconds) starves a waiting drain thread: it takes
// the GIL straight back before the woken drain thread runs, and each re-take counts as a switch, so the drain
// thread's wait never ends in a drop request. Measured with an asyncio loop running 1 ms of bytecode between
// awaits, 3.12, default switch interval, on a 2-core host: release latency p50 24-152 ms, p99 96-250 ms
// without the call; with it, p50 0.6-0.8 ms, p99 2-4 ms (the re-take runs the call, and the drain thread gets
// in at the next one). The call used here runs no Python code and releases nothing: it only gives the GIL up,
// at the very point where CPython itself drops it for a waiter that asked, and takes it back once a drain
// thread has had it (see wait_for_a_drain_thread_to_take_the_gil). The drain and its finalizers still run on
// the drain thread, never on the main thread (a drain run by a pending call would run finalizers inside
// whatever the main thread was doing, threading's locked sections included, where one that sets an Event the
// main thread waits on deadlocks it). One call is outstanding at a time; a call that finds no drain thread
// waiting returns at once (the GIL was free after all: the main thread was blocked in C when the call was
// added).

// How long a main thread that stepped aside waits for a drain thread to take the GIL, at most. It is
// not a time slice: the wait ends as soon as a drain thread has had the GIL or none waits any more, like
// CPython's own forced switch (the thread that drops the GIL on request waits until another took it). A
// fixed slice is too short on a loaded machine: a drain thread woken by the drop may not be scheduled
// within it, the main thread takes the GIL back, and the drain thread then waits a whole switch interval
// after all. While the main thread waits, the GIL is free for any thread: another thread that takes it
// first keeps the main thread out about as long as it would have kept it waiting for the GIL anyway (and
// the drain thread then asks for it in turn). The bound only covers a drain thread that is not scheduled
// at all for this long; it then waits out the switch interval as it would without the call.
constexpr auto kStepAsideLimit = std::chrono::seconds(1);
// The first part of the wait yields the CPU (a drain thread usually takes the GIL within microseconds);
// after it the main thread sleeps in short steps, so that on a busy machine it leaves its core to the
// drain thread it waits for.
constexpr auto kStepAsideYielding = std::chrono::microseconds(200);
constexpr long kStepAsideSleepNanoseconds = 100 * 1000;

std::atomic<int> g_drain_threads_waiting{0};           // drain threads inside take_gil after a wake-up
std::atomic<std::uint64_t> g_drain_thread_acquisitions{0};  // bumped by a drain thread holding the GIL
std::atomic<bool> g_step_aside_scheduled{false};      // a step-aside call is added and has not run yet

// Main thread, GIL released by it. Returns once a drain thread has taken the GIL since `seen` (the
// acquisition count before the release), once no drain thread waits for it any more (it left, or it took
// the GIL and has already been counted out), or after kStepAsideLimit.
void wait_for_a_drain_thread_to_take_the_gil(std::uint64_t seen) {
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    if (g_drain_thread_acquisitions.load(std::memory_order_acquire) != seen ||
        g_drain_threads_waiting.load(std::memory_order_seq_cst) == 0) {
      return;
    }
    const auto waited = std::chrono::steady_clock::now() - started;
    if (waited >= kStepAsideLimit) return;
    if (waited < kStepAsideYielding) {
      sched_yield();
    } else {
      struct timespec step = {0, kStepAsideSleepNanoseconds};
      (void)::nanosleep(&step, nullptr);
    }
  }
}

// The pending call. Main thread, GIL held, between two bytecodes. (Only the main thread runs pending
// calls, and it is not finalizing while it runs one: a drain thread that the finalization ends or hangs
// inside take_gil is never waited for here.)
int step_aside_for_a_drain_thread(void*) {
  g_step_aside_scheduled.store(false, std::memory_order_seq_cst);
  if (g_drain_threads_waiting.load(std::memory_order_seq_cst) == 0 || interpreter_finalizing()) return 0;
  const std::uint64_t seen = g_drain_thread_acquisitions.load(std::memory_order_acquire);
  PyThreadState* state = PyEval_SaveThread();
  wait_for_a_drain_thread_to_take_the_gil(seen);
  PyEval_RestoreThread(state);
  return 0;
}

// Adds the step-aside call unless one is outstanding. Any thread, no GIL needed (Py_AddPendingCall's
// contract); a full queue of pending calls just means no step-aside this time.
void ask_main_thread_to_step_aside() {
  if (g_step_aside_scheduled.exchange(true, std::memory_order_seq_cst)) return;
  if (Py_AddPendingCall(step_aside_for_a_drain_thread, nullptr) != 0) {
    g_step_aside_scheduled.store(false, std::memory_order_seq_cst);
  }
}

// Takes the GIL back for `state` (PyEval_RestoreThread) and says whether that had to wait for another
// thread: see kContendedAcquisition. It first asks a busy main thread to step aside (above).
// (On 3.10-3.13 a thread that takes the GIL once the interpreter is finalizing is ended here by a forced
// unwind; SettleSignalOnExit covers that way out.)
bool take_gil_was_contended(PyThreadState* state) {
  // Counted while waiting, also on the way out of a forced unwind (the destructor touches no Python).
  struct Waiting {
    Waiting() noexcept { g_drain_threads_waiting.fetch_add(1, std::memory_order_seq_cst); }
    ~Waiting() { g_drain_threads_waiting.fetch_sub(1, std::memory_order_seq_cst); }
  };
  const auto asked = std::chrono::steady_clock::now();
  {
    const Waiting waiting;
    ask_main_thread_to_step_aside();
    PyEval_RestoreThread(state);
  }
  g_drain_thread_acquisitions.fetch_add(1, std::memory_order_release);
  return std::chrono::steady_clock::now() - asked > kContendedAcquisition;
}

// Called after a wake-up, GIL released; returns with the GIL released and `*state` its thread state.
// Drains while work keeps arriving (the linger); the first look that finds nothing settles the signal,
// including a wake-up fd left readable by notify() with nothing pending. Returns false once the
// interpreter is finalizing: the loop must leave.
bool drain_while_work_arrives(const DrainWorker* self, PyThreadState** state) {
  for (;;) {
    const bool contended = take_gil_was_contended(*state);
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

}  // namespace

void forget_drain_threads_after_fork() noexcept {
  // Only the forking thread exists in the child: no drain thread waits, and a step-aside call the parent
  // had added may never run here, so a new one must be allowed.
  g_drain_threads_waiting.store(0, std::memory_order_relaxed);
  g_step_aside_scheduled.store(false, std::memory_order_relaxed);
}

namespace {

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
  PyEval_RestoreThread(state);
  Py_RETURN_NONE;
}

PyObject* worker_stop(PyObject* object, PyObject*) {
  auto* self = reinterpret_cast<DrainWorker*>(object);
  self->stop_requested.store(true, std::memory_order_seq_cst);
  // In a fork child the eventfd is the parent's too: only the flag, which the child's copy of the loop
  // (the forking thread, if it was this worker's) reads before it waits again.
  if (self->owner_pid == ::getpid()) {
    const std::uint64_t one = 1;
    (void)!::write(self->stop_fd, &one, sizeof one);
  }
  Py_RETURN_NONE;
}

PyObject* worker_stopped(PyObject* object, void*) {
  return PyBool_FromLong(stopping(reinterpret_cast<DrainWorker*>(object)));
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
    Py_TPFLAGS_DEFAULT,
    kWorkerSlots,
};


// --- A native thread for when threading refuses to start one -------------------------------------------
//
// CPython 3.12 refuses new threading threads from the start of Py_FinalizeEx (while non-daemon threads are
// joined, and in the atexit hooks), although a thread may still attach then: PyGILState_Ensure works until
// runtime finalization begins, after the atexit hooks. cuda_reclaim._auto runs its drain loop on such a
// thread then, so that a first hand-over at exit (a launch from an atexit hook) still has a drain thread,
// and its atexit hook joins it here, like Thread.join: GIL released, bounded, Ctrl-C honoured.

struct NativeRun {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;  // under mutex: the thread has let go of its thread state (or was unwound)
};

struct NativeStart {
  PyObject* target;  // strong reference, given up by the thread with the GIL
  std::shared_ptr<NativeRun> run;
};

struct NativeThread {
  PyObject_HEAD
  std::shared_ptr<NativeRun>* run;  // shared with the thread: the object may go before the thread ends
  unsigned long long ident;         // pthread_self() of the thread, as threading.get_ident() gives it
};

void* native_thread_main(void* arg) {
  std::unique_ptr<NativeStart> start(static_cast<NativeStart*>(arg));
  const std::shared_ptr<NativeRun> run = start->run;
  // Also on a forced unwind (a thread that takes the GIL once the runtime finalizes): a joiner returns.
  struct MarkDone {
    NativeRun* run;
    ~MarkDone() {
      {
        std::lock_guard<std::mutex> lock(run->mutex);
        run->done = true;
      }
      run->finished.notify_all();
    }
  } mark_done{run.get()};
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* result = PyObject_CallObject(start->target, nullptr);
  if (result == nullptr) {
    PyErr_WriteUnraisable(start->target);
  } else {
    Py_DECREF(result);
  }
  Py_CLEAR(start->target);
  PyGILState_Release(gil);
  return nullptr;
}

PyObject* native_thread_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* target = nullptr;
  if ((kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) || !PyArg_UnpackTuple(args, "_NativeThread", 1, 1, &target)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_NativeThread() takes one callable");
    return nullptr;
  }
  if (!PyCallable_Check(target)) {
    PyErr_SetString(PyExc_TypeError, "_NativeThread() takes one callable");
    return nullptr;
  }
  auto* self = reinterpret_cast<NativeThread*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->run = new (std::nothrow) std::shared_ptr<NativeRun>(std::make_shared<NativeRun>());
  auto* start = self->run == nullptr ? nullptr : new (std::nothrow) NativeStart{target, *self->run};
  if (start == nullptr) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  Py_INCREF(target);
  pthread_t thread;
  const int error = ::pthread_create(&thread, nullptr, native_thread_main, start);
  if (error != 0) {
    Py_DECREF(target);
    delete start;
    {
      std::lock_guard<std::mutex> lock((*self->run)->mutex);
      (*self->run)->done = true;  // never ran: nothing to join
    }
    Py_DECREF(self);
    PyErr_Format(PyExc_RuntimeError, "can't start new thread: %s", std::strerror(error));
    return nullptr;
  }
  ::pthread_detach(thread);
  self->ident = static_cast<unsigned long long>(thread);
  return reinterpret_cast<PyObject*>(self);
}

void native_thread_dealloc(PyObject* object) {
  auto* self = reinterpret_cast<NativeThread*>(object);
  PyTypeObject* type = Py_TYPE(object);
  delete self->run;
  type->tp_free(object);
  Py_DECREF(type);
}

bool native_thread_done(NativeThread* self) {
  std::lock_guard<std::mutex> lock((*self->run)->mutex);
  return (*self->run)->done;
}

PyObject* native_thread_join(PyObject* object, PyObject* const* argv, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<NativeThread*>(object);
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "_NativeThread.join() takes at most 1 argument (%zd given)", nargs);
    return nullptr;
  }
  double limit = -1.0;  // no limit
  if (nargs == 1 && argv[0] != Py_None) {
    limit = PyFloat_AsDouble(argv[0]);
    if (limit == -1.0 && PyErr_Occurred()) return nullptr;
    if (limit < 0) limit = 0;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(limit < 0 ? 0 : limit));
  NativeRun* run = self->run->get();
  for (;;) {
    bool done;
    // In slices, so that a Ctrl-C reaches the caller as it would in Thread.join().
    Py_BEGIN_ALLOW_THREADS
    std::unique_lock<std::mutex> lock(run->mutex);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    if (limit >= 0 && deadline < until) until = deadline;
    run->finished.wait_until(lock, until, [run] { return run->done; });
    done = run->done;
    Py_END_ALLOW_THREADS
    if (done) Py_RETURN_TRUE;
    if (limit >= 0 && std::chrono::steady_clock::now() >= deadline) Py_RETURN_FALSE;
    if (PyErr_CheckSignals() < 0) return nullptr;
  }
}

PyObject* native_thread_is_alive(PyObject* object, PyObject*) {
  return PyBool_FromLong(!native_thread_done(reinterpret_cast<NativeThread*>(object)));
}

PyObject* native_thread_ident(PyObject* object, void*) {
  return PyLong_FromUnsignedLongLong(reinterpret_cast<NativeThread*>(object)->ident);
}

PyMethodDef kNativeThreadMethods[] = {
    {"join", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(native_thread_join)), METH_FASTCALL,
     "join($self, timeout=None, /)\n--\n\n"
     "Wait until the thread has let go of its thread state, at most `timeout` seconds (None: no limit).\n"
     "Returns True once it has. Any thread but its own; releases the GIL while it waits; a signal's\n"
     "exception (KeyboardInterrupt) ends the wait."},
    {"is_alive", native_thread_is_alive, METH_NOARGS,
     "is_alive($self, /)\n--\n\nTrue until the thread has let go of its thread state. Never blocks."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef kNativeThreadGetSet[] = {
    {"ident", native_thread_ident, nullptr, "The thread's identifier, as threading.get_ident() gives it.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// Private (_NativeThread): only cuda_reclaim._auto makes them, when threading refuses at exit.
PyType_Slot kNativeThreadSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(native_thread_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(native_thread_dealloc)},
    {Py_tp_methods, kNativeThreadMethods},
    {Py_tp_getset, kNativeThreadGetSet},
    {Py_tp_doc, const_cast<char*>("_NativeThread(target)\n--\n\n"
                                  "Call target() on a new native thread that attaches with PyGILState_Ensure.\n"
                                  "Any thread, GIL held; never blocks (the thread waits for the GIL).")},
    {0, nullptr},
};

PyType_Spec kNativeThreadSpec = {
    "cuda_reclaim._reclaim._NativeThread",
    sizeof(NativeThread),
    0,
    Py_TPFLAGS_DEFAULT,
    kNativeThreadSlots,
};

}  // namespace

namespace {

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

int add_drain_worker_type(PyObject* module) {
  if (PyModule_AddFunctions(module, kWorkerFunctions) < 0) return -1;
  PyObject* native_type = PyType_FromSpec(&kNativeThreadSpec);
  if (native_type == nullptr) return -1;
  if (PyModule_AddObject(module, "_NativeThread", native_type) < 0) {
    Py_DECREF(native_type);
    return -1;
  }
  PyObject* type = PyType_FromSpec(&kWorkerSpec);
  if (type == nullptr) return -1;
  if (PyModule_AddObject(module, "_DrainWorker", type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

}  // namespace reclaim_bindings
