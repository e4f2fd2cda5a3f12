// bindings/stream_orders.cc — the streams' orders (see call_items.h): a fixed table of intrusive buckets
// keyed by stream handle, and each order's parked calls, an intrusive list sorted by place.
//
// Orders are allocated with calloc rather than new: an allocation failure becomes a MemoryError of the
// launch, and nothing here brings in libstdc++'s exception paths. Calls of one stream arrive almost in
// place order, so parking searches from the end of the list and taking the next call looks at its front.

#include <Python.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "bindings/call_items.h"

namespace reclaim::bindings {
namespace {

// Streams with host calls in flight at once are few (a handful per device): 64 buckets keep each short.
constexpr std::size_t kBuckets = 64;
StreamOrder* g_buckets[kBuckets] = {};

std::size_t bucket_of(std::uintptr_t stream) {
  // Handles are aligned pointers: Fibonacci hashing spreads their high bits over the bucket index.
  return static_cast<std::size_t>((static_cast<std::uint64_t>(stream) * 0x9E3779B97F4A7C15ull) >> 58);
}

void remove_from_table(StreamOrder* order) {
  StreamOrder** link = &g_buckets[bucket_of(order->stream)];
  while (*link != nullptr && *link != order) link = &(*link)->next_in_bucket;
  if (*link == order) *link = order->next_in_bucket;
  order->next_in_bucket = nullptr;
  order->in_table = false;
}

}  // namespace

StreamOrder* acquire_stream_order(std::uintptr_t stream) {
  StreamOrder*& head = g_buckets[bucket_of(stream)];
  for (StreamOrder* order = head; order != nullptr; order = order->next_in_bucket) {
    if (order->stream == stream) {
      ++order->references;
      return order;
    }
  }
  void* memory = std::calloc(1, sizeof(StreamOrder));
  if (memory == nullptr) {
    PyErr_NoMemory();
    return nullptr;
  }
  auto* order = new (memory) StreamOrder();
  order->stream = stream;
  order->in_table = true;
  order->next_in_bucket = head;
  order->references = 1;
  head = order;
  return order;
}

void release_stream_order(StreamOrder* order) {
  if (--order->references != 0) return;
  if (order->in_table) remove_from_table(order);
  order->~StreamOrder();
  std::free(order);
}

void park(HostCall* call) {
  StreamOrder* order = call->order;
  HostCall* before = order->parked_last;  // the call to insert after: the last one with a smaller place
  while (before != nullptr && before->slot.place > call->slot.place) before = before->parked_previous;
  HostCall* after = before != nullptr ? before->parked_next : order->parked_first;
  call->parked_previous = before;
  call->parked_next = after;
  (before != nullptr ? before->parked_next : order->parked_first) = call;
  (after != nullptr ? after->parked_previous : order->parked_last) = call;
}

void unpark(HostCall* call) {
  StreamOrder* order = call->order;
  (call->parked_previous != nullptr ? call->parked_previous->parked_next : order->parked_first) =
      call->parked_next;
  (call->parked_next != nullptr ? call->parked_next->parked_previous : order->parked_last) =
      call->parked_previous;
  call->parked_previous = call->parked_next = nullptr;
}

HostCall* take_next_parked(StreamOrder* order) {
  HostCall* call = order->parked_first;
  while (call != nullptr && call->slot.place < order->next) call = call->parked_next;
  if (call == nullptr || call->slot.place != order->next) {
    // Once a push of the stream was rejected, a missing place may never arrive: run in place order
    // without waiting for the gaps.
    if (order->parked_first == nullptr || order->counters.rejected.load(std::memory_order_relaxed) == 0) {
      return nullptr;
    }
    call = order->parked_first;
  }
  unpark(call);
  return call;
}

void forget_stream_orders() {
  for (StreamOrder*& head : g_buckets) {
    while (StreamOrder* order = head) {
      head = order->next_in_bucket;
      order->next_in_bucket = nullptr;
      order->in_table = false;
    }
  }
}

}  // namespace reclaim::bindings
