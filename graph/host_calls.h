// graph/host_calls.h — Python calls from CUDA without Python on CUDA's thread: stream host calls
// (cuLaunchHostFunc, one call per launch) and graph host nodes (cuGraphAddHostNode, one call per firing).
//
// The trampolines here only push a payload pointer into the process-wide queue (cleanup/) and update
// atomics (the ordered ones then wait on a futex word of their own stack until the owner opens it); the
// layer above (bindings/) recognises the payload when a drain releases it and runs the call there, in a
// context it knows to be safe. The records below live inside the payload (bindings/ embeds them
// in its Python objects), so a trampoline never allocates: it writes into memory that the payload's
// reference keeps alive.

#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "graph/driver.h"
#include "graph/keep_alive.h"

namespace reclaim {
namespace graph {

// --- stream host calls ------------------------------------------------------------------------------------

// The order in which CUDA ran the host calls of one stream. The queue does not keep the order of pushes
// made through different producer records (CUDA may run one stream's host functions on several threads), so
// each call takes a place here when CUDA runs it, and the owner runs the calls of a stream by place.
// Owned by the layer above, which keeps it alive until every host call pointing to it has run its
// trampoline (or for good, if one never runs).
struct CallOrder {
  // fetch_add (relaxed) by host_call_function. CUDA runs a stream's host functions one after the other,
  // each after the previous one returned, so the places follow stream order.
  std::atomic<std::uint64_t> fired{0};
  // fetch_add (relaxed) by host_call_function when the queue rejected its push (out of memory): that place
  // never arrives, so the owner stops waiting for missing places of this stream. Published to the drain
  // that sees a later call of the stream through the queue's push/dequeue pair.
  std::atomic<std::uint64_t> rejected{0};
};

// One stream host call, embedded in its payload.
struct HostCallRecord {
  void* payload = nullptr;     // pushed into the queue when the host function runs; never null
  CallOrder* order = nullptr;  // must outlive the host function
  std::uint64_t place = 0;     // written by host_call_function before its push; read after the dequeue
  // An ordered call's gate (ordered_host_call_function): the address of the word its host function waits
  // on, on CUDA's stack, while the call is in the queue; null otherwise. Stored (release) by the host
  // function before its push; taken (exchange to null, acq_rel) by exactly one of open_host_call_gate,
  // forget_host_call_gate and the host function itself after a push the queue did not keep.
  std::atomic<std::atomic<std::uint32_t>*> gate{nullptr};
  // A prepared call's (prepare_host_call): its hand-back ticket, carried here rather than in the pointer
  // CUDA gets (whose top bits carry `generation`), and which of its host function and a withdrawal took it
  // (claim: kUnclaimed until one exchange takes it). Unused by launch_host_func.
  int ticket = -1;
  std::uint32_t generation = 0;
  std::atomic<std::uint32_t> claim{0};
};

// HostCallRecord::claim.
constexpr std::uint32_t kUnclaimed = 0;
constexpr std::uint32_t kFired = 1;      // its host function ran
constexpr std::uint32_t kWithdrawn = 2;  // withdraw_prepared_host_call took it

// cuLaunchHostFunc(stream, host_call_function, record), the native half of cuda_reclaim.launch_host_func: when
// the stream reaches this point, the record takes its place and record->payload is pushed. Refuses a capturing
// stream (kReturned, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED): captured, it would become a graph node that
// pushes the same payload at every launch. Steals the payload's reference unless the result is kReturned.
// Counts the attach (counters.h). With `ordered`, the host function is ordered_host_call_function.
// Any thread; never touches Python; blocks only as long as the driver calls do.
AttachResult launch_host_func(const DriverApi& api, CUstream stream, HostCallRecord* record,
                              bool ordered = false) noexcept;

// A host call that an integration hands CUDA itself: the pair (host_fn, user_data) to enqueue once on the
// stream with cuLaunchHostFunc (or what wraps it), user_data naming `record` with a generation in its top 16
// bits (the pair's own, from a process-wide counter, so that a stale pair whose record's memory went to a new
// pair does not name the new one). Counts the attach (counters.h) at once, as launch_host_func counts it
// before its driver call: the payload is held from here on, and its hand-back ticket is taken and stored
// in the record, ended by the host function's push or by withdraw_prepared_host_call. A record whose address
// has its top 16 bits set is refused: host_fn null, nothing counted.
// Any thread; never touches Python; never blocks; never allocates.
struct PreparedPair {
  CUhostFn host_fn;
  void* user_data;
};
PreparedPair prepare_host_call(HostCallRecord* record, bool ordered) noexcept;

// The record address `user_data` of a prepared pair names, and whether `user_data` is exactly the pair of
// `record` (its address and generation); neither reads the memory user_data names. Never blocks.
const void* prepared_record_address(std::uintptr_t user_data) noexcept;
bool is_prepared_pair(const HostCallRecord* record, std::uintptr_t user_data) noexcept;

// Takes a prepared call back from its pair before CUDA ran its host function: true if this call took the
// claim (the host function has not run; if CUDA got the pair anyway, its host function will find the
// claim taken and do nothing, provided the record's memory is still there: a user error), counting the
// payload as handed back and ending its ticket. False if the host function took it first (it ran, or
// runs now) or it was withdrawn already. Any thread; never touches Python; never blocks.
bool withdraw_prepared_host_call(HostCallRecord* record) noexcept;

// The CUhostFns of a prepared pair: as host_call_function / ordered_host_call_function, with the ticket
// read from the record, once the firing took the claim; a firing whose pair is stale (another generation) or
// whose claim is taken (withdrawn, or a second firing) does nothing.
// CUDA's thread; never touches Python; the ordered one blocks as ordered_host_call_function.
void prepared_host_call_function(void* data) noexcept;
void prepared_ordered_host_call_function(void* data) noexcept;

// The CUhostFn (public so that tests can fire it as CUDA would): takes a place, pushes the payload, counts.
// Any thread; never touches Python; never blocks.
void host_call_function(void* record) noexcept;

// The CUhostFn of an ordered call (cuda_reclaim.launch_host_func_ordered): as host_call_function, and then,
// when the queue kept the push, it waits until the owner opens the call's gate (open_host_call_gate), so
// that the stream's later work, and everything waiting for the stream, sees what the call did.
//
// The gate is an atomic word on this function's own stack: its address goes into record->gate before the
// push, and the wait is a futex wait on it with no timeout (no Python, no lock, no polling), repeated until
// the word reads 1, so a spurious wake-up only waits again. The opener stores 1 (release) and then wakes the
// address; by the time that wake-up happens this function may have seen the 1, returned and left the word's
// stack frame: a FUTEX_WAKE on an address nobody waits on, or on a later frame's futex word there, wakes
// nobody or wakes a waiter that re-checks its own word, and writes nothing, so it is harmless. Only the one
// store of 1 writes to the word, and it happens before this function can return.
// A push the queue did not keep (closed: leaked on purpose and counted; rejected: out of memory) does not
// wait: the function takes its gate back, or, if an opener took it first, waits for that opener's store.
// While it waits, CUDA's thread runs nothing else: every other host function of the context waits too.
// CUDA's thread (or a test's, as CUDA would); never touches Python; blocks until the gate opens.
void ordered_host_call_function(void* record) noexcept;

// The owner, once an ordered call ran (after fn returned or raised) or will never run (cancelled, its item
// released unrun, closed): opens its gate if its host function waits on one. Reads and clears record->gate
// in one exchange, so a gate opens once; the caller must still hold the payload (the record stays valid).
// True if a gate was opened. Any thread; never touches Python; never blocks (one store, one FUTEX_WAKE).
bool open_host_call_gate(HostCallRecord* record) noexcept;

// A fork child: the waiting host function is the parent's (no thread of this process waits on the word,
// and the word's memory may become a stack of this process), so the gate is dropped without a store.
// Any thread; never touches Python; never blocks.
void forget_host_call_gate(HostCallRecord* record) noexcept;

// --- graph host nodes -------------------------------------------------------------------------------------

// One firing of an ordered host node that waits for a call of the node to run: an atomic word on the firing's
// own stack (0 closed, 1 open) and the firing below it on the node's list.
struct FiringGate {
  std::atomic<std::uint32_t> word{0};
  FiringGate* next = nullptr;
};

// One host node's payload, embedded in it. The node fires once per launch of every executable graph made
// from the graph; each firing pushes the same payload pointer, so the payload's lifetime is a native count
// rather than Python references (no Python refcount changes on CUDA's thread).
struct HostNodeRecord {
  void* payload = nullptr;  // pushed once per firing, and once more if the user object goes last
  // 1 for the graph's user object + 1 per firing pushed and not yet run. fetch_add (relaxed) by a firing
  // (the user object's reference keeps it above zero meanwhile); fetch_sub (acq_rel) by the owner after a
  // call ran, by a firing whose push the queue rejected, and by the user object's destructor. Whoever
  // takes it to zero releases the payload: the owner at once, the destructor by pushing it one last time.
  std::atomic<std::uint64_t> native_refs{1};
  // Optional: set to 1 by host_node_destructor once the graph handed the node back (its last touch of
  // anything the owner gave it). The owner keeps the cell's memory alive until it reads 1 there, which
  // may be after the record is gone (bindings: in the node's Attachment, which waits for it on dealloc).
  std::atomic<std::uint32_t>* done = nullptr;
  // An ordered node's waiting firings (ordered_host_node_function), newest first: pushed (release CAS) by
  // firings, taken whole (take_firing_gates) by the owner or by a firing whose push the queue did not keep.
  std::atomic<FiringGate*> gates{nullptr};
};

struct HostNodeResult {
  // How the payload was attached to the graph (a user object, as keep_alive): kAttached also when only
  // the node could not be added, since the payload then stays with the graph until CUDA destroys it.
  AttachResult attach;
  CUgraphNode node = nullptr;            // the new node; null when it was not added
  CUresult node_error = CUDA_SUCCESS;    // cuGraphAddHostNode's result, when it was called
};

// Retains `record` on `graph` as a user object whose destructor is host_node_destructor (so the payload
// lives as long as the graph and everything made from it), then adds a host node calling
// host_node_function(record) after `dependencies`. Steals the payload's reference unless the attach result
// is kReturned. A node that cannot be added after a successful retain leaves the payload attached.
// Any thread; never touches Python; blocks only as long as the driver calls do.
HostNodeResult add_host_node(const DriverApi& api, CUgraph graph, const CUgraphNode* dependencies,
                             std::size_t dependency_count, HostNodeRecord* record, bool ordered = false) noexcept;

// The host node's CUhostFn: one more native reference, one push of the payload.
// Any thread; never touches Python; never blocks.
void host_node_function(void* record) noexcept;

// The CUhostFn of an ordered host node (add_host_node with `ordered`): as host_node_function, with a gate on
// this firing's stack pushed onto record->gates before the push of the payload; then it waits (a futex wait,
// no timeout, looping on the word) until the owner opens it. The owner takes the whole list before it runs
// a firing's call and opens what it took once the call returned, so a firing goes on once a call of the node
// that began after the firing pushed its gate has returned (with several firings in flight, not necessarily
// the call of this firing's own entry: the node's calls are all the same call). A push the queue did not
// keep (closed; rejected) waits for no call: the firing takes the whole list and opens it, its own gate and
// the gates of the node's other waiting firings. The opener reads a gate's `next` before it stores 1, after
// which the gate's frame may be gone; a FUTEX_WAKE there writes nothing (as for ordered_host_call_function).
// While it waits, CUDA's thread runs nothing else.
// CUDA's thread; never touches Python; blocks until its gate opens.
void ordered_host_node_function(void* record) noexcept;

// The owner: every gate on record->gates, taken in one exchange (null: none). Open them with
// open_firing_gates once the call they wait for returned, or forget them (a fork child: they are the
// parent's). Any thread; never touches Python; never blocks.
FiringGate* take_firing_gates(HostNodeRecord* record) noexcept;

// Opens every gate of a list take_firing_gates returned. Any thread; never touches Python; never blocks.
void open_firing_gates(FiringGate* gates) noexcept;

// The user object's destructor: drops the graph's native reference; pushes the payload one last time if
// no firing is left to run.
// Any thread; never touches Python; never blocks.
void host_node_destructor(void* record) noexcept;

// For the owner, when a drain releases a host node's payload: true if this entry is the final one pushed
// by the destructor (no native reference left: release the payload), false if it is a firing's call.
// Any thread; never touches Python; never blocks.
bool host_node_entry_is_final(const HostNodeRecord* record) noexcept;

// For the owner, once it is done with one entry a drain took: a firing whose call ran or was cancelled
// (drops that firing's native reference), or the final entry (nothing left to drop). True when no native
// reference is left, so the owner releases the payload now.
// Any thread; never touches Python; never blocks.
bool host_node_entry_done(HostNodeRecord* record) noexcept;

}  // namespace graph
}  // namespace reclaim
