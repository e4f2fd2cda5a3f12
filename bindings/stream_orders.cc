// bindings/stream_orders.cc — the streams' orders (see call_items.h): a fixed table of intrusive buckets
// keyed by stream handle, and each order's parked calls, an intrusive list sorted by place; the list of live
// prepared pairs; and, in a fork child, the end of the calls that another thread of the parent was running.
//
// Orders are allocated with calloc rather than new: an allocation failure becomes a MemoryError of the
// launch, and nothing here brings in libstdc++'s exception paths. Calls of one stream arrive almost in
// place order, so parking searches from the end of the list and taking the next call looks at its front.

#include <Python.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "bindings/call_items.h"
#include "bindings/python_compat.h"

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
  while (before != nullptr && before->record.place > call->record.place) before = before->parked_previous;
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
  while (call != nullptr && call->record.place < order->next) call = call->parked_next;
  if (call == nullptr || call->record.place != order->next) {
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

// Fork child: the calls (linked through `next`) that a thread of the parent other than the forking one was
// running at the fork. They ran in the parent, which gets their outcome; here no thread will finish them, so
// each future that is not done yet gets a RuntimeError, and the references the call gave that thread (on its
// stack, which the child has a copy of) are released. A future whose lock (python_compat::future_lock) that
// thread held at the fork is left as it is: nothing can take that lock in the child.
// Done-callbacks may re-enter: each call is taken off the chain before its future is touched.
void end_stranded_calls(HostCall* stranded) {
  while (HostCall* call = stranded) {
    stranded = call->next;
    call->next = nullptr;
    auto* parts_on_stack = static_cast<CallParts*>(call->running_parts);
    call->running_parts = nullptr;
    const CallParts parts = *parts_on_stack;
    *parts_on_stack = CallParts{};
    // The thread may have died holding the future's own lock (inside set_result, say): then every method
    // of the future would wait for good, here in the fork hook. Only a future whose lock is free is ended.
    PyObject* condition = python_compat::future_lock(parts.future);
    PyObject* acquired = condition != nullptr ? PyObject_CallMethod(condition, "acquire", "O", Py_False) : nullptr;
    if (acquired == nullptr) PyErr_WriteUnraisable(parts.future);
    PyObject* done = acquired == Py_True ? call_future(parts.future, "done") : nullptr;
    if (done == Py_False) {
      PyObject* error = PyObject_CallFunction(
          PyExc_RuntimeError, "s",
          "os.fork(): the host call was running on another thread of the parent at the fork; it finishes in "
          "the parent, and this process never gets its outcome");
      if (error != nullptr) {
        Py_XDECREF(call_future(parts.future, "set_exception", error));
        Py_DECREF(error);
      } else {
        PyErr_WriteUnraisable(parts.future);
      }
    }
    Py_XDECREF(done);
    if (acquired == Py_True) Py_XDECREF(call_future(condition, "release"));
    Py_XDECREF(acquired);
    Py_XDECREF(condition);
    release_parts(parts);
  }
}

// --- the live prepared pairs (call_items.h) ---------------------------------------------------------------

namespace {

// Linked through prepared_previous/prepared_next.
HostCall* g_prepared = nullptr;

}  // namespace

void link_prepared(HostCall* call) {
  call->prepared = true;
  call->prepared_previous = nullptr;
  call->prepared_next = g_prepared;
  if (g_prepared != nullptr) g_prepared->prepared_previous = call;
  g_prepared = call;
}

void unlink_prepared(HostCall* call) {
  if (!call->prepared) return;
  call->prepared = false;
  if (call->prepared_previous != nullptr) {
    call->prepared_previous->prepared_next = call->prepared_next;
  } else {
    g_prepared = call->prepared_next;
  }
  if (call->prepared_next != nullptr) call->prepared_next->prepared_previous = call->prepared_previous;
  call->prepared_previous = call->prepared_next = nullptr;
}

HostCall* find_prepared(std::uintptr_t user_data) {
  const void* const address = reclaim::graph::prepared_record_address(user_data);
  for (HostCall* call = g_prepared; call != nullptr; call = call->prepared_next) {
    if (&call->record == address) {
      return reclaim::graph::is_prepared_pair(&call->record, user_data) ? call : nullptr;
    }
  }
  return nullptr;
}

}  // namespace reclaim::bindings
