// bench/bench_strategies.cc — see bench_strategies.h.

#include "bench/bench_strategies.h"

#include <cstring>

namespace reclaim_bench {
namespace {

const struct {
  const char* name;
  Strategy strategy;
} kStrategies[] = {
    {"noop", Strategy::kNoop},
    {"cuda_reclaim", Strategy::kReclaim},
    {"mutex_vector", Strategy::kMutexVector},
    {"mutex_deque", Strategy::kMutexDeque},
    {"cas_pending_call", Strategy::kCasPendingCall},
    {"with_gil", Strategy::kWithGil},
};

const cuda_reclaim_c_api* g_api = nullptr;
MutexVectorPool g_vector;
MutexDequePool g_deque;
// cuda.core's gate is Py_IsInitialized() alone; the benchmarks never run during finalization.
PendingCallStack g_stack(PendingCallStack::Gate::kInitialized);

void decref_item(void* item) { Py_DECREF(static_cast<PyObject*>(item)); }

}  // namespace

int import_reclaim_api() { return cuda_reclaim_import(&g_api); }

bool parse_strategy(const char* name, Strategy* out) {
  for (const auto& known : kStrategies) {
    if (std::strcmp(known.name, name) == 0) {
      *out = known.strategy;
      return true;
    }
  }
  PyErr_Format(PyExc_ValueError, "unknown strategy '%s'", name);
  return false;
}

void hand_over(Strategy strategy, PyObject* object, StackNode* node) noexcept {
  switch (strategy) {
    case Strategy::kNoop:
      break;  // the run releases the reference itself afterwards
    case Strategy::kReclaim:
      g_api->host_destructor(object);
      break;
    case Strategy::kMutexVector:
      g_vector.push(object);
      break;
    case Strategy::kMutexDeque:
      g_deque.push(object);
      break;
    case Strategy::kCasPendingCall:
      node->item = object;
      g_stack.push(node);  // declined only once Python is gone: leaked then, as cuda.core does
      break;
    case Strategy::kWithGil:
      release_with_gil(object);
      break;
  }
}

std::size_t drain_strategy(Strategy strategy, Py_ssize_t max_items) {
  switch (strategy) {
    case Strategy::kReclaim: {
      const Py_ssize_t released = g_api->drain(max_items);
      return released < 0 ? 0 : static_cast<std::size_t>(released);
    }
    case Strategy::kMutexVector:
      return g_vector.drain(decref_item);
    case Strategy::kMutexDeque:
      return g_deque.drain(decref_item);
    case Strategy::kCasPendingCall:
      return g_stack.drain();
    case Strategy::kNoop:
    case Strategy::kWithGil:
      break;
  }
  return 0;
}

const PendingCallStack::Totals& pending_call_totals() { return g_stack.totals(); }

}  // namespace reclaim_bench
