// graph/keep_alive.cc — user objects and host functions whose destructors push into cleanup/.

#include "graph/keep_alive.h"

#include <pthread.h>

#include <atomic>

#include "graph/attach.h"
#include "graph/counters.h"

namespace reclaim {
namespace graph {
namespace {

// Counters: relaxed fetch_add by the trampolines (any CUDA thread); read by source_counters(). Trivially
// destructible, so nothing runs on them at exit.
std::atomic<std::uint64_t> g_graph_user_objects{0};
std::atomic<std::uint64_t> g_stream_host_functions{0};
std::atomic<std::uint64_t> g_withdrawn{0};
// The thread each trampoline last ran on (pthread_self: a register read, no call into libc's locks);
// relaxed stores by the trampolines, for tests and diagnostics that need to see where CUDA ran them.
std::atomic<std::uintptr_t> g_last_destructor_thread{0};
std::atomic<std::uintptr_t> g_last_host_function_thread{0};

std::uintptr_t this_thread() noexcept { return static_cast<std::uintptr_t>(pthread_self()); }

}  // namespace

namespace internal {

void note_destructor_thread() noexcept {
  g_last_destructor_thread.store(this_thread(), std::memory_order_relaxed);
}

void note_host_function_thread() noexcept {
  g_last_host_function_thread.store(this_thread(), std::memory_order_relaxed);
}

void note_withdrawn() noexcept { g_withdrawn.fetch_add(1, std::memory_order_relaxed); }

void note_user_object_push() noexcept { g_graph_user_objects.fetch_add(1, std::memory_order_relaxed); }

}  // namespace internal

using internal::failed;

namespace {
// The destructors' common part: `data` is what CUDA passed; `record` tells a HandBackRecord from a payload.
void hand_back_from_destructor(void* data, bool record) noexcept {
  internal::note_destructor_thread();
  if (internal::consume_withdrawn(data)) {
    internal::note_withdrawn();  // back with the failed attach's caller, which counts it (not handed back)
    return;
  }
  const Untagged untagged = untag(data);
  auto* const hand_back = record ? static_cast<HandBackRecord*>(untagged.pointer) : nullptr;
  (void)internal::push_payload(record ? hand_back->payload : untagged.pointer, internal::note_user_object_push);
  note_handed_back(untagged.ticket, record ? &hand_back->done : nullptr);  // the record's last use
}

void note_stream_host_function_push() noexcept { g_stream_host_functions.fetch_add(1, std::memory_order_relaxed); }

void hand_back_from_host_function(void* data, bool record) noexcept {
  internal::note_host_function_thread();
  const Untagged untagged = untag(data);
  auto* const hand_back = record ? static_cast<HandBackRecord*>(untagged.pointer) : nullptr;
  (void)internal::push_payload(record ? hand_back->payload : untagged.pointer, note_stream_host_function_push);
  note_handed_back(untagged.ticket, record ? &hand_back->done : nullptr);  // the record's last use
}
}  // namespace

void graph_user_object_destructor(void* payload) noexcept { hand_back_from_destructor(payload, false); }

void record_user_object_destructor(void* record) noexcept { hand_back_from_destructor(record, true); }

void stream_host_function(void* payload) noexcept { hand_back_from_host_function(payload, false); }

void record_stream_host_function(void* record) noexcept { hand_back_from_host_function(record, true); }

AttachResult retain_on_graph(const DriverApi& api, CUgraph graph, void* payload) noexcept {
  return internal::retain_with_destructor(api, graph, payload, graph_user_object_destructor);
}

AttachResult retain_record_on_graph(const DriverApi& api, CUgraph graph, HandBackRecord* record) noexcept {
  if (record == nullptr || record->payload == nullptr) {
    return failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, "an incomplete hand-back record");
  }
  return internal::retain_with_destructor(api, graph, record, record_user_object_destructor);
}

namespace {
// The graph `stream` is capturing into, or the failure that says why there is none.
AttachResult capture_graph(const DriverApi& api, CUstream stream, CUgraph* graph) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = internal::capture_info(api, stream, &status, graph);
  if (result != CUDA_SUCCESS) return failed(AttachOutcome::kReturned, result, "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || *graph == nullptr) {
    return failed(AttachOutcome::kReturned, CUDA_ERROR_ILLEGAL_STATE,
                  status == CU_STREAM_CAPTURE_STATUS_INVALIDATED
                      ? "cuStreamGetCaptureInfo (the capture was invalidated)"
                      : "cuStreamGetCaptureInfo (the stream is not capturing)");
  }
  return AttachResult{AttachOutcome::kAttached, CUDA_SUCCESS, nullptr};
}

// As retain_on_graph (`retain(graph)`), on the graph `stream` is capturing into.
template <class Retain>
AttachResult on_the_captured_graph(const DriverApi& api, CUstream stream, const Retain& retain) noexcept {
  CUgraph graph = nullptr;
  const AttachResult capture = capture_graph(api, stream, &graph);
  if (capture.outcome != AttachOutcome::kAttached) return capture;
  return retain(graph);
}

// cuLaunchHostFunc(stream, function, data), refused on a capturing stream.
AttachResult until_the_stream_gets_here(const DriverApi& api, CUstream stream, CUhostFn function,
                                        void* data) noexcept {
  return internal::launch_unless_capturing(
      api, stream, function, data,
      "cuLaunchHostFunc (the stream is capturing a graph: keep objects alive with the graph builder "
      "instead)");
}
}  // namespace

AttachResult retain_record_on_capture(const DriverApi& api, CUstream stream, HandBackRecord* record) noexcept {
  return on_the_captured_graph(api, stream, [&](CUgraph graph) { return retain_record_on_graph(api, graph, record); });
}

AttachResult retain_record_until_stream(const DriverApi& api, CUstream stream, HandBackRecord* record) noexcept {
  if (record == nullptr || record->payload == nullptr) {
    return failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, "an incomplete hand-back record");
  }
  return until_the_stream_gets_here(api, stream, record_stream_host_function, record);
}

AttachResult retain_on_capture(const DriverApi& api, CUstream stream, void* payload) noexcept {
  return on_the_captured_graph(api, stream, [&](CUgraph graph) { return retain_on_graph(api, graph, payload); });
}

AttachResult retain_until_stream(const DriverApi& api, CUstream stream, void* payload) noexcept {
  if (payload == nullptr) return failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, "a null payload");
  return until_the_stream_gets_here(api, stream, stream_host_function, payload);
}

SourceCounters source_counters() noexcept {
  SourceCounters counters;
  counters.graph_user_objects = g_graph_user_objects.load(std::memory_order_relaxed);
  counters.stream_host_functions = g_stream_host_functions.load(std::memory_order_relaxed);
  counters.withdrawn = g_withdrawn.load(std::memory_order_relaxed);
  counters.last_destructor_thread = g_last_destructor_thread.load(std::memory_order_relaxed);
  counters.last_host_function_thread = g_last_host_function_thread.load(std::memory_order_relaxed);
  return counters;
}

}  // namespace graph
}  // namespace reclaim
