// graph/attach.cc — see attach.h.

#include "graph/attach.h"

#include <atomic>

#include "abi/reclaim.h"
#include "graph/counters.h"

namespace reclaim {
namespace graph {
namespace {

// The withdrawn-payload table (see keep_alive.h). A place holds null (free), a payload being withdrawn, or
// kConsumed (its destructor ran and did not push). Places: claimed (null → payload) and freed by the
// failing caller; payload → kConsumed by a destructor (acq_rel CAS, so exactly one of the two sides wins
// the payload). g_withdrawals counts callers inside the window: incremented (seq_cst) before the place is
// filled and the user object released, decremented (release) after; destructors load it (acquire) so the
// common case costs one load. A destructor the release triggers is ordered after the increment: it runs
// inside the release call, or on a CUDA thread that the release call signalled.
constexpr int kWithdrawnPlaces = 16;
std::atomic<void*> g_withdrawn[kWithdrawnPlaces];
std::atomic<int> g_withdrawals{0};
char g_consumed_marker;
void* const kConsumed = &g_consumed_marker;

}  // namespace

// What an attach that gets a payload tag() refuses says (counters.h).
constexpr const char* kUntaggable = "a payload with its top 16 bits set (they carry the hand-back ticket)";

namespace internal {

bool consume_withdrawn(void* payload) noexcept {
  if (g_withdrawals.load(std::memory_order_acquire) == 0) return false;
  for (auto& place : g_withdrawn) {
    void* expected = payload;
    if (place.compare_exchange_strong(expected, kConsumed, std::memory_order_acq_rel)) return true;
  }
  return false;
}

int push_payload(void* payload, void (*count_source)() noexcept) noexcept {
  note_trampoline_enter();
  const int status = reclaim_push(payload);
  if (accepted(status)) count_source();
  note_trampoline_leave();
  return status;
}

bool accepted(int status) noexcept { return status == RECLAIM_QUEUED || status == RECLAIM_LEAKED_AFTER_CLOSE; }

AttachOutcome withdraw_and_release(const DriverApi& api, CUuserObject object, void* payload) noexcept {
  g_withdrawals.fetch_add(1, std::memory_order_seq_cst);
  std::atomic<void*>* claimed = nullptr;
  for (auto& place : g_withdrawn) {
    void* expected = nullptr;
    if (place.compare_exchange_strong(expected, payload, std::memory_order_acq_rel)) {
      claimed = &place;
      break;
    }
  }
  const CUresult released = api.user_object_release(object, 1);
  AttachOutcome outcome = AttachOutcome::kInFlight;  // no free place, or the release failed: CUDA keeps the payload
  if (claimed != nullptr) {
    void* expected = payload;
    if (claimed->compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) {
      // The destructor has not run. If the release succeeded it will, and push: still in flight. If the
      // release failed the user object lives on with the payload, which stays CUDA's (never freed here,
      // since CUDA may yet run the destructor).
      outcome = AttachOutcome::kInFlight;
    } else {
      // expected == kConsumed: the destructor ran and left the payload to us.
      claimed->store(nullptr, std::memory_order_release);
      outcome = AttachOutcome::kReturned;
    }
  }
  (void)released;
  g_withdrawals.fetch_sub(1, std::memory_order_release);
  return outcome;
}

AttachResult failed(AttachOutcome outcome, CUresult error, const char* call) noexcept {
  return AttachResult{outcome, error, call};
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

AttachResult retain_with_destructor(const DriverApi& api, CUgraph graph, void* payload,
                                    CUhostFn destructor) noexcept {
  if (payload == nullptr) return failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, "a null payload");
  if (!taggable(payload)) {
    return failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, kUntaggable);
  }
  const int ticket = note_attach_begin();
  void* const data = tag(payload, ticket);  // what CUDA passes the destructor, and the withdrawn table holds
  CUuserObject object = nullptr;
  CUresult result = api.user_object_create(&object, data, destructor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
  if (result != CUDA_SUCCESS) {
    note_attach_end(false, ticket);
    return failed(AttachOutcome::kReturned, result, "cuUserObjectCreate");
  }
  // MOVE: the graph takes over our one reference, so no release is needed on success.
  result = api.graph_retain_user_object(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE);
  if (result != CUDA_SUCCESS) {
    const AttachOutcome outcome = withdraw_and_release(api, object, data);
    note_attach_end(outcome != AttachOutcome::kReturned, ticket);
    return failed(outcome, result, "cuGraphRetainUserObject");
  }
  note_attach_end(true, ticket);
  return AttachResult{AttachOutcome::kAttached, CUDA_SUCCESS, nullptr};
}

AttachResult launch_unless_capturing(const DriverApi& api, CUstream stream, CUhostFn function, void* data,
                                     const char* capturing_message) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  CUresult result = capture_info(api, stream, &status, &graph);
  if (result != CUDA_SUCCESS) return failed(AttachOutcome::kReturned, result, "cuStreamGetCaptureInfo");
  // Captured, the host function would become a graph node that runs (and pushes) at every launch.
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
    return failed(AttachOutcome::kReturned, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, capturing_message);
  }
  if (!taggable(data)) {
    return failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, kUntaggable);
  }
  const int ticket = note_attach_begin();
  result = api.launch_host_func(stream, function, tag(data, ticket));
  // A host function that failed to launch never runs: the payload is still the caller's.
  note_attach_end(result == CUDA_SUCCESS, ticket);
  if (result != CUDA_SUCCESS) return failed(AttachOutcome::kReturned, result, "cuLaunchHostFunc");
  return AttachResult{AttachOutcome::kAttached, CUDA_SUCCESS, nullptr};
}

}  // namespace internal
}  // namespace graph
}  // namespace reclaim
