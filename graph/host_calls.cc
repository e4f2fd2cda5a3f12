// graph/host_calls.cc — see host_calls.h.

#include "graph/host_calls.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "abi/reclaim.h"
#include "cuda_reclaim/reclaim_abi.h"
#include "graph/attach.h"
#include "graph/counters.h"

namespace reclaim {
namespace graph {

AttachResult launch_host_func(const DriverApi& api, CUstream stream, HostCallRecord* record, bool ordered) noexcept {
  if (record == nullptr || record->payload == nullptr || record->order == nullptr) {
    return internal::failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, "an incomplete host call");
  }
  return internal::launch_unless_capturing(
      api, stream, ordered ? ordered_host_call_function : host_call_function, record,
      "cuLaunchHostFunc (the stream is capturing a graph: add a host node to the graph instead)");
}

namespace {

// The generation of the next prepared pair: 0 .. kGenerations - 1, which tag() carries as a ticket.
constexpr std::uint32_t kGenerations = (1u << RECLAIM_HAND_BACK_TICKET_BITS) - 1;
std::atomic<std::uint32_t> g_next_generation{0};

// host_call_function's body, for a record and the ticket that came with it.
void hand_call_to_queue(HostCallRecord* record, int ticket) noexcept {
  internal::note_host_function_thread();
  CallOrder* order = record->order;  // read before the push: after it, the record may already be freed
  record->place = order->fired.fetch_add(1, std::memory_order_relaxed);
  const int status = internal::push_payload(record->payload, note_host_call_push);
  if (status == RECLAIM_REJECTED) order->rejected.fetch_add(1, std::memory_order_relaxed);
  note_handed_back(ticket);
}

void hand_ordered_call_to_queue(HostCallRecord* record, int ticket) noexcept;

// The record of a prepared pair's firing, once it took the claim; null for a stale or taken pair.
HostCallRecord* claim_prepared(void* data) noexcept {
  const Untagged untagged = untag(data);
  auto* record = static_cast<HostCallRecord*>(untagged.pointer);
  if (record == nullptr || static_cast<std::uint32_t>(untagged.ticket) != record->generation) return nullptr;
  std::uint32_t expected = kUnclaimed;
  if (!record->claim.compare_exchange_strong(expected, kFired, std::memory_order_acq_rel)) return nullptr;
  return record;
}

}  // namespace

void host_call_function(void* data) noexcept {
  const Untagged untagged = untag(data);
  hand_call_to_queue(static_cast<HostCallRecord*>(untagged.pointer), untagged.ticket);
}

PreparedPair prepare_host_call(HostCallRecord* record, bool ordered) noexcept {
  if (record == nullptr || !taggable(record)) return PreparedPair{nullptr, nullptr};
  const std::uint32_t generation = g_next_generation.fetch_add(1, std::memory_order_relaxed) % kGenerations;
  record->generation = generation;
  record->claim.store(kUnclaimed, std::memory_order_relaxed);
  record->ticket = note_attach_begin();
  note_attach_end(true, record->ticket);
  // Published to CUDA's thread by the launch (a driver call) that the integration makes after this.
  return PreparedPair{ordered ? prepared_ordered_host_call_function : prepared_host_call_function,
                      tag(record, static_cast<int>(generation))};
}

const void* prepared_record_address(std::uintptr_t user_data) noexcept {
  return untag(reinterpret_cast<void*>(user_data)).pointer;
}

bool is_prepared_pair(const HostCallRecord* record, std::uintptr_t user_data) noexcept {
  const Untagged untagged = untag(reinterpret_cast<void*>(user_data));
  return untagged.pointer == record && untagged.ticket >= 0 &&
         static_cast<std::uint32_t>(untagged.ticket) == record->generation;
}

bool withdraw_prepared_host_call(HostCallRecord* record) noexcept {
  std::uint32_t expected = kUnclaimed;
  if (!record->claim.compare_exchange_strong(expected, kWithdrawn, std::memory_order_acq_rel)) return false;
  note_handed_back(record->ticket);  // back with its owner: the attach counted at preparation ends here
  return true;
}

void prepared_host_call_function(void* data) noexcept {
  HostCallRecord* const record = claim_prepared(data);
  if (record != nullptr) hand_call_to_queue(record, record->ticket);
}

void prepared_ordered_host_call_function(void* data) noexcept {
  HostCallRecord* const record = claim_prepared(data);
  if (record != nullptr) hand_ordered_call_to_queue(record, record->ticket);
}

namespace {

// Blocks until `*word` reads 1 (a futex wait with no timeout; a spurious wake-up waits again).
void wait_for_gate(const std::atomic<std::uint32_t>* word) noexcept {
  while (word->load(std::memory_order_acquire) == 0) {
    // EAGAIN (the word changed first) and EINTR only loop back to the load.
    (void)syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, 0u, nullptr,
                  nullptr, 0);
  }
}

}  // namespace

void ordered_host_call_function(void* data) noexcept {
  const Untagged untagged = untag(data);
  hand_ordered_call_to_queue(static_cast<HostCallRecord*>(untagged.pointer), untagged.ticket);
}

namespace {

void hand_ordered_call_to_queue(HostCallRecord* record, int ticket) noexcept {
  internal::note_host_function_thread();
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex word is 32 bits");
  std::atomic<std::uint32_t> gate{0};
  CallOrder* order = record->order;  // read before the push: after it, the record may already be freed
  record->place = order->fired.fetch_add(1, std::memory_order_relaxed);
  record->gate.store(&gate, std::memory_order_release);  // published to the drain by the push
  const int status = internal::push_payload(record->payload, note_host_call_push);
  if (status == RECLAIM_REJECTED) order->rejected.fetch_add(1, std::memory_order_relaxed);
  // The hand-back is the push: a barrier waiter must not wait for the call to run.
  note_handed_back(ticket);
  if (status != RECLAIM_QUEUED) {
    // Not kept (leaked after close, or rejected): the payload is never released, so the record is still
    // valid. Take the gate back; if an opener (a close cancelling outstanding calls) took it first, its
    // store is on its way: wait for it, since the word must outlive that store.
    if (record->gate.exchange(nullptr, std::memory_order_acq_rel) == &gate) return;
  }
  wait_for_gate(&gate);
}

}  // namespace

bool open_host_call_gate(HostCallRecord* record) noexcept {
  std::atomic<std::uint32_t>* const word = record->gate.exchange(nullptr, std::memory_order_acq_rel);
  if (word == nullptr) return false;
  word->store(1, std::memory_order_release);
  // From here on the word may be gone (its host function returned): the wake-up only names the address.
  (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  return true;
}

void forget_host_call_gate(HostCallRecord* record) noexcept { record->gate.store(nullptr, std::memory_order_relaxed); }

HostNodeResult add_host_node(const DriverApi& api, CUgraph graph, const CUgraphNode* dependencies,
                             std::size_t dependency_count, HostNodeRecord* record, bool ordered) noexcept {
  HostNodeResult result;
  if (record == nullptr || record->payload == nullptr) {
    result.attach = internal::failed(AttachOutcome::kReturned, CUDA_ERROR_INVALID_VALUE, "a null payload");
    return result;
  }
  // The payload first, so that the node never exists without it: a firing always finds a live record.
  result.attach = internal::retain_with_destructor(api, graph, record, host_node_destructor);
  if (result.attach.outcome != AttachOutcome::kAttached) return result;
  const CUDA_HOST_NODE_PARAMS params = {ordered ? ordered_host_node_function : host_node_function, record};
  CUgraphNode node = nullptr;
  result.node_error = api.graph_add_host_node(&node, graph, dependencies, dependency_count, &params);
  if (result.node_error == CUDA_SUCCESS) result.node = node;
  return result;
}

void host_node_function(void* data) noexcept {
  auto* record = static_cast<HostNodeRecord*>(untag(data).pointer);
  internal::note_host_function_thread();
  // The user object holds one reference for as long as the graph can fire, so this never starts from 0.
  record->native_refs.fetch_add(1, std::memory_order_relaxed);
  const int status = internal::push_payload(record->payload, note_host_node_push);
  if (status == RECLAIM_REJECTED) {
    record->native_refs.fetch_sub(1, std::memory_order_acq_rel);  // the call is lost; never the last one
  }
}

void ordered_host_node_function(void* data) noexcept {
  auto* record = static_cast<HostNodeRecord*>(untag(data).pointer);
  internal::note_host_function_thread();
  record->native_refs.fetch_add(1, std::memory_order_relaxed);  // as host_node_function: never from 0
  FiringGate gate;
  FiringGate* head = record->gates.load(std::memory_order_relaxed);
  do {
    gate.next = head;
  } while (!record->gates.compare_exchange_weak(head, &gate, std::memory_order_release, std::memory_order_relaxed));
  const int status = internal::push_payload(record->payload, note_host_node_push);
  // Not kept: no call of this entry will run. The record is still valid (a leaked payload is never released;
  // a rejected firing keeps its native reference until below).
  if (status != RECLAIM_QUEUED) open_firing_gates(take_firing_gates(record));
  wait_for_gate(&gate.word);
  if (status == RECLAIM_REJECTED) {
    record->native_refs.fetch_sub(1, std::memory_order_acq_rel);  // the call is lost; never the last one
  }
}

FiringGate* take_firing_gates(HostNodeRecord* record) noexcept {
  return record->gates.exchange(nullptr, std::memory_order_acq_rel);
}

void open_firing_gates(FiringGate* gates) noexcept {
  while (gates != nullptr) {
    FiringGate* const next = gates->next;  // read first: once the word is 1 the frame may be gone
    gates->word.store(1, std::memory_order_release);
    (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&gates->word), FUTEX_WAKE_PRIVATE, 1, nullptr,
                  nullptr, 0);
    gates = next;
  }
}

void host_node_destructor(void* data) noexcept {
  internal::note_destructor_thread();
  if (internal::consume_withdrawn(data)) {
    internal::note_withdrawn();  // back with the failed attach's caller
    return;
  }
  const Untagged untagged = untag(data);
  auto* record = static_cast<HostNodeRecord*>(untagged.pointer);
  // Read before the count drops: after it, the owner may free the record (a drain that ran the last call).
  std::atomic<std::uint32_t>* const done = record->done;
  void* const payload = record->payload;
  // Last: no firing left to run, so nobody else will release the payload. (User objects outlive every
  // launch of the graphs that hold them, so no firing can follow.)
  if (record->native_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    (void)internal::push_payload(payload, internal::note_user_object_push);
  }
  // After the push, so that a waiter that sees the hand-back finds the final entry queued. `done` lives in
  // memory its owner keeps until it reads 1 there (host_calls.h).
  note_handed_back(untagged.ticket, done);
}

bool host_node_entry_is_final(const HostNodeRecord* record) noexcept {
  return record->native_refs.load(std::memory_order_acquire) == 0;
}

bool host_node_entry_done(HostNodeRecord* record) noexcept {
  // The final entry: the destructor took the count to zero and left the payload to the owner. Otherwise
  // this entry's own native reference keeps the count above zero until the fetch_sub.
  if (host_node_entry_is_final(record)) return true;
  return record->native_refs.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

}  // namespace graph
}  // namespace reclaim
