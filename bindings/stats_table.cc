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

// The values of origin's and calls' rows (source origin, calls of RECLAIM_COUNTER_TABLE): a row without its
// field here fails to compile (the reader below names it).
struct Origin {
  std::uint64_t graph_user_objects = 0;
  std::uint64_t stream_host_functions = 0;
  std::uint64_t host_calls = 0;
  std::uint64_t host_node_calls = 0;
  std::uint64_t direct_pushes = 0;
};
struct Calls {
  std::uint64_t calls_run = 0;
  std::uint64_t calls_cancelled = 0;
  std::uint64_t calls_outstanding = 0;
  std::uint64_t calls_parked = 0;
};

// Every counter, read together by _all_stats(): one member per source of the table, named after it, each
// with one field per row of that source.
struct Values {
  reclaim::CounterSnapshot queue;
  Origin origin;
  graph::GraphCounters cuda;
  Calls calls;
};

struct Stat {
  const char* name;
  const char* kind;         // "counter", "gauge" or "high_water_mark"
  const char* source;       // "queue", "origin", "cuda" or "calls": the member of Values it is read from
  const char* help;         // one short line (a metric's HELP)
  const char* description;  // what it counts, in full
  std::uint64_t (*read)(const Values&);
};

// The table, one row per row of RECLAIM_COUNTER_TABLE, in its order (the order of stats()); each reads its
// value from the member of Values that its source names.
#define RECLAIM_STAT_(key, kind, source, help, description) \
  {#key, #kind, #source, help, description, [](const Values& v) -> std::uint64_t { return v.source.key; }},
constexpr Stat kStats[] = {RECLAIM_COUNTER_TABLE(RECLAIM_STAT_)};
#undef RECLAIM_STAT_

constexpr bool every_row_is_well_formed() {
  for (const Stat& stat : kStats) {
    const std::string_view kind = stat.kind, source = stat.source;
    if (kind != "counter" && kind != "gauge" && kind != "high_water_mark") return false;
    if (source != "queue" && source != "origin" && source != "cuda" && source != "calls") return false;
    if (stat.help[0] == '\0' || stat.description[0] == '\0') return false;
  }
  return true;
}
static_assert(every_row_is_well_formed(), "a row of RECLAIM_COUNTER_TABLE has an unknown kind or source, or no text");

constexpr const Stat* row(std::string_view name) {
  for (const Stat& stat : kStats) {
    if (name == stat.name) return &stat;
  }
  return nullptr;
}
// graph/counters.h counts what CUDA holds and the host calls' pushes: each of its counters is a row of the
// table, and the rows of source cuda are exactly its counters in the exit report.
#define RECLAIM_GRAPH_ROW_CHECK_(counter, in_report, meaning)                                            \
  static_assert(row(#counter) != nullptr, "graph/counters.h's " #counter " has no row in the table");  \
  static_assert((std::string_view(row(#counter)->source) == "cuda") == (in_report),                      \
                "graph/counters.h's exit report fields are not the table's rows of source cuda");
RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_ROW_CHECK_)
#undef RECLAIM_GRAPH_ROW_CHECK_

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
  graph::GraphCounters held{};
  graph::SourceCounters sources{};
  std::uint64_t in_flight = 0;
  Py_BEGIN_ALLOW_THREADS
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt >= 8) sched_yield();
    const std::uint64_t left = graph::trampolines_left();
    // graph/counters.h's table first: a trampoline counts a payload as handed back after its push, so read
    // before the pushes by source, no snapshot shows more handed back than pushed.
    held = graph::graph_counters();
    sources = graph::source_counters();
    values.queue = queue().snapshot();
    in_flight = graph::trampolines_entered() - left;
    if (in_flight == 0) break;
  }
  Py_END_ALLOW_THREADS
  values.cuda = held;
  values.origin.graph_user_objects = sources.graph_user_objects;
  values.origin.stream_host_functions = sources.stream_host_functions;
  values.origin.host_calls = held.host_calls;
  values.origin.host_node_calls = held.host_node_calls;
  const std::uint64_t by_source = values.origin.graph_user_objects + values.origin.stream_host_functions +
                                  values.origin.host_calls + values.origin.host_node_calls;
  const std::uint64_t handed_over = values.queue.handed_over;
  const std::uint64_t lower = handed_over > by_source + in_flight ? handed_over - by_source - in_flight : 0;
  std::uint64_t direct = g_direct_pushes_reported.load(std::memory_order_relaxed);
  while (lower > direct &&
         !g_direct_pushes_reported.compare_exchange_weak(direct, lower, std::memory_order_relaxed)) {
  }
  values.origin.direct_pushes = lower > direct ? lower : direct;
  values.calls.calls_run = g_call_counters.run;
  values.calls.calls_cancelled = g_call_counters.cancelled;
  values.calls.calls_outstanding = g_call_counters.outstanding;
  values.calls.calls_parked = g_call_counters.parked;
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
  for (const Stat& stat : kStats) {
    if (!set_item(dict, stat.name, stat.read(values))) {
      Py_DECREF(dict);
      return nullptr;
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

// Adds _COUNTER_TABLE: a tuple of (name, kind, source, help, description), one per row, in table order.
int add_table(PyObject* module) {
  PyObject* rows = PyTuple_New(static_cast<Py_ssize_t>(sizeof kStats / sizeof kStats[0]));
  if (rows == nullptr) return -1;
  Py_ssize_t index = 0;
  for (const Stat& stat : kStats) {
    PyObject* entry = Py_BuildValue("(sssss)", stat.name, stat.kind, stat.source, stat.help, stat.description);
    if (entry == nullptr) {
      Py_DECREF(rows);
      return -1;
    }
    PyTuple_SET_ITEM(rows, index++, entry);  // steals entry
  }
  const int result = PyModule_AddObjectRef(module, "_COUNTER_TABLE", rows);
  Py_DECREF(rows);
  return result;
}

// Adds _CONSERVATION_BUCKETS: the names of the queue's rows that are buckets (is_bucket), in table order.
int add_buckets(PyObject* module) {
  PyObject* buckets = PyList_New(0);
  bool failed = buckets == nullptr;
  for (const Stat& stat : kStats) {
    if (failed || std::string_view(stat.source) != "queue" || !is_bucket(stat.name)) continue;
    PyObject* name = PyUnicode_InternFromString(stat.name);
    failed = name == nullptr || PyList_Append(buckets, name) < 0;
    Py_XDECREF(name);
  }
  PyObject* tuple = failed ? nullptr : PyList_AsTuple(buckets);
  Py_XDECREF(buckets);
  failed = tuple == nullptr || PyModule_AddObjectRef(module, "_CONSERVATION_BUCKETS", tuple) < 0;
  Py_XDECREF(tuple);
  return failed ? -1 : 0;
}

}  // namespace

int add_stats(PyObject* module) {
  if (add_table(module) < 0 || add_buckets(module) < 0) return -1;
  return PyModule_AddFunctions(module, kStatsMethods);
}

}  // namespace reclaim::bindings
