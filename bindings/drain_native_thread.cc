// bindings/drain_native_thread.cc — see drain_native_thread.h.

#include <Python.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "bindings/arguments.h"
#include "bindings/drain_native_thread.h"
#include "bindings/interpreter_entry.h"

namespace reclaim::bindings {
namespace {

struct NativeRun {
  // Futex word: 1 once the thread has let go of its thread state (or was unwound); joiners sleep on it.
  std::atomic<std::uint32_t> done{0};
};

std::uint32_t* futex_address(std::atomic<std::uint32_t>& word) {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex word is 32 bits");
  return reinterpret_cast<std::uint32_t*>(&word);
}

// Sets `run` done and wakes every joiner. Any thread; never blocks.
void mark_done(NativeRun* run) noexcept {
  run->done.store(1, std::memory_order_release);
  (void)::syscall(SYS_futex, futex_address(run->done), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

struct NativeStart {
  PyObject* target;  // strong reference, given up by the thread with the GIL (or leaked when refused)
  std::shared_ptr<NativeRun> run;
  interpreter_entry::View view;  // opened by the creating thread; the new thread enters through it
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
    ~MarkDone() { mark_done(run); }
  } mark_done{run.get()};
  interpreter_entry::NativeEntry entered;
  if (!entered.ensure(start->view)) {
    // 3.15+: the interpreter is finalizing; nothing of Python may be touched, not even the target's
    // reference (leaked, like everything still alive then).
    start->target = nullptr;
    return nullptr;
  }
  PyObject* result = PyObject_CallObject(start->target, nullptr);
  if (result == nullptr) {
    PyErr_WriteUnraisable(start->target);
  } else {
    Py_DECREF(result);
  }
  Py_CLEAR(start->target);
  entered.release();
  return nullptr;
}

PyObject* native_thread_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* target = nullptr;
  if ((kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) || !PyArg_UnpackTuple(args, "_NativeThread", 1, 1, &target)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_NativeThread() takes one callable");
    return nullptr;
  }
  if (!check_callable("_NativeThread", "target", target)) return nullptr;
  auto* self = reinterpret_cast<NativeThread*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->run = new (std::nothrow) std::shared_ptr<NativeRun>(std::make_shared<NativeRun>());
  auto* start = self->run == nullptr ? nullptr : new (std::nothrow) NativeStart{target, *self->run, {}};
  if (start == nullptr) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  if (!start->view.open()) {
    delete start;
    Py_DECREF(self);
    return nullptr;
  }
  Py_INCREF(target);
  pthread_t thread;
  const int error = ::pthread_create(&thread, nullptr, native_thread_main, start);
  if (error != 0) {
    Py_DECREF(target);
    delete start;
    mark_done(self->run->get());  // never ran: nothing to join
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
  return (*self->run)->done.load(std::memory_order_acquire) != 0;
}

const char* const kJoinNames[] = {"timeout", nullptr};
const Parameters kJoinParameters = {"_NativeThread.join", kJoinNames, 0, 0};

PyObject* native_thread_join(PyObject* object, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* self = reinterpret_cast<NativeThread*>(object);
  PyObject* timeout = nullptr;
  if (!parse_arguments(kJoinParameters, args, nargs, kwnames, &timeout)) return nullptr;
  int limit_ms;  // not given, or None: no limit (Thread.join's default)
  if (!parse_timeout(kJoinParameters.function, "timeout", timeout, /*absent_ms=*/-1, &limit_ms)) return nullptr;
  const bool limited = limit_ms >= 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limited ? limit_ms : 0);
  NativeRun* run = self->run->get();
  for (;;) {
    if (run->done.load(std::memory_order_acquire) != 0) Py_RETURN_TRUE;
    struct timespec timeout = {0, 0};
    if (limited) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) Py_RETURN_FALSE;
      const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      timeout = {static_cast<time_t>(nanoseconds / 1'000'000'000), static_cast<long>(nanoseconds % 1'000'000'000)};
    }
    // Sleeps until the thread is done (a wake, or EAGAIN when it already is), the limit passes, or a signal
    // arrives (EINTR): its exception (KeyboardInterrupt) reaches the caller as it would in Thread.join().
    long result;
    int error;
    Py_BEGIN_ALLOW_THREADS
    result = ::syscall(SYS_futex, futex_address(run->done), FUTEX_WAIT_PRIVATE, 0u, limited ? &timeout : nullptr,
                       nullptr, 0);
    error = errno;
    Py_END_ALLOW_THREADS
    if (result != 0 && error == EINTR && PyErr_CheckSignals() < 0) return nullptr;
  }
}

PyObject* native_thread_is_alive(PyObject* object, PyObject*) {
  return PyBool_FromLong(!native_thread_done(reinterpret_cast<NativeThread*>(object)));
}

PyObject* native_thread_ident(PyObject* object, void*) {
  return PyLong_FromUnsignedLongLong(reinterpret_cast<NativeThread*>(object)->ident);
}

PyMethodDef kNativeThreadMethods[] = {
    {"join", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(native_thread_join)),
     METH_FASTCALL | METH_KEYWORDS,
     "join($self, /, timeout=None)\n--\n\n"
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
                                  "Call target() on a new native thread that enters the interpreter by itself\n"
                                  "(PyThreadState_EnsureFromView on 3.15+, where it calls nothing once the\n"
                                  "interpreter is finalizing; PyGILState_Ensure before).\n"
                                  "Any thread, GIL held; never blocks (the thread waits for the GIL).")},
    {0, nullptr},
};

PyType_Spec kNativeThreadSpec = {
    "cuda_reclaim._reclaim._NativeThread",
    sizeof(NativeThread),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    kNativeThreadSlots,
};

}  // namespace

int add_native_thread_type(PyObject* module) {
  PyObject* type = PyType_FromSpec(&kNativeThreadSpec);
  if (type == nullptr) return -1;
  if (PyModule_AddObject(module, "_NativeThread", type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

}  // namespace reclaim::bindings
