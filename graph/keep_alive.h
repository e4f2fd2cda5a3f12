// graph/keep_alive.h — keep a payload alive for as long as CUDA work needs it, then hand it to the
// process-wide reclaim queue (cleanup/).
//
// A payload is an opaque pointer that the caller owns one reference to (bindings/ passes a PyObject*).
// On success CUDA owns that reference: when the graph (and every clone and executable graph made from it)
// is gone, or when the stream reaches the point, one of the trampolines below runs on a CUDA thread, or
// synchronously inside the CUDA call that dropped the last reference (cuGraphDestroy, cuGraphExecDestroy,
// ...), and pushes the payload into the process-wide queue (reclaim_push). The trampolines make no CUDA or
// Python call, take no lock and never throw; they allocate nothing in steady state (the first push through
// one of the queue's producer lanes creates that lane's producer, see cleanup/reclaim_queue.h).
// Every attach and every trampoline is counted in graph/counters.h (attached_to_cuda, handed_back_by_cuda,
// held_by_cuda).
//
// Error accounting: every attach function says in its result what became of the reference, so that the
// caller can give it back at once, in its own context, exactly when it is still its own. The delicate case
// is a failing cuGraphRetainUserObject after a successful cuUserObjectCreate: the user object we own must
// be released, and that runs its destructor, which would push the payload. The payload is first put
// in a small table of withdrawn payloads that the destructor checks; if the destructor runs during the
// release (or before the caller looks again), it finds the place, marks it consumed and does not push,
// and the caller gets kReturned; if it has not run by then, the caller frees the place and gets
// kInFlight: the destructor will push the payload later, as for an attached one. kInFlight is also the
// answer when releasing our user object fails (cuUserObjectRelease): CUDA then still holds the payload.

#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "graph/driver.h"

namespace reclaim {
namespace graph {

// What became of the payload's reference.
enum class AttachOutcome : int {
  kAttached = 0,  // CUDA holds it; a trampoline will push it into the queue exactly once.
  kReturned = 1,  // Not attached (or withdrawn): the caller still owns it and must release it.
  kInFlight = 2,  // The call failed, but CUDA had taken the reference and will still push it: the caller
                  // must not touch it. Only after a failed retain whose destructor has not yet run.
};

struct AttachResult {
  AttachOutcome outcome;
  CUresult error;    // CUDA_SUCCESS when attached.
  const char* call;  // what failed, for the message ("cuGraphRetainUserObject"); null when attached.
};

// Retains `payload` on `graph` as a user object (cuUserObjectCreate(..., CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
// + cuGraphRetainUserObject(..., CU_GRAPH_USER_OBJECT_MOVE)); clones and instantiations of the graph
// retain it too. Steals the reference to `payload` unless the result is kReturned.
// Cost: two driver calls (four on the failure path).
// Any thread; never touches Python; blocks only as long as the driver calls do.
AttachResult retain_on_graph(const DriverApi& api, CUgraph graph, void* payload) noexcept;

// As retain_on_graph, on the graph that `stream` is capturing into (a stream-capture graph builder).
// Fails with kReturned (CUDA_ERROR_ILLEGAL_STATE) when the stream is not capturing.
// Any thread; never touches Python; blocks only as long as the driver calls do.
AttachResult retain_on_capture(const DriverApi& api, CUstream stream, void* payload) noexcept;

// Keeps `payload` until `stream` reaches the current point: cuLaunchHostFunc with a function that pushes
// it. Refuses a capturing stream (kReturned, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED): there the host
// function would become a graph node that runs, and pushes, at every launch.
// Steals the reference to `payload` unless the result is kReturned.
// Any thread; never touches Python; blocks only as long as the driver calls do.
AttachResult retain_until_stream(const DriverApi& api, CUstream stream, void* payload) noexcept;

// --- one attachment that its caller can wait for ---------------------------------------------------------

// A payload with a done cell, embedded in the caller's object (bindings' cuda_reclaim.Attachment): the
// trampoline pushes `payload`, counts the hand-back, then stores 1 into `done` (the queue's hand-back
// barrier, which also wakes a thread waiting for it, and ends the ticket after the store). That store is
// the trampoline's last touch of the record; the owner must keep the record's memory alive until it sees
// `done` (the pushed payload's reference usually does: the record lives in the payload).
struct HandBackRecord {
  void* payload = nullptr;  // pushed on hand-back; never null
  std::atomic<std::uint32_t> done{0};
};

// As retain_on_graph / retain_on_capture / retain_until_stream, for a record: CUDA gets the record (tagged),
// and the trampolines below push record->payload. Same ownership rules for the payload's reference.
// Any thread; never touches Python; blocks only as long as the driver calls do.
AttachResult retain_record_on_graph(const DriverApi& api, CUgraph graph, HandBackRecord* record) noexcept;
AttachResult retain_record_on_capture(const DriverApi& api, CUstream stream, HandBackRecord* record) noexcept;
AttachResult retain_record_until_stream(const DriverApi& api, CUstream stream, HandBackRecord* record) noexcept;

// The CUhostFn trampolines, public so that tests can fire them as CUDA would. Each steals `payload` and
// pushes it into the queue with reclaim_push() (unless it was withdrawn, see above), counting the push by
// source and the payload as handed back (graph/counters.h).
// Any thread; never touches Python; never blocks.
// The pointer may carry a ticket (counters.h's tag()); an untagged one ends no ticket.
void graph_user_object_destructor(void* payload) noexcept;
void stream_host_function(void* payload) noexcept;
void record_user_object_destructor(void* record) noexcept;
void record_stream_host_function(void* record) noexcept;

// Pushes the trampolines made. A push counts when the queue took the pointer (queued, or leaked because
// the queue was closed); a rejected push is counted by the queue alone.
// (Pushes by host calls and host nodes, and what CUDA still holds, are in graph/counters.h.)
struct SourceCounters {
  std::uint64_t graph_user_objects = 0;     // graph_user_object_destructor, and a host node's destructor
                                            // when it pushes the node's payload one last time
  std::uint64_t stream_host_functions = 0;  // stream_host_function
  std::uint64_t withdrawn = 0;              // destructors that found their payload withdrawn (not pushed)
  // pthread_self() of the thread that last ran each kind of trampoline (0: never ran), to see where CUDA
  // runs them: user-object destructors; host functions (keep_alive_until, host calls, host nodes).
  std::uintptr_t last_destructor_thread = 0;
  std::uintptr_t last_host_function_thread = 0;
};

// Any thread; never touches Python; never blocks.
SourceCounters source_counters() noexcept;

}  // namespace graph
}  // namespace reclaim
