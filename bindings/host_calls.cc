// bindings/host_calls.cc — host calls from launch to end (see host_calls.h and call_items.h): the
// outstanding list, running a call into its future in stream order, cancelling, the _HostItem type (of
// host calls and host nodes), and the release action that tells call items from plain references.
//
// Nothing here runs on CUDA's threads: those only run graph/'s trampolines, which write the record embedded
// in a call and push it.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/host_calls.h"

#include <algorithm>
#include <cstddef>
#include <new>

#include "bindings/call_items.h"
#include "bindings/drain.h"

namespace reclaim::bindings {

CallCounters g_call_counters;

namespace {

HostCall* g_outstanding = nullptr;  // head of the outstanding list
// Fork child, while forget_calls_after_fork cancels them: the parent's outstanding calls, moved off the
// outstanding list, so that a call launched meanwhile (by a done-callback of one of them) stays the
// child's own. Each call is on one of the two lists until it is done; both count as outstanding.
HostCall* g_parents_calls = nullptr;

// Calls that a drain is running now (fn has not returned yet), linked through previous/next (free once a
// call is off the outstanding list): the gates of ordered ones open when fn returns, or at the end of an exit
// that never returns to them (open_every_gate), and are forgotten in a fork child; in a fork child, the
// futures of the calls that another thread of the parent was running end with an exception
// (forget_calls_after_fork).
HostCall* g_running = nullptr;

void link_running(HostCall* call) {
  call->previous = nullptr;
  call->next = g_running;
  if (g_running != nullptr) g_running->previous = call;
  g_running = call;
}

void unlink_running(HostCall* call) {
  if (call->previous != nullptr) {
    call->previous->next = call->next;
  } else if (g_running == call) {
    g_running = call->next;
  } else {
    return;  // not linked (a fork child forgot it)
  }
  if (call->next != nullptr) call->next->previous = call->previous;
  call->previous = call->next = nullptr;
}

// Applies `step` to the record of every call on the list whose head is `head`.
void for_each_record(HostCall* head, void (*step)(reclaim::graph::HostCallRecord*)) {
  for (HostCall* call = head; call != nullptr; call = call->next) step(&call->record);
}

void link(HostCall* call) {
  call->previous = nullptr;
  call->next = g_outstanding;
  if (g_outstanding != nullptr) g_outstanding->previous = call;
  g_outstanding = call;
  ++g_call_counters.outstanding;
}

void unlink(HostCall* call) {
  if (call->previous != nullptr) {
    call->previous->next = call->next;
  } else if (g_outstanding == call) {
    g_outstanding = call->next;
  } else if (g_parents_calls == call) {
    g_parents_calls = call->next;
  } else {
    return;  // not linked
  }
  if (call->next != nullptr) call->next->previous = call->previous;
  call->previous = call->next = nullptr;
  --g_call_counters.outstanding;
}

// Cancels the future of `call` (just finished: its parts taken), then opens its gate if its host function
// waits: the future is done, and its done-callbacks ran, before CUDA's thread goes on, as after a run. While
// the callbacks run, the call is on the running list (a fork from one forgets its gate; an exit that never
// returns to it opens it).
void cancel_then_open(HostCall* call, PyObject* future) {
  const bool gated = call->record.gate.load(std::memory_order_acquire) != nullptr;
  if (gated) link_running(call);
  cancel_future(future);
  if (gated) {
    unlink_running(call);
    (void)reclaim::graph::open_host_call_gate(&call->record);
  }
}

// Marks `call` done and moves its references into `parts`.
void finish(HostCall* call, CallParts* parts) {
  unlink(call);
  call->state = CallState::kDone;
  parts->fn = call->fn;
  parts->args = call->args;
  parts->kwargs = call->kwargs;
  parts->future = call->future;
  call->fn = call->args = call->kwargs = call->future = nullptr;
}

// fn(*args, **kwargs) into `future`.
void call_into_future(const CallParts& parts) {
  PyObject* result = PyObject_Call(parts.fn, parts.args, parts.kwargs);
  if (result != nullptr) {
    Py_XDECREF(call_future(parts.future, "set_result", result));
    Py_DECREF(result);
    return;
  }
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value != nullptr && traceback != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(call_future(parts.future, "set_exception", value != nullptr ? value : Py_None));
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
}

// Runs one host call whose turn it is: fn(*args, **kwargs) into its future. The caller holds a reference.
// An ordered call's gate opens once fn returned (or raised, or the future was cancelled), before the parts
// are released: whatever those releases run comes after the stream's later work may start.
void run_call(HostCall* call) {
  CallParts parts;
  finish(call, &parts);
  // Dequeued: the host function stored its gate before the push that this drain's dequeue follows.
  const bool gated = call->record.gate.load(std::memory_order_acquire) != nullptr;
  call->runner = PyThread_get_thread_ident();
  call->running_parts = &parts;
  link_running(call);
  PyObject* running = call_future(parts.future, "set_running_or_notify_cancel");
  const bool run = running == Py_True;
  Py_XDECREF(running);
  if (run) {
    ++g_call_counters.run;
    call_into_future(parts);
  } else {
    ++g_call_counters.cancelled;  // cancelled through its future before its turn
  }
  unlink_running(call);
  call->running_parts = nullptr;
  if (gated) (void)reclaim::graph::open_host_call_gate(&call->record);  // null in a fork child that fn forked
  release_parts(parts);
}

// Runs `call` (its turn has come; the caller passes the queue's reference) and then every parked call of
// its stream whose turn follows.
void run_in_order(StreamOrder* order, HostCall* call) {
  ++order->references;  // the calls released below may be the last ones pointing here
  order->busy = true;
  while (call != nullptr) {
    if (call->record.place >= order->next) order->next = call->record.place + 1;
    run_call(call);
    Py_DECREF(call);
    call = take_next_parked(order);
  }
  order->busy = false;
  release_stream_order(order);
}

}  // namespace

void release_parts(const CallParts& parts) {
  Py_XDECREF(parts.fn);
  Py_XDECREF(parts.args);
  Py_XDECREF(parts.kwargs);
  Py_XDECREF(parts.future);
}

PyObject* call_future(PyObject* future, const char* method, PyObject* argument) {
  PyObject* name = PyUnicode_InternFromString(method);
  PyObject* result = nullptr;
  if (name != nullptr) {
    result = PyObject_CallMethodObjArgs(future, name, argument, nullptr);  // argument null: no arguments
    Py_DECREF(name);
  }
  if (result == nullptr) PyErr_WriteUnraisable(future);
  return result;
}

void clear_host_call(HostCall* call) {
  unlink_prepared(call);
  if (call->state != CallState::kDone) {
    // Released by something other than this module's release action (a drain through another copy's
    // table with its own action): it never runs, so say so through its future.
    CallParts parts;
    finish(call, &parts);
    cancel_then_open(call, parts.future);
    release_parts(parts);
  }
  // A gate is closed only while its call is not done, and the last reference outlives every opener.
  (void)reclaim::graph::open_host_call_gate(&call->record);
  if (call->order != nullptr) release_stream_order(call->order);
}

HostCall* new_host_call(StreamOrder* order, PyObject* fn, PyObject* args, PyObject* kwargs, PyObject* future) {
  auto* call = reinterpret_cast<HostCall*>(new_host_item(HostItemKind::kCall));
  if (call == nullptr) {
    release_stream_order(order);
    return nullptr;
  }
  new (&call->record) reclaim::graph::HostCallRecord();
  Py_INCREF(fn);
  Py_INCREF(args);
  Py_XINCREF(kwargs);
  Py_INCREF(future);
  call->fn = fn;
  call->args = args;
  call->kwargs = kwargs;
  call->future = future;
  call->order = order;
  call->record.payload = call;
  call->record.order = &order->counters;
  call->state = CallState::kWaiting;
  call->parked_previous = call->parked_next = nullptr;
  call->prepared = false;
  call->prepared_previous = call->prepared_next = nullptr;
  call->runner = 0;
  call->running_parts = nullptr;
  link(call);
  return call;
}

void withdraw_host_call(HostCall* call) {
  if (call->state == CallState::kDone) return;  // a close() meanwhile cancelled it
  CallParts parts;
  finish(call, &parts);
  release_parts(parts);
}

void cancel_future(PyObject* future) {
  if (future == nullptr) return;
  PyObject* result = call_future(future, "cancel");
  Py_XDECREF(result);
  ++g_call_counters.cancelled;
}

namespace {

// A call that arrived (the queue's reference) and must not run: its future is cancelled, its parts
// released, and the queue's reference dropped.
void cancel_arrived_call(HostCall* call) {
  unlink_prepared(call);  // its host function fired: the pair is no longer live
  if (call->state != CallState::kDone) {
    CallParts parts;
    finish(call, &parts);
    cancel_then_open(call, parts.future);
    release_parts(parts);
  }
  Py_DECREF(call);
}

}  // namespace

void host_call_arrived(HostCall* call) {
  unlink_prepared(call);  // its host function fired: the pair is no longer live
  if (call->state == CallState::kDone) {  // cancelled by a close() that ran while its batch was dequeued
    Py_DECREF(call);
    return;
  }
  if (calls_stopped()) {  // taken by a drain that a close() interrupted, or arriving during its cancellation
    cancel_arrived_call(call);
    return;
  }
  StreamOrder* order = call->order;
  const bool gap =
      call->record.place > order->next && order->counters.rejected.load(std::memory_order_relaxed) == 0;
  if (order->busy || gap) {
    // Its turn comes after a call that is running (this drain was re-entered, or another thread's drain
    // is running it) or that has not been dequeued yet: it runs right after that one.
    call->state = CallState::kParked;
    park(call);
    ++g_call_counters.parked;
    return;
  }
  run_in_order(order, call);
}

namespace {

// Cancels every call on the list whose head is `*head`. Done-callbacks may re-enter (launch, close, fork),
// so the head is read again after each call.
void cancel_list(HostCall* const* head) {
  while (HostCall* call = *head) {
    const bool parked = call->state == CallState::kParked;
    if (parked) unpark(call);
    CallParts parts;
    finish(call, &parts);
    // No gate for a call CUDA has not run yet (its host function finds the queue closed and does not
    // wait), nor in a fork child (forgotten).
    cancel_then_open(call, parts.future);  // may run done-callbacks, which may re-enter: the list is re-read
    release_parts(parts);
    // A parked call was the queue's reference, now ours; a waiting one stays CUDA's (or the queue's, when
    // a drain on another thread dequeued it and has yet to release it: host_call_arrived then drops it).
    if (parked) Py_DECREF(call);
  }
}

}  // namespace

void cancel_all_host_calls() {
  cancel_list(&g_parents_calls);  // a close() from a done-callback while a fork child cancels them
  cancel_list(&g_outstanding);
}

// --- host_calls.h -----------------------------------------------------------------------------------------

void release_queued_item(PyObject* item) {
  if (is_host_call(item)) {
    host_call_arrived(reinterpret_cast<HostCall*>(item));
  } else if (is_host_node(item)) {
    host_node_arrived(reinterpret_cast<HostNode*>(item));
  } else {
    Py_DECREF(item);
  }
}

void cancel_outstanding_calls() { cancel_all_host_calls(); }

void open_every_gate() noexcept {
  const auto open = [](reclaim::graph::HostCallRecord* record) { (void)reclaim::graph::open_host_call_gate(record); };
  for_each_record(g_outstanding, open);
  for_each_record(g_parents_calls, open);
  for_each_record(g_running, open);
  open_node_gates();
}

void forget_calls_after_fork() {
  // The gates are the parent's: CUDA's thread that waits on one is not in this process.
  for_each_record(g_outstanding, reclaim::graph::forget_host_call_gate);
  for_each_record(g_parents_calls, reclaim::graph::forget_host_call_gate);
  for_each_record(g_running, reclaim::graph::forget_host_call_gate);
  // Running calls leave the list. Those of the forking thread go on as the child's (their fn returns here);
  // those of another thread never return here (that thread is the parent's): they are kept, linked through
  // `next`, for their futures to end below.
  const unsigned long me = PyThread_get_thread_ident();
  HostCall* stranded = nullptr;
  while (HostCall* call = g_running) {
    unlink_running(call);
    if (call->runner != me && call->running_parts != nullptr) {
      call->next = stranded;
      stranded = call;
    }
  }
  forget_node_gates_after_fork();
  // First: a launch that a done-callback makes below is the child's own and starts a fresh order (an order
  // of the parent's would wait for places that the child never gets). Calls CUDA still holds keep theirs
  // until they are gone.
  forget_stream_orders();
  // Exactly the calls outstanding now are the parent's (with what an ancestor had left to cancel, when a
  // done-callback of its cancellation forked): they move to their own list, which alone is cancelled.
  if (HostCall* first = g_outstanding) {
    HostCall* last = first;
    while (last->next != nullptr) last = last->next;
    last->next = g_parents_calls;
    if (g_parents_calls != nullptr) g_parents_calls->previous = last;
    g_parents_calls = first;
    g_outstanding = nullptr;
  }
  cancel_list(&g_parents_calls);
  end_stranded_calls(stranded);
}

}  // namespace reclaim::bindings
