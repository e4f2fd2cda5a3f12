// graph/keep_alive.cc — user objects and host functions whose destructors push into cleanup/.

#include "graph/keep_alive.h"

#include <pthread.h>

#include <atomic>

#include "cleanup/reclaim.h"
#include "graph/counters.h"
#include "graph/internal.h"

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

// The withdrawn-payload table (see keep_alive.h). A slot holds null (free), a payload being withdrawn, or
// kConsumed (its destructor ran and did not push). Slots: claimed (null → payload) and freed by the
// failing caller; payload → kConsumed by a destructor (acq_rel CAS, so exactly one of the two sides wins
// the payload). g_withdrawals counts callers inside the window: incremented (seq_cst) before the slot is
// filled and the user object released, decremented (release) after; destructors load it (acquire) so the
// common case costs one load. A destructor the release triggers is ordered after the increment: it runs
// inside the release call, or on a CUDA thread that the release call signalled.
constexpr int kWithdrawSlots = 16;
std::atomic<void*> g_withdraw_slots[kWithdrawSlots];
std::atomic<int> g_withdrawals{0};
char g_consumed_marker;
void* const kConsumed = &g_consumed_marker;

}  // namespace

namespace internal {

bool consume_withdrawn(void* payload) noexcept {
  if (g_withdrawals.load(std::memory_order_acquire) == 0) return false;
  for (auto& slot : g_withdraw_slots) {
    void* expected = payload;
    if (slot.compare_exchange_strong(expected, kConsumed, std::memory_order_acq_rel)) return true;
  }
  return false;
}

int push_payload(void* payload, void (*count_source)() noexcept) noexcept {
  note_trampoline_enter();
  // Through the C entry point: when this copy of cleanup/ adopted the owner's table (reclaim_adopt, e.g.
  // an extension built with Bazel next to the cuda_reclaim wheel), it forwards to the queue that is
  // drained.
  const int status = reclaim_push(payload);
  if (accepted(status)) count_source();
  note_trampoline_leave();
  return status;
}

bool accepted(int status) noexcept { return status == RECLAIM_QUEUED || status == RECLAIM_LEAKED_AFTER_CLOSE; }

Handover withdraw_and_release(const DriverApi& api, CUuserObject object, void* payload) noexcept {
  g_withdrawals.fetch_add(1, std::memory_order_seq_cst);
  std::atomic<void*>* claimed = nullptr;
  for (auto& slot : g_withdraw_slots) {
    void* expected = nullptr;
    if (slot.compare_exchange_strong(expected, payload, std::memory_order_acq_rel)) {
      claimed = &slot;
      break;
    }
  }
  const CUresult released = api.user_object_release(object, 1);
  Handover handover = Handover::kInFlight;  // no free slot, or the release failed: CUDA keeps the payload
  if (claimed != nullptr) {
    void* expected = payload;
    if (claimed->compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) {
      // The destructor has not run. If the release succeeded it will, and push: still in flight. If the
      // release failed the user object lives on with the payload, which stays CUDA's (never freed here,
      // since CUDA may yet run the destructor).
      handover = Handover::kInFlight;
    } else {
      // expected == kConsumed: the destructor ran and left the payload to us.
      claimed->store(nullptr, std::memory_order_release);
      handover = Handover::kReturned;
    }
  }
  (void)released;
  g_withdrawals.fetch_sub(1, std::memory_order_release);
  return handover;
}

AttachResult failed(Handover handover, CUresult error, const char* call) noexcept {
  return AttachResult{handover, error, call};
}

CUresult capture_info(const DriverApi& api, CUstream stream, CUstreamCaptureStatus* status,
                      CUgraph* graph) noexcept {
  if (api.stream_get_capture_info_v3 != nullptr) {
    return api.stream_get_capture_info_v3(stream, status, nullptr, graph, nullptr, nullptr, nullptr);
  }
  if (api.stream_get_capture_info_v2 != nullptr) {
    return api.stream_get_capture_info_v2(stream, status, nullptr, graph, nullptr, nullptr);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

std::uintptr_t this_thread() noexcept { return static_cast<std::uintptr_t>(pthread_self()); }

// pthread_self() of the thread that last ran a user-object destructor (keep_alive's or a host node's).
void note_destructor_thread() noexcept {
  g_last_destructor_thread.store(this_thread(), std::memory_order_relaxed);
}

void note_host_function_thread() noexcept {
  g_last_host_function_thread.store(this_thread(), std::memory_order_relaxed);
}

void note_withdrawn() noexcept { g_withdrawn.fetch_add(1, std::memory_order_relaxed); }

void note_user_object_push() noexcept { g_graph_user_objects.fetch_add(1, std::memory_order_relaxed); }

AttachResult retain_with_destructor(const DriverApi& api, CUgraph graph, void* payload,
                                    CUhostFn destructor) noexcept {
  if (payload == nullptr) return failed(Handover::kReturned, CUDA_ERROR_INVALID_VALUE, "a null payload");
  note_attach_begin();
  CUuserObject object = nullptr;
  CUresult result = api.user_object_create(&object, payload, destructor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
  if (result != CUDA_SUCCESS) {
    note_attach_end(false);
    return failed(Handover::kReturned, result, "cuUserObjectCreate");
  }
  // MOVE: the graph takes over our one reference, so no release is needed on success.
  result = api.graph_retain_user_object(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE);
  if (result != CUDA_SUCCESS) {
    const Handover handover = withdraw_and_release(api, object, payload);
    note_attach_end(handover != Handover::kReturned);
    return failed(handover, result, "cuGraphRetainUserObject");
  }
  note_attach_end(true);
  return AttachResult{Handover::kAttached, CUDA_SUCCESS, nullptr};
}

}  // namespace internal

using internal::failed;

void graph_user_object_destructor(void* payload) noexcept {
  internal::note_destructor_thread();
  if (internal::consume_withdrawn(payload)) {
    internal::note_withdrawn();  // back with the failed attach's caller, which counts it (not handed back)
    return;
  }
  (void)internal::push_payload(payload, internal::note_user_object_push);
  note_handed_back();
}

namespace {
void note_stream_host_function_push() noexcept { g_stream_host_functions.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

void stream_host_function(void* payload) noexcept {
  internal::note_host_function_thread();
  (void)internal::push_payload(payload, note_stream_host_function_push);
  note_handed_back();
}

AttachResult retain_on_graph(const DriverApi& api, CUgraph graph, void* payload) noexcept {
  return internal::retain_with_destructor(api, graph, payload, graph_user_object_destructor);
}

AttachResult retain_on_capture(const DriverApi& api, CUstream stream, void* payload) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  const CUresult result = internal::capture_info(api, stream, &status, &graph);
  if (result != CUDA_SUCCESS) return failed(Handover::kReturned, result, "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || graph == nullptr) {
    return failed(Handover::kReturned, CUDA_ERROR_ILLEGAL_STATE,
                  status == CU_STREAM_CAPTURE_STATUS_INVALIDATED
                      ? "cuStreamGetCaptureInfo (the capture was invalidated)"
                      : "cuStreamGetCaptureInfo (the stream is not capturing)");
  }
  return retain_on_graph(api, graph, payload);
}

AttachResult retain_until_stream(const DriverApi& api, CUstream stream, void* payload) noexcept {
  if (payload == nullptr) return failed(Handover::kReturned, CUDA_ERROR_INVALID_VALUE, "a null payload");
  return internal::launch_unless_capturing(
      api, stream, stream_host_function, payload,
      "cuLaunchHostFunc (the stream is capturing a graph: keep objects alive with the graph builder "
      "instead)");
}

namespace internal {

AttachResult launch_unless_capturing(const DriverApi& api, CUstream stream, CUhostFn function, void* data,
                                     const char* capturing_message) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  CUresult result = capture_info(api, stream, &status, &graph);
  if (result != CUDA_SUCCESS) return failed(Handover::kReturned, result, "cuStreamGetCaptureInfo");
  // Captured, the host function would become a graph node that runs (and pushes) at every launch.
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
    return failed(Handover::kReturned, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, capturing_message);
  }
  note_attach_begin();
  result = api.launch_host_func(stream, function, data);
  // A host function that failed to launch never runs: the payload is still the caller's.
  note_attach_end(result == CUDA_SUCCESS);
  if (result != CUDA_SUCCESS) return failed(Handover::kReturned, result, "cuLaunchHostFunc");
  return AttachResult{Handover::kAttached, CUDA_SUCCESS, nullptr};
}

}  // namespace internal

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
