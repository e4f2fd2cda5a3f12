// bench/shutdown/strategies.cc — see strategies.h.

#include "bench/shutdown/strategies.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "bench/python_anchors.h"
#include "cuda_reclaim/cuda_reclaim.h"

namespace reclaim_shutdown {
namespace {

using reclaim_bench::PendingCallStack;
using reclaim_bench::StackNode;

Strategy g_strategy = Strategy::kA;
SharedRecord* g_record = nullptr;
const cuda_reclaim_c_api* g_api = nullptr;

void count_pending_call(std::size_t) { g_record->d_drains.fetch_add(1, std::memory_order_relaxed); }

// D stops scheduling once the interpreter is finalizing: what arrives then is dropped.
PendingCallStack g_stack(PendingCallStack::Gate::kInitializedAndNotFinalizing, count_pending_call);

void count_skipped() { g_record->skipped.fetch_add(1, std::memory_order_relaxed); }

void release_d(StackNode* node) noexcept {
  switch (g_stack.push(node)) {
    case PendingCallStack::PushResult::kDeclined: count_skipped(); break;
    case PendingCallStack::PushResult::kScheduled:
      g_record->d_scheduled.fetch_add(1, std::memory_order_relaxed);
      break;
    case PendingCallStack::PushResult::kQueued: break;
  }
}

// R's snapshot at the end of Py_FinalizeEx (Py_AtExit), also on the KeyboardInterrupt path that then
// kills the process with SIGINT before exit() (so no C atexit handler and no exit report). Never touches
// Python.
pid_t g_snapshot_pid = 0;
void snapshot_at_finalized() {
  if (getpid() != g_snapshot_pid) return;  // a forked child inherits the hook, not the queue's history
  cuda_reclaim_stats stats;
  if (g_api->get_stats(&stats, sizeof stats) != 0) return;
  const std::uint64_t values[kFinalizedStats] = {stats.handed_over,        stats.released,
                                                 stats.pending,            stats.leaked_after_close,
                                                 stats.abandoned_after_fork, stats.in_drain};
  for (int i = 0; i < kFinalizedStats; ++i) g_record->finalized_stats[i].store(values[i]);
  g_record->finalized_stats_valid.store(1);
}

}  // namespace

bool select_strategy(const char* name, SharedRecord* record) {
  static const struct {
    const char* name;
    Strategy strategy;
  } kNames[] = {{"A", Strategy::kA}, {"B", Strategy::kB}, {"C", Strategy::kC}, {"D", Strategy::kD},
                {"R", Strategy::kR}};
  const auto* found = std::find_if(std::begin(kNames), std::end(kNames),
                                   [&](const auto& entry) { return std::strcmp(entry.name, name) == 0; });
  if (found == std::end(kNames)) {
    PyErr_Format(PyExc_ValueError, "unknown strategy '%s' (expected A, B, C, D or R)", name);
    return false;
  }
  if (found->strategy == Strategy::kR) {
    if (cuda_reclaim_import(&g_api) < 0) return false;
    g_snapshot_pid = getpid();
    if (Py_AtExit(snapshot_at_finalized) != 0) {
      PyErr_SetString(PyExc_RuntimeError, "cannot register the Py_AtExit snapshot");
      return false;
    }
  }
  g_strategy = found->strategy;
  g_record = record;
  return true;
}

void* wrap_for_strategy(PyObject* obj) {
  // D's nodes are never freed: a native thread may still hold one when the process ends.
  if (g_strategy == Strategy::kD) return new StackNode{obj, nullptr};
  return obj;
}

void release_one(void* item) noexcept {
  auto* obj = static_cast<PyObject*>(item);
  switch (g_strategy) {
    case Strategy::kA: reclaim_bench::release_with_gil(obj); break;
    case Strategy::kB: if (!reclaim_bench::release_if_initialized(obj)) count_skipped(); break;
    case Strategy::kC: if (!reclaim_bench::release_unless_finalizing(obj)) count_skipped(); break;
    case Strategy::kD: release_d(static_cast<StackNode*>(item)); break;
    case Strategy::kR: g_api->host_destructor(item); break;
  }
}

Py_ssize_t drain_strategy() {
  if (g_strategy == Strategy::kD) return static_cast<Py_ssize_t>(g_stack.drain());
  if (g_strategy == Strategy::kR) return g_api->drain(-1);
  return 0;
}

}  // namespace reclaim_shutdown
