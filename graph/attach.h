// graph/attach.h — the steps keep_alive.cc and host_calls.cc share: attaching a payload to CUDA (and
// withdrawing it when a retain fails), and a trampoline's push. Not part of graph/'s interface: only
// graph/'s own sources include it.
//
// Every function here may run on any thread, including CUDA's, during exit(); none touches Python, takes a
// lock or throws, and none allocates (the first push through a producer lane aside, cleanup/).

#pragma once

#include <cuda.h>

#include <cstdint>

#include "graph/driver.h"
#include "graph/keep_alive.h"

namespace reclaim {
namespace graph {
namespace internal {

// --- attach.cc ----------------------------------------------------------------------------------------

// Pushes `payload` and, when the queue took it, counts it by source with `count_source`; returns the
// RECLAIM_* status. The push and its count are one trampoline push in flight (counters.h), so that a
// stats read can tell whether pushes by source and the queue's handed_over agree.
// Through reclaim_push(), not a queue of its own: cleanup/ hands its queue only to the owner, and a copy
// of cleanup/ that adopted another copy's table must push into the queue that is drained.
// Trampolines; any thread; never blocks.
int push_payload(void* payload, void (*count_source)() noexcept) noexcept;

// True for a push the queue took (queued, or counted as leaked because it was closed).
bool accepted(int status) noexcept;

// A destructor's first step, given the (tagged) pointer CUDA passed: true if `payload` was being withdrawn
// after a failed retain (keep_alive.h); the entry is then marked consumed, and the destructor must neither
// push nor count the payload as handed back. One acquire load when no withdrawal is in progress.
// Any thread; never blocks.
bool consume_withdrawn(void* payload) noexcept;

// Releases our reference to `object` (whose destructor would hand `payload` back) after a failed retain,
// and says who owns `payload` now (kReturned or kInFlight). The attaching thread; blocks only as long as
// cuUserObjectRelease does.
AttachOutcome withdraw_and_release(const DriverApi& api, CUuserObject object, void* payload) noexcept;

// As retain_on_graph, with the user object's destructor given: keep_alive's pushes the payload; a host
// node's drops the node's native reference. Counts the attach (counters.h); the destructor gets `payload`
// tagged with its ticket (counters.h's tag(); a payload with its top 16 bits set is refused). The attaching
// thread; blocks only as long as the driver calls do.
AttachResult retain_with_destructor(const DriverApi& api, CUgraph graph, void* payload,
                                    CUhostFn destructor) noexcept;

// cuLaunchHostFunc(stream, function, data tagged with its ticket), refused (kReturned,
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, `capturing_message`) on a capturing stream, and data with its
// top 16 bits set refused as retain_with_destructor refuses it. Counts the attach.
// The attaching thread; blocks only as long as the driver calls do.
AttachResult launch_unless_capturing(const DriverApi& api, CUstream stream, CUhostFn function, void* data,
                                     const char* capturing_message) noexcept;

// The graph `stream` is capturing into, with the capture status (the newest cuStreamGetCaptureInfo the
// driver has). Blocks only as long as the driver call does.
CUresult capture_info(const DriverApi& api, CUstream stream, CUstreamCaptureStatus* status,
                      CUgraph* graph) noexcept;

// A failed attach's result. Never blocks.
AttachResult failed(AttachOutcome outcome, CUresult error, const char* call) noexcept;

// --- keep_alive.cc: the source counts of keep_alive.h's SourceCounters, for host_calls.cc too -----------

// Records pthread_self() as the thread that last ran a user-object destructor / a host function.
// Trampolines; any thread; never blocks (relaxed stores).
void note_destructor_thread() noexcept;
void note_host_function_thread() noexcept;
// One destructor that found its payload withdrawn; one push by a user object's destructor.
// Trampolines; any thread; never blocks (relaxed increments).
void note_withdrawn() noexcept;
void note_user_object_push() noexcept;

}  // namespace internal
}  // namespace graph
}  // namespace reclaim
