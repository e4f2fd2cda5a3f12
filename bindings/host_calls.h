// bindings/host_calls.h — Python calls that CUDA triggers, run by the drains: stream host calls
// (cuda_reclaim.launch_host_func) and graph host nodes (cuda_reclaim.add_host_node). See docs/callbacks.md.
//
// What travels through the queue is a Python object of a private type, pushed by a graph/ trampoline that
// touches nothing but atomics: a _HostItem, either a host call (one per launch; carries the function, its
// arguments and the concurrent.futures.Future) or a host node (one per node; pushed once per firing, kept
// alive by a native count). The release action of every drain (release_queued_item) tells them from plain
// references by their type (one type for both kinds: one compare per item) and runs the call there, on
// the draining thread, with the GIL.
//
// Ordering: the calls of one stream run in stream order (graph/host_calls.h's CallOrder gives each call
// its place when CUDA runs it; a call that arrives early waits in its stream's parked set).
// After close() nothing runs: what CUDA never handed back is cancelled (its future, its references).
//
// The items and their bookkeeping: call_items.h (streams' orders in stream_orders.cc, host calls in
// host_calls.cc, host nodes in host_nodes.cc, the module functions in host_call_functions.cc).

#pragma once

#include <Python.h>

#include "bindings/release_loop.h"

namespace reclaim::bindings {

// The release action for one queued item: runs a host call (or parks it until the calls before it on its
// stream have run) or a host-node call, or Py_DECREFs a plain reference. Steals the queue's reference.
// Exceptions of a call go to its future (host calls) or to sys.unraisablehook (host nodes).
// Requires an attached thread state (GIL); re-entrant (a call may drain again).
void release_queued_item(PyObject* item);

// The private type whose objects release_queued_item() runs rather than Py_DECREFs (null before
// add_host_call_functions()): a drain reads it once per batch and releases plain references inline
// (bindings/release_loop.h). Any thread; never blocks. The type never changes once created.
HostItemType host_item_type() noexcept;

// After close()'s final drain: cancels every host call not run yet (CUDA never handed it back, or it
// waits for a call that never will be): its future is cancelled, its function and arguments released;
// only the small item CUDA still points to stays (never touched again). Counted in calls_cancelled.
// Requires an attached thread state (GIL) in a live, non-finalizing interpreter; re-entrant.
void cancel_outstanding_calls();

// Opens the gate of every ordered call whose host function may still wait (graph/host_calls.h's
// ordered_host_call_function): outstanding calls and calls a drain is running. For an exit that cannot
// cancel them through Python any more (the interpreter is finalizing, or its last step): CUDA's thread goes
// on; the calls stay as they are (reported as outstanding or pending).
// With the GIL, or on the thread that finalizes the interpreter once no other thread can take it; never
// touches Python; never blocks.
void open_every_gate() noexcept;

// In a fork child: the parent runs the calls it launched; here they are cancelled (as at close) and the
// streams' orders start afresh. A call that another thread of the parent was running at the fork ran there:
// its future, if not done, ends with a RuntimeError that says so (cancelling is impossible once running),
// and the references it gave that thread are released; a call the forking thread runs goes on as the
// child's.
// Fork child, single-threaded, GIL held.
void forget_calls_after_fork();

// Adds _launch_host_func and _add_host_node to the module (after add_driver_functions: they raise its
// DriverError). Returns 0, or -1 with an exception set.
// Requires an attached thread state (GIL).
int add_host_call_functions(PyObject* module);

}  // namespace reclaim::bindings
