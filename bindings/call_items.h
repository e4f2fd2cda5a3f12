// bindings/call_items.h — the Python objects that carry calls through CUDA and the queue, shared by the
// files that make them (host_call_functions.cc), order them by stream (stream_orders.cc), and run or
// cancel them (host_calls.cc, host_nodes.cc). bindings/host_calls.h is what the rest of the module sees.
//
// Everything here is touched with the GIL only (the module declares Py_MOD_GIL_USED and is main-interpreter
// only), except the graph/ records embedded in the objects, which CUDA's threads write through graph/'s
// trampolines before they push. No standard containers: the bookkeeping is intrusive lists and one
// fixed table, so that nothing here needs libstdc++'s allocation-failure machinery.

#pragma once

#include <Python.h>

#include <cstdint>

#include "graph/host_calls.h"

namespace reclaim::bindings {

struct HostCall;

// The host calls of one stream handle, in the order CUDA ran them. Created by the first launch on the
// handle; freed when no host call refers to it any more (the trampolines of the calls that refer to it
// read `counters`, so it lives at least until each of them was dequeued).
struct StreamOrder {
  reclaim::graph::CallOrder counters;  // written by the trampolines (atomics)
  std::uintptr_t stream = 0;           // the key in the table of orders
  std::uint64_t next = 0;              // the place of the call to run next
  bool busy = false;                   // a call of this stream is running (possibly re-entered)
  bool in_table = false;               // the table's entry for `stream` (not once forgotten in a fork child)
  StreamOrder* next_in_bucket = nullptr;
  // Calls dequeued before their turn, sorted by place; each holds the queue's reference.
  HostCall* parked_first = nullptr;
  HostCall* parked_last = nullptr;
  Py_ssize_t references = 0;  // host calls pointing here, plus running loops
};

// What a _HostItem carries. The release action (bindings/release_loop.h) tells the items it runs from plain
// references by one compare of their type, so host calls and host nodes are one private type,
// cuda_reclaim._reclaim._HostItem, and this field, right after the object header in both layouts, tells
// them apart.
enum class HostItemKind : std::uint8_t {
  kCall = 1,  // a HostCall
  kNode = 2,  // a HostNode
};

enum class CallState : int {
  kWaiting = 0,  // launched: CUDA holds it, or the queue does
  kParked = 1,   // dequeued before a call of its stream that comes first: on its order's parked list
  kDone = 2,     // ran, or was cancelled; fields cleared
};

// A _HostItem of kind kCall: one launch_host_func or launch_host_func_ordered call (or a prepared one,
// _prepare_host_call). The record is graph/'s part (the trampoline writes its place, and an ordered one its
// gate); everything else is touched with the GIL only.
struct HostCall {
  PyObject_HEAD
  HostItemKind kind;  // kCall
  reclaim::graph::HostCallRecord record;
  StreamOrder* order;
  CallState state;
  PyObject* fn;
  PyObject* args;      // tuple
  PyObject* kwargs;    // dict or null
  PyObject* future;    // concurrent.futures.Future
  HostCall* previous;  // the outstanding list: every call not yet kDone
  HostCall* next;
  HostCall* parked_previous;  // the order's parked list, while kParked
  HostCall* parked_next;
  // A prepared call (_prepare_host_call) is on the list of live pairs from its preparation until a drain
  // takes its item from the queue, it is withdrawn, or it is freed: _withdraw_host_call finds a pair there
  // by address, never reading memory that user data names.
  bool prepared;
  HostCall* prepared_previous;
  HostCall* prepared_next;
  // While a drain runs the call (host_calls.cc's running list): the thread that runs it
  // (PyThread_get_thread_ident) and the references the call gave up to it, on that drain's stack (a
  // CallParts), so that a fork child whose copy of that thread never returns can end the future.
  unsigned long runner;
  void* running_parts;
};

// A _HostItem of kind kNode: one add_host_node node. One Python reference stands for every native
// one (graph/host_calls.h's HostNodeRecord::native_refs) and is dropped by whoever takes that count to zero.
struct HostNode {
  PyObject_HEAD
  HostItemKind kind;  // kNode
  reclaim::graph::HostNodeRecord record;
  PyObject* fn;
  PyObject* args;        // tuple
  PyObject* kwargs;      // dict or null
  PyObject* attachment;  // the node's Attachment (bindings/attachments.h): record.done points into it
  bool ordered;          // add_host_node_ordered: its firings wait on gates (graph/host_calls.h)
  HostNode* previous_ordered;  // the list of ordered nodes alive (host_nodes.cc), while `ordered`
  HostNode* next_ordered;
};

// Calls that ran (host calls and host-node firings; an exception counts: the call ran), host calls that
// never will (cancelled through their future before they ran, at close, in a fork child, or refused because
// the queue was already closed), host calls not yet run or cancelled, and host calls that arrived before
// their turn (diagnostics, tests). Only grow, except `outstanding`. Read and written with the GIL.
struct CallCounters {
  std::uint64_t run = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t outstanding = 0;
  std::uint64_t parked = 0;
};
extern CallCounters g_call_counters;

// --- stream_orders.cc: the table of orders and its parked calls; prepared pairs; stranded calls ---------

// The order of `stream`, created if needed, with one more reference (the caller's). Null with MemoryError
// set if it could not be allocated. Requires the GIL.
StreamOrder* acquire_stream_order(std::uintptr_t stream);

// Drops one reference to `order`; the last one takes it out of the table and frees it. Requires the GIL.
void release_stream_order(StreamOrder* order);

// Puts `call` (dequeued, not its turn yet) on its order's parked list, in place order; the list holds the
// queue's reference from now on. Requires the GIL.
void park(HostCall* call);

// Takes `call` off its order's parked list (it is there). Requires the GIL.
void unpark(HostCall* call);

// Takes the parked call of `order` whose turn has come, or null if none: the call whose place is next or,
// once a push of the stream was rejected (that place never arrives), the first parked one. Requires the GIL.
HostCall* take_next_parked(StreamOrder* order);

// Fork child: ends the calls (linked through `next`) that a thread of the parent other than the forking
// one was running at the fork (host_calls.cc's forget_calls_after_fork collects them). Single-threaded,
// GIL held; done-callbacks may re-enter.
void end_stranded_calls(HostCall* stranded);

// The list of live prepared pairs (HostCall::prepared): `call` (just made, its pair counted by graph/'s
// prepare_host_call) goes on it; unlink_prepared takes a call off it (nothing if it is not on it); and
// find_prepared returns the call on it whose pair `user_data` is exactly (address and generation), or
// null. find_prepared reads only the calls on the list. Require the GIL.
void link_prepared(HostCall* call);
void unlink_prepared(HostCall* call);
HostCall* find_prepared(std::uintptr_t user_data);

// Empties the table: later launches start with fresh orders, while calls that CUDA still holds keep theirs
// until they are gone. Fork child, single-threaded, GIL held.
void forget_stream_orders();

// --- host_call_functions.cc: the _HostItem type ----------------------------------------------------------

// Creates the _HostItem type, of host calls and host nodes (once per process; never released). Returns
// false with an exception set. Requires the GIL.
bool ready_host_item_type();

// A new, uninitialized _HostItem of `kind` (a new reference; its size fits either kind): the caller fills
// the rest of the layout before anything can release it. Null with MemoryError set. Requires the GIL,
// after ready_host_item_type.
PyObject* new_host_item(HostItemKind kind);

// Whether `item` (borrowed) is a _HostItem of kind kCall / kNode (false before ready_host_item_type).
// Requires the GIL.
bool is_host_call(PyObject* item);
bool is_host_node(PyObject* item);

// --- host_calls.cc: host calls ----------------------------------------------------------------------------

// The references a call still holds, taken out of it so that a re-entrant pass never sees them twice.
// Released explicitly (release_parts), not by a destructor: CPython may end a thread that runs a call with
// a forced unwind (pthread_exit, a daemon thread taking the GIL during finalization), and nothing on that
// way out may touch Python.
struct CallParts {
  PyObject* fn = nullptr;
  PyObject* args = nullptr;
  PyObject* kwargs = nullptr;
  PyObject* future = nullptr;
};

// Drops every reference of `parts` (null ones skipped). Requires the GIL.
void release_parts(const CallParts& parts);

// future.<method>() or future.<method>(argument); a failure goes to sys.unraisablehook. Returns the
// result (new) or null. Requires the GIL.
PyObject* call_future(PyObject* future, const char* method, PyObject* argument = nullptr);

// A new host call (a new reference) of fn(*args, **kwargs) into `future`, for `order` (whose reference it
// takes over), on the outstanding list; it takes its own references to fn, args, kwargs and future. Null
// with an exception set; then the order's reference is dropped. Requires the GIL.
HostCall* new_host_call(StreamOrder* order, PyObject* fn, PyObject* args, PyObject* kwargs, PyObject* future);

// A launch that CUDA refused: nothing will run `call`, so it leaves the outstanding list and drops what
// it holds (unless a close() meanwhile cancelled it already). Its future is left as it is. Requires the GIL.
void withdraw_host_call(HostCall* call);

// future.cancel() (`future` borrowed; null does nothing), counted in calls_cancelled; a failure goes to
// sys.unraisablehook. Requires the GIL.
void cancel_future(PyObject* future);

// The release action's part for host calls: runs `call` if its turn has come (and every parked call of its
// stream that follows), parks it otherwise. Steals the queue's reference. Requires the GIL; re-entrant.
void host_call_arrived(HostCall* call);

// The part of a dying call's deallocation that is the call's own (the _HostItem type's deallocator frees
// the memory): a call not done yet is cancelled (its item was released by something other than this
// module's release action), an ordered call's gate opened, its order's reference dropped. Requires the GIL.
void clear_host_call(HostCall* call);

// Cancels every call not yet run or cancelled (close; a fork child cancels only the parent's, see
// forget_calls_after_fork). Requires the GIL; re-entrant.
void cancel_all_host_calls();

// --- host_nodes.cc: graph host nodes ----------------------------------------------------------------------

// A new host node calling fn(*args, **kwargs) at every firing (it takes its own references to fn, args and
// kwargs, which may be null), with its native count's reference taken: two references in all, the
// caller's and that one. Null with an exception set. Requires the GIL.
HostNode* new_host_node(PyObject* fn, PyObject* args, PyObject* kwargs, bool ordered);

// The release action's part for host nodes: runs one firing's call, or drops the native count's reference
// when the graph's user object went last. Steals the queue's reference. Requires the GIL; re-entrant.
void host_node_arrived(HostNode* node);

// One firing (or the final entry) that must not run: counted in calls_cancelled, the native count's
// bookkeeping done as after a run. Steals the queue's reference. Requires the GIL.
void host_node_cancelled(HostNode* node);

// Ordered nodes (add_host_node_ordered): opens the gate of every waiting firing and of every firing a running
// call took (open_every_gate, host_calls.h). With the GIL, or on the thread that finalizes the interpreter
// once no other thread can take it; never touches Python; never blocks.
void open_node_gates() noexcept;

// Fork child: the waiting firings are the parent's; their gates are dropped unopened. Single-threaded.
void forget_node_gates_after_fork() noexcept;

// The part of a dying node's deallocation that is the node's own: drops its function and arguments and
// ends its record (the _HostItem type's deallocator frees the memory). Requires the GIL.
void clear_host_node(HostNode* node);

}  // namespace reclaim::bindings
