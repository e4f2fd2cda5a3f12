// bindings/drain_native_thread.cc — see drain_native_thread.h.

#include <Python.h>
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "bindings/arguments.h"
#include "bindings/drain_native_thread.h"
#include "bindings/interpreter_attach.h"

namespace reclaim::bindings {
namespace {

struct NativeRun {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;  // under mutex: the thread has let go of its thread state (or was unwound)
};

struct NativeStart {
  PyObject* target;  // strong reference, given up by the thread with the GIL (or leaked when refused)
  std::shared_ptr<NativeRun> run;
  interpreter_attach::View view;  // opened by the creating thread; the new thread attaches through it
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
  interpreter_attach::NativeAttach attached;
  if (!attached.ensure(start->view)) {
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
  attached.release();
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
    bool done;
    // In slices, so that a Ctrl-C reaches the caller as it would in Thread.join().
    Py_BEGIN_ALLOW_THREADS
    std::unique_lock<std::mutex> lock(run->mutex);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    if (limited && deadline < until) until = deadline;
    run->finished.wait_until(lock, until, [run] { return run->done; });
    done = run->done;
    Py_END_ALLOW_THREADS
    if (done) Py_RETURN_TRUE;
    if (limited && std::chrono::steady_clock::now() >= deadline) Py_RETURN_FALSE;
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
                                  "Call target() on a new native thread that attaches by itself\n"
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
