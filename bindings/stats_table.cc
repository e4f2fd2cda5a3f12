// bindings/stats_table.cc — see stats_table.h.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/stats_table.h"

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#include "bindings/call_items.h"
#include "bindings/drain.h"
#include "cuda_reclaim/reclaim_abi.h"
#include "graph/counters.h"
#include "graph/keep_alive.h"

namespace reclaim::bindings {
namespace {

// Every counter, read together by _all_stats().
struct Values {
  reclaim::CounterSnapshot queue;
  graph::GraphCounters held;
  graph::SourceCounters sources;
  std::uint64_t direct_pushes;
};

enum class Group { kQueue, kSource, kHold, kCall };

// What a value does over time, which decides how a monitoring system reads it (cuda_reclaim.metrics):
// a counter only grows (its rate means something); a gauge is a level that goes up and down; a high-water
// mark is the highest level seen, which never goes down but is a level, not a count (exported as a gauge).
enum class Kind { kCounter, kGauge, kHighWaterMark };

struct Stat {
  const char* name;
  Group group;
  Kind kind;
  const char* description;  // STATS_DOCS: what it counts, in full
  const char* help;         // STATS_HELP: one short line (a metric's HELP)
  std::uint64_t (*read)(const Values&);
};

// The queue's counters come from the C ABI header with a name and a description only; their kind and help
// line are here, each with why it has that kind. A counter added to RECLAIM_COUNTERS without a line here
// fails to compile (static_assert below).
struct QueueMetric {
  const char* name;
  Kind kind;
  const char* help;
};
constexpr QueueMetric kQueueMetrics[] = {
    // Every accepted hand-over adds one; nothing takes any away.
    {"handed_over", Kind::kCounter, "references handed over and accepted (queued or leaked after close)"},
    {"released", Kind::kCounter, "references released by a drain or by close()"},
    // The queue's length now: drains take it down.
    {"pending", Kind::kGauge, "references queued now"},
    {"leaked_after_close", Kind::kCounter, "references handed over after close(), leaked on purpose"},
    {"rejected", Kind::kCounter, "hand-overs that could not be stored, leaked"},
    // Set (not added to) in each fork child, and a drain that the forking thread was inside takes what it
    // settles back out of it: it goes down, so it is a level.
    {"abandoned_after_fork", Kind::kGauge, "references the parent had queued when this process forked"},
    {"nonempty_drains", Kind::kCounter, "drains and closes that released at least one reference"},
    // Raised, never lowered: the highest pending seen, a level to read beside pending, not a count.
    {"max_pending", Kind::kHighWaterMark, "highest number of references queued at once"},
    {"eventfd_writes", Kind::kCounter, "writes to the wake-up fd"},
    // Taken by a drain and not yet released: drains settle it back to zero.
    {"in_drain", Kind::kGauge, "references a drain took and has not finished releasing"},
    {"trims", Kind::kCounter, "times trim() gave a burst's memory back"},
};

constexpr const QueueMetric* queue_metric(std::string_view name) {
  for (const QueueMetric& metric : kQueueMetrics) {
    if (name == metric.name) return &metric;
  }
  return nullptr;
}
#define RECLAIM_QUEUE_METRIC_CHECK_(counter, description) \
  static_assert(queue_metric(#counter) != nullptr, "RECLAIM_COUNTERS' " #counter " has no line in kQueueMetrics");
RECLAIM_COUNTERS(RECLAIM_QUEUE_METRIC_CHECK_)
#undef RECLAIM_QUEUE_METRIC_CHECK_

// graph/counters.h's description of its counter `name`, so that it is written once.
constexpr const char* graph_meaning(std::string_view name) {
#define RECLAIM_GRAPH_MEANING_(counter, in_report, meaning) \
  if (name == #counter) return meaning;
  RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_MEANING_)
#undef RECLAIM_GRAPH_MEANING_
  return nullptr;
}

#define RECLAIM_QUEUE_STAT_(counter, description)                                          \
  {#counter, Group::kQueue, queue_metric(#counter)->kind, description, queue_metric(#counter)->help, \
   [](const Values& v) -> std::uint64_t { return v.queue.counter; }},
#define RECLAIM_GRAPH_STAT_(counter, group, kind, help)      \
  {#counter, group, kind, graph_meaning(#counter), help, \
   [](const Values& v) -> std::uint64_t { return v.held.counter; }}

// The table. stats() lists the keys group by group (queue, source, hold, call), each in this order. Every
// count by source only grows (direct_pushes too: each read reports at least the one before), and together
// they split handed_over exactly whenever no hand-over is in flight.
constexpr Stat kStats[] = {
    RECLAIM_COUNTERS(RECLAIM_QUEUE_STAT_)
    {"graph_user_objects", Group::kSource, Kind::kCounter,
     "handed over by a graph user object's destructor (keep_alive, and a host node's function when its graph "
     "is gone)",
     "references handed over by graph user objects' destructors",
     [](const Values& v) -> std::uint64_t { return v.sources.graph_user_objects; }},
    {"stream_host_functions", Group::kSource, Kind::kCounter, "handed over by a keep_alive_until() host function",
     "references handed over by keep_alive_until() host functions",
     [](const Values& v) -> std::uint64_t { return v.sources.stream_host_functions; }},
    RECLAIM_GRAPH_STAT_(host_calls, Group::kSource, Kind::kCounter, "launch_host_func() calls handed over"),
    RECLAIM_GRAPH_STAT_(host_node_calls, Group::kSource, Kind::kCounter, "host-node firings handed over"),
    {"direct_pushes", Group::kSource, Kind::kCounter,
     "everything else: defer_release(), the C API capsule (handed_over minus the sources above; a lower "
     "bound while a CUDA hand-over is in flight)",
     "references handed over by defer_release() and the C API",
     [](const Values& v) -> std::uint64_t { return v.direct_pushes; }},
    // Attached and handed back only grow; what CUDA holds is their difference, a level.
    RECLAIM_GRAPH_STAT_(attached_to_cuda, Group::kHold, Kind::kCounter, "payloads attached to CUDA"),
    RECLAIM_GRAPH_STAT_(handed_back_by_cuda, Group::kHold, Kind::kCounter, "payloads CUDA handed back"),
    RECLAIM_GRAPH_STAT_(held_by_cuda, Group::kHold, Kind::kGauge, "payloads CUDA holds now"),
    {"calls_run", Group::kCall, Kind::kCounter, "launch_host_func() calls and host-node firings that ran in a "
     "drain (an exception counts: the call ran)",
     "calls run in a drain",
     [](const Values&) -> std::uint64_t { return g_call_counters.run; }},
    {"calls_cancelled", Group::kCall, Kind::kCounter,
     "calls that never will run: futures cancelled first, close(), a fork child, host-node firings after "
     "close()",
     "calls that never will run",
     [](const Values&) -> std::uint64_t { return g_call_counters.cancelled; }},
    // Neither run nor cancelled yet: each call leaves it once it runs or is cancelled.
    {"calls_outstanding", Group::kCall, Kind::kGauge,
     "launch_host_func() calls neither run nor cancelled yet (a gauge)",
     "launch_host_func() calls neither run nor cancelled yet",
     [](const Values&) -> std::uint64_t { return g_call_counters.outstanding; }},
    {"calls_parked", Group::kCall, Kind::kCounter,
     "launch_host_func() calls that a drain took before their turn on their stream, and that waited for the "
     "calls before them",
     "launch_host_func() calls that waited for earlier calls of their stream",
     [](const Values&) -> std::uint64_t { return g_call_counters.parked; }},
};
#undef RECLAIM_QUEUE_STAT_
#undef RECLAIM_GRAPH_STAT_

constexpr std::size_t kStatCount = sizeof kStats / sizeof kStats[0];

constexpr bool has_row(std::string_view name) {
  for (const Stat& stat : kStats) {
    if (name == stat.name) return true;
  }
  return false;
}
// A counter added to graph/counters.h needs a row (and a group) here.
#define RECLAIM_GRAPH_ROW_CHECK_(counter, in_report, meaning) \
  static_assert(has_row(#counter), "graph/counters.h's " #counter " has no row in kStats");
RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_ROW_CHECK_)
#undef RECLAIM_GRAPH_ROW_CHECK_

constexpr bool every_row_described() {
  for (const Stat& stat : kStats) {
    if (stat.description == nullptr || stat.help == nullptr || stat.help[0] == '\0') return false;
  }
  return true;
}
static_assert(every_row_described(), "a row of kStats lacks its description or its help line");

constexpr Group kGroupOrder[] = {Group::kQueue, Group::kSource, Group::kHold, Group::kCall};

// The highest direct_pushes reported so far: each read reports at least this, so the counter never goes
// down (see read_values).
std::atomic<std::uint64_t> g_direct_pushes_reported{0};

// Every counter, in one read. direct_pushes is handed_over minus the pushes by source; a trampoline counts
// its source just after its push, so a read that catches one in between would count its push as direct.
// The read is therefore bracketed by the trampolines' in-flight counts (left first, entered last) and
// repeated (bounded) until no trampoline push was in flight: then it is exact. Otherwise it reports a lower
// bound (every push that might have been half-counted is taken as not direct), and never less than an
// earlier read. Requires the GIL; releases it while it reads.
Values read_values() {
  constexpr int kAttempts = 64;
  Values values{};
  std::uint64_t in_flight = 0;
  Py_BEGIN_ALLOW_THREADS
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt >= 8) sched_yield();
    const std::uint64_t left = graph::trampolines_left();
    // graph/counters.h's table first: a trampoline counts a payload as handed back after its push, so read
    // before the pushes by source, no snapshot shows more handed back than pushed.
    values.held = graph::graph_counters();
    values.sources = graph::source_counters();
    values.queue = queue().snapshot();
    in_flight = graph::trampolines_entered() - left;
    if (in_flight == 0) break;
  }
  Py_END_ALLOW_THREADS
  const std::uint64_t by_source = values.sources.graph_user_objects + values.sources.stream_host_functions +
                                  values.held.host_calls + values.held.host_node_calls;
  const std::uint64_t handed_over = values.queue.handed_over;
  const std::uint64_t lower = handed_over > by_source + in_flight ? handed_over - by_source - in_flight : 0;
  std::uint64_t direct = g_direct_pushes_reported.load(std::memory_order_relaxed);
  while (lower > direct &&
         !g_direct_pushes_reported.compare_exchange_weak(direct, lower, std::memory_order_relaxed)) {
  }
  values.direct_pushes = lower > direct ? lower : direct;
  return values;
}

// Sets dict[name] = value; false with an exception set.
bool set_item(PyObject* dict, const char* name, unsigned long long value) {
  PyObject* number = PyLong_FromUnsignedLongLong(value);
  const bool ok = number != nullptr && PyDict_SetItemString(dict, name, number) == 0;
  Py_XDECREF(number);
  return ok;
}

PyObject* py_all_stats(PyObject*, PyObject*) {
  const Values values = read_values();
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  for (Group group : kGroupOrder) {
    for (const Stat& stat : kStats) {
      if (stat.group == group && !set_item(dict, stat.name, stat.read(values))) {
        Py_DECREF(dict);
        return nullptr;
      }
    }
  }
  return dict;
}

PyObject* py_diagnostics(PyObject*, PyObject*) {
  const graph::SourceCounters sources = graph::source_counters();
  // Thread ids as threading.get_ident() gives them (pthread_self on POSIX).
  return Py_BuildValue("{s:K,s:K,s:K}", "withdrawn", static_cast<unsigned long long>(sources.withdrawn),
                       "last_destructor_thread", static_cast<unsigned long long>(sources.last_destructor_thread),
                       "last_host_function_thread",
                       static_cast<unsigned long long>(sources.last_host_function_thread));
}

PyMethodDef kStatsMethods[] = {
    {"_all_stats", py_all_stats, METH_NOARGS,
     "_all_stats($module, /)\n--\n\nEvery counter of cuda_reclaim.stats(), read together (see stats())."},
    {"_diagnostics", py_diagnostics, METH_NOARGS,
     "_diagnostics($module, /)\n--\n\n"
     "Internal (tests): graph user-object destructors that found their payload withdrawn after a failed\n"
     "attach, and the threads (as threading.get_ident()) that last ran each kind of trampoline."},
    {nullptr, nullptr, 0, nullptr},
};

// Adds `name` (a tuple of the table's keys that `wanted` picks, in table order) to the module.
template <typename Wanted>
int add_keys(PyObject* module, const char* name, Wanted wanted) {
  PyObject* keys = PyList_New(0);
  bool failed = keys == nullptr;
  for (std::size_t i = 0; i < kStatCount && !failed; ++i) {
    if (!wanted(kStats[i])) continue;
    PyObject* key = PyUnicode_InternFromString(kStats[i].name);
    failed = key == nullptr || PyList_Append(keys, key) < 0;
    Py_XDECREF(key);
  }
  PyObject* tuple = failed ? nullptr : PyList_AsTuple(keys);
  Py_XDECREF(keys);
  failed = tuple == nullptr || PyModule_AddObjectRef(module, name, tuple) < 0;
  Py_XDECREF(tuple);
  return failed ? -1 : 0;
}

// A counter of the queue is a conservation bucket when a snapshot with one reference handed over, counted
// there alone, conserves: read off the law's one definition (reclaim_stats_conserved), not written again.
bool is_bucket(const char* name) {
  bool bucket = false;
#define RECLAIM_BUCKET_PROBE_(counter, description)             \
  if (std::string_view(name) == #counter) {                     \
    reclaim_stats probe = {};                                   \
    probe.handed_over = 1;                                      \
    probe.counter += 1;                                         \
    bucket = reclaim_stats_conserved(&probe) != 0;              \
  }
  RECLAIM_COUNTERS(RECLAIM_BUCKET_PROBE_)
#undef RECLAIM_BUCKET_PROBE_
  return bucket;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kCounter:
      return "counter";
    case Kind::kGauge:
      return "gauge";
    case Kind::kHighWaterMark:
      return "high_water_mark";
  }
  return "counter";
}

// Adds `name`: a dict of every key (in the order of stats()) to the string `text` gives for its row.
template <typename Text>
int add_mapping(PyObject* module, const char* name, Text text) {
  PyObject* mapping = PyDict_New();
  bool failed = mapping == nullptr;
  for (Group group : kGroupOrder) {
    for (std::size_t i = 0; i < kStatCount && !failed; ++i) {
      if (kStats[i].group != group) continue;
      PyObject* value = PyUnicode_InternFromString(text(kStats[i]));
      failed = value == nullptr || PyDict_SetItemString(mapping, kStats[i].name, value) < 0;
      Py_XDECREF(value);
    }
  }
  failed = failed || PyModule_AddObjectRef(module, name, mapping) < 0;
  Py_XDECREF(mapping);
  return failed ? -1 : 0;
}

}  // namespace

int add_stats(PyObject* module) {
  const auto in = [](Group group) { return [group](const Stat& stat) { return stat.group == group; }; };
  if (add_keys(module, "STATS_KEYS", in(Group::kQueue)) < 0) return -1;
  if (add_keys(module, "SOURCE_KEYS", in(Group::kSource)) < 0) return -1;
  if (add_keys(module, "HOLD_KEYS", in(Group::kHold)) < 0) return -1;
  if (add_keys(module, "CALL_KEYS", in(Group::kCall)) < 0) return -1;
  const auto bucket = [](const Stat& stat) { return stat.group == Group::kQueue && is_bucket(stat.name); };
  if (add_keys(module, "CONSERVATION_BUCKETS", bucket) < 0) return -1;
  if (add_mapping(module, "STATS_DOCS", [](const Stat& stat) { return stat.description; }) < 0) return -1;
  if (add_mapping(module, "STATS_HELP", [](const Stat& stat) { return stat.help; }) < 0) return -1;
  if (add_mapping(module, "STATS_KINDS", [](const Stat& stat) { return kind_name(stat.kind); }) < 0) return -1;
  return PyModule_AddFunctions(module, kStatsMethods);
}

}  // namespace reclaim::bindings
