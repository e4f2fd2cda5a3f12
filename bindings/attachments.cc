// bindings/attachments.cc — see attachments.h.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/attachments.h"

#include <sched.h>

#include <cstdint>
#include <new>

#include "bindings/arguments.h"
#include "bindings/drain.h"
#include "handback/process_barrier.h"

namespace reclaim::bindings {
namespace {

using reclaim::handback::HandBackBarrier;
using reclaim::handback::monotonic_ns;
using WaitResult = HandBackBarrier::WaitResult;

PyTypeObject* g_attachment_type = nullptr;  // module init; the module is main-interpreter only

HandBackBarrier& barrier() noexcept { return reclaim::handback::process_barrier(); }

// Runs `wait(nanoseconds left, or -1)` with the GIL released until it stops for a reason other than a
// signal; between signals, runs the Python handlers (a KeyboardInterrupt ends the wait with that
// exception). True/False for reached/not, null with the handler's exception.
template <class Wait>
PyObject* wait_releasing_the_gil(int timeout_ms, const Wait& wait) {
  // In a finalizer or call that a drain runs, what the wait is for may be queued behind the caller: look,
  // never block.
  if (releasing_on_this_thread()) timeout_ms = 0;
  const std::int64_t deadline = timeout_ms < 0 ? -1 : monotonic_ns() + std::int64_t{timeout_ms} * 1000000;
  for (;;) {
    std::int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - monotonic_ns();
      if (left < 0) left = 0;
    }
    WaitResult result;
    Py_BEGIN_ALLOW_THREADS
    result = wait(left);
    Py_END_ALLOW_THREADS
    if (result != WaitResult::kInterrupted) return PyBool_FromLong(result == WaitResult::kReached);
    if (PyErr_CheckSignals() < 0) return nullptr;
  }
}

const char* const kTimeoutNames[] = {"timeout", nullptr};

bool parse_wait_timeout(const char* function, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                        int* timeout_ms) {
  const Parameters spec = {function, kTimeoutNames, 0, 0};
  PyObject* timeout = nullptr;
  if (!parse_arguments(spec, args, nargs, kwnames, &timeout)) return false;
  return parse_timeout(function, "timeout", timeout, -1, timeout_ms);
}

// --- cuda_reclaim.Attachment ------------------------------------------------------------------------------

// True when `attachment` was made before a fork of this process: CUDA hands it back in the parent only.
bool from_an_ancestor(const Attachment* attachment) noexcept {
  return attachment->forks != barrier().forks() && attachment->record.done.load(std::memory_order_acquire) == 0;
}

PyObject* attachment_done(PyObject* self, PyObject*) {
  const auto* attachment = reinterpret_cast<Attachment*>(self);
  return PyBool_FromLong(attachment->record.done.load(std::memory_order_acquire) != 0);
}

PyObject* attachment_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  int timeout_ms;
  if (!parse_wait_timeout("Attachment.wait", args, nargs, kwnames, &timeout_ms)) return nullptr;
  auto* attachment = reinterpret_cast<Attachment*>(self);
  if (from_an_ancestor(attachment)) Py_RETURN_FALSE;  // its hand-back happens in the parent, never here
  // `self` is referenced by the call for as long as it waits.
  return wait_releasing_the_gil(timeout_ms, [attachment](std::int64_t left) {
    return barrier().wait_cell(attachment->record.done, left);
  });
}

PyObject* attachment_repr(PyObject* self) {
  const auto* attachment = reinterpret_cast<Attachment*>(self);
  const bool done = attachment->record.done.load(std::memory_order_acquire) != 0;
  return PyUnicode_FromFormat("<cuda_reclaim.Attachment %s: %s>", attachment->kind,
                              done ? "handed back by CUDA" : "held by CUDA");
}

int attachment_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<Attachment*>(self)->objects);
  Py_VISIT(Py_TYPE(self));
  return 0;
}

// A cycle through the objects (buf.attachment = keep_alive(graph, buf)) is collected once CUDA has let go:
// until then CUDA's reference, from outside the cycle, keeps it alive.
int attachment_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<Attachment*>(self)->objects);
  return 0;
}

void attachment_dealloc(PyObject* self) {
  auto* attachment = reinterpret_cast<Attachment*>(self);
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  if (attachment->attached && attachment->forks == barrier().forks()) {
    // The trampoline pushed this object and is finishing its count: its last store is record.done, a few
    // instructions away (it never blocks).
    while (attachment->record.done.load(std::memory_order_acquire) == 0) sched_yield();
  }
  Py_CLEAR(attachment->objects);
  attachment->record.~HandBackRecord();
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef kAttachmentMethods[] = {
    {"done", attachment_done, METH_NOARGS,
     "done($self, /)\n--\n\n"
     "True once CUDA has handed the objects back (they are then queued for the next drain)."},
    {"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(attachment_wait)),
     METH_FASTCALL | METH_KEYWORDS,
     "wait($self, /, timeout=None)\n--\n\n"
     "Block (the GIL released) until CUDA has handed the objects back: True. False when `timeout`\n"
     "seconds pass first (None: no limit), once the queue is closed (close(), exit), or at once in a fork\n"
     "child for an attachment of the parent (CUDA hands it back there only). Any thread but\n"
     "CUDA's callback thread; a signal handler's exception (KeyboardInterrupt) ends the wait."},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot kAttachmentSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(attachment_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(attachment_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(attachment_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(attachment_repr)},
    {Py_tp_methods, kAttachmentMethods},
    {Py_tp_doc, const_cast<char*>(
                    "What keep_alive() and keep_alive_until() return (and a NodeHandle holds): one attachment to\n"
                    "CUDA that can be waited for alone. done() says whether CUDA has handed it back; wait()\n"
                    "blocks until it has. It holds the objects it keeps alive until it is released: by the drain\n"
                    "that takes it, once you no longer hold it.")},
    {0, nullptr},
};

PyType_Spec kAttachmentSpec = {
    "cuda_reclaim.Attachment", static_cast<int>(sizeof(Attachment)), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    kAttachmentSlots,
};

// --- the barrier ------------------------------------------------------------------------------------------

const char* const kWaitNames[] = {"timeout", "since", nullptr};

// A `since` argument: null or None → 0 (everything); else an int from hand_back_mark(), not past the
// current epoch.
bool parse_since(const char* function, PyObject* value, std::uint64_t* since) {
  *since = 0;
  if (value == nullptr || value == Py_None) return true;
  if (!PyLong_Check(value) || PyBool_Check(value)) {
    PyErr_Format(PyExc_TypeError, "%s(): since must be a mark from hand_back_mark() or None, not %s", function,
                 Py_TYPE(value)->tp_name);
    return false;
  }
  PyObject* zero = PyLong_FromLong(0);
  const int negative = zero == nullptr ? -1 : PyObject_RichCompareBool(value, zero, Py_LT);
  Py_XDECREF(zero);
  if (negative < 0) return false;
  // Marks are never negative, and none past the latest one has been made: say which rule `value` breaks.
  if (negative) {
    PyErr_Format(PyExc_ValueError,
                 "%s(): since must be a mark from hand_back_mark(), not %R: marks are never negative", function,
                 value);
    return false;
  }
  const unsigned long long mark = PyLong_AsUnsignedLongLong(value);
  if (PyErr_Occurred() || mark > barrier().epoch()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError,
                 "%s(): since must be a mark from hand_back_mark(), not %R: the marks made so far go up to %llu",
                 function, value, static_cast<unsigned long long>(barrier().epoch()));
    return false;
  }
  *since = mark;
  return true;
}

PyObject* py_wait_handed_back(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Parameters spec = {"wait_handed_back", kWaitNames, 0, 0};
  PyObject* values[2] = {nullptr, nullptr};
  if (!parse_arguments(spec, args, nargs, kwnames, values)) return nullptr;
  int timeout_ms;
  std::uint64_t since;
  if (!parse_timeout("wait_handed_back", "timeout", values[0], -1, &timeout_ms)) return nullptr;
  if (!parse_since("wait_handed_back", values[1], &since)) return nullptr;
  if (barrier().is_shut()) Py_RETURN_FALSE;
  const HandBackBarrier::Span span = barrier().request(since);
  return wait_releasing_the_gil(timeout_ms, [span](std::int64_t left) { return barrier().wait(span, left); });
}

// _checked_since(function, value) -> int | None: the since rule above for the package's Python functions.
PyObject* py_checked_since(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_checked_since() takes (function: str, value)");
    return nullptr;
  }
  std::uint64_t since;
  if (!parse_since(PyUnicode_AsUTF8(args[0]), args[1], &since)) return nullptr;
  if (args[1] == Py_None) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(since);
}

PyObject* py_hand_back_mark(PyObject*, PyObject*) { return PyLong_FromUnsignedLongLong(barrier().mark()); }

PyObject* py_hand_back_request(PyObject*, PyObject* since_value) {
  std::uint64_t since;
  if (!parse_since("handed_back", since_value, &since)) return nullptr;
  const HandBackBarrier::Span span = barrier().request(since);
  return Py_BuildValue("(KK)", static_cast<unsigned long long>(span.since),
                       static_cast<unsigned long long>(span.until));
}

PyObject* py_hand_back_reached(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_hand_back_reached() takes (since, until)");
    return nullptr;
  }
  const unsigned long long since = PyLong_AsUnsignedLongLong(args[0]);
  const unsigned long long until = PyLong_AsUnsignedLongLong(args[1]);
  if (PyErr_Occurred()) return nullptr;
  return PyBool_FromLong(barrier().reached(HandBackBarrier::Span{since, until}));
}

PyObject* py_hand_back_listener_fd(PyObject*, PyObject*) {
  const int fd = barrier().listener_fd();
  if (fd < 0) return PyErr_SetFromErrno(PyExc_OSError);
  return PyLong_FromLong(fd);
}

PyObject* py_hand_back_listen(PyObject*, PyObject* on) {
  const int listen = PyObject_IsTrue(on);
  if (listen < 0) return nullptr;
  if (listen) {
    barrier().add_listener();
  } else {
    barrier().remove_listener();
  }
  Py_RETURN_NONE;
}

PyObject* py_hand_back_consume(PyObject*, PyObject*) {
  barrier().consume_listener_fd();
  Py_RETURN_NONE;
}

PyObject* py_hand_back_is_shut(PyObject*, PyObject*) { return PyBool_FromLong(barrier().is_shut()); }

PyObject* py_hand_back_shut(PyObject*, PyObject*) {
  reclaim::handback::shut_process_barrier();
  Py_RETURN_NONE;
}

PyObject* py_hand_back_stats(PyObject*, PyObject*) {
  const HandBackBarrier::Stats stats = barrier().stats();
  return Py_BuildValue("{sKsKsisisKsIsKsKsKsKsKsO}", "epoch", static_cast<unsigned long long>(stats.epoch),
                       "held", static_cast<unsigned long long>(stats.held), "counts_in_use", stats.counts_in_use,
                       "counts_used", stats.counts_used, "shared_counts",
                       static_cast<unsigned long long>(stats.shared_counts), "sleepers", stats.sleepers,
                       "futex_wakes", static_cast<unsigned long long>(stats.futex_wakes), "listener_writes",
                       static_cast<unsigned long long>(stats.listener_writes), "epoch_wakeups",
                       static_cast<unsigned long long>(stats.epoch_wakeups), "cell_wakeups",
                       static_cast<unsigned long long>(stats.cell_wakeups), "forks",
                       static_cast<unsigned long long>(barrier().forks()), "shut",
                       barrier().is_shut() ? Py_True : Py_False);
}

PyMethodDef kBarrierMethods[] = {
    {"wait_handed_back", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_wait_handed_back)),
     METH_FASTCALL | METH_KEYWORDS,
     "wait_handed_back($module, /, timeout=None, since=None)\n--\n\n"
     "Block (the GIL released) until CUDA has handed back everything attached before the call (from the\n"
     "mark `since` on)."},
    {"_checked_since", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_checked_since)),
     METH_FASTCALL,
     "_checked_since($module, function, value, /)\n--\n\n"
     "value if it is None or a mark from hand_back_mark(); else the error, naming function (private)."},
    {"hand_back_mark", py_hand_back_mark, METH_NOARGS,
     "hand_back_mark($module, /)\n--\n\n"
     "A mark: what is attached after this call counts from it (pass it as since=)."},
    {"_hand_back_request", py_hand_back_request, METH_O,
     "_hand_back_request($module, since, /)\n--\n\n"
     "(since, until): the epochs to wait for, after a switch (private: cuda_reclaim.asyncio)."},
    {"_hand_back_reached", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_hand_back_reached)),
     METH_FASTCALL,
     "_hand_back_reached($module, since, until, /)\n--\n\nTrue once nothing of those epochs is held (private)."},
    {"_hand_back_listener_fd", py_hand_back_listener_fd, METH_NOARGS,
     "_hand_back_listener_fd($module, /)\n--\n\nThe eventfd written when an epoch ends (private)."},
    {"_hand_back_listen", py_hand_back_listen, METH_O,
     "_hand_back_listen($module, on, /)\n--\n\nRegister (True) or unregister (False) one listener (private)."},
    {"_hand_back_consume", py_hand_back_consume, METH_NOARGS,
     "_hand_back_consume($module, /)\n--\n\nEmpty the listener eventfd (private)."},
    {"_hand_back_is_shut", py_hand_back_is_shut, METH_NOARGS,
     "_hand_back_is_shut($module, /)\n--\n\nTrue once the barrier is shut (close(), exit) (private)."},
    {"_hand_back_shut", py_hand_back_shut, METH_NOARGS,
     "_hand_back_shut($module, /)\n--\n\nEnd every wait with False, now and later (private: exit)."},
    {"_hand_back_stats", py_hand_back_stats, METH_NOARGS,
     "_hand_back_stats($module, /)\n--\n\nThe barrier's tickets, epoch counts, epochs and wake-ups (private)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

Attachment* new_attachment(const char* kind, PyObject* objects) {
  auto* attachment = PyObject_GC_New(Attachment, g_attachment_type);
  if (attachment == nullptr) return nullptr;
  new (&attachment->record) graph::HandBackRecord();
  attachment->record.payload = attachment;
  Py_XINCREF(objects);
  attachment->objects = objects;
  attachment->kind = kind;
  attachment->attached = false;
  attachment->forks = barrier().forks();
  PyObject_GC_Track(attachment);
  return attachment;
}

Py_ssize_t close_after_the_shut() {
  reclaim::handback::shut_process_barrier();
  return close_safely();
}

int add_attachment_functions(PyObject* module) {
  // The process barrier and its fork handler exist from module init, before anything is attached.
  (void)barrier();
  g_attachment_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kAttachmentSpec));
  if (g_attachment_type == nullptr) return -1;
  if (PyModule_AddObjectRef(module, "Attachment", reinterpret_cast<PyObject*>(g_attachment_type)) < 0) return -1;
  return PyModule_AddFunctions(module, kBarrierMethods);
}

}  // namespace reclaim::bindings
