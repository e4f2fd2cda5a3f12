// graph/internal.h — helpers shared by graph/'s trampolines and attach functions (keep_alive.cc,
// host_calls.cc). Not part of graph/'s interface: only graph/'s own sources include it.
//
// Every function here may run on any thread, including CUDA's, during exit(); none touches Python, takes a
// lock, allocates or throws.

#pragma once

#include <cuda.h>

#include <cstdint>

#include "graph/driver.h"
#include "graph/keep_alive.h"

namespace reclaim {
namespace graph {
namespace internal {

// Pushes `payload` into the process-wide queue through cleanup/'s C entry point (which follows an
// adopted queue) and, when the queue took it, counts it by source with `count_source`; returns the
// RECLAIM_* status. The push and its count are one trampoline push in flight (counters.h), so that a
// stats read can tell whether pushes by source and the queue's handed_over agree.
int push_payload(void* payload, void (*count_source)() noexcept) noexcept;

// True for a push the queue took (queued, or counted as leaked because it was closed).
bool accepted(int status) noexcept;

// True if `payload` was being withdrawn after a failed retain (keep_alive.h): the entry is marked consumed
// and the destructor that asks must neither push nor count the payload as handed back.
bool consume_withdrawn(void* payload) noexcept;

// Releases our reference to `object` (whose destructor would hand `payload` back) after a failed retain,
// and says who owns `payload` now (kReturned or kInFlight). Runs on the caller's thread.
Handover withdraw_and_release(const DriverApi& api, CUuserObject object, void* payload) noexcept;

// As retain_on_graph, with the user object's destructor given: keep_alive's pushes the payload; a host
// node's drops the node's native reference. Counts the attach (counters.h).
AttachResult retain_with_destructor(const DriverApi& api, CUgraph graph, void* payload,
                                    CUhostFn destructor) noexcept;

// cuLaunchHostFunc(stream, function, data), refused (kReturned, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
// `capturing_message`) on a capturing stream. Counts the attach.
AttachResult launch_unless_capturing(const DriverApi& api, CUstream stream, CUhostFn function, void* data,
                                     const char* capturing_message) noexcept;

// The graph `stream` is capturing into, with the capture status.
CUresult capture_info(const DriverApi& api, CUstream stream, CUstreamCaptureStatus* status,
                      CUgraph* graph) noexcept;

AttachResult failed(Handover handover, CUresult error, const char* call) noexcept;

// pthread_self(), as an integer.
std::uintptr_t this_thread() noexcept;

// Diagnostics and source counts of keep_alive.h's SourceCounters, for the trampolines in other files.
void note_destructor_thread() noexcept;
void note_host_function_thread() noexcept;
void note_withdrawn() noexcept;
void note_user_object_push() noexcept;

}  // namespace internal
}  // namespace graph
}  // namespace reclaim
