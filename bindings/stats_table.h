// bindings/stats_table.h — every key of cuda_reclaim.stats(), defined once: name, group, kind (counter,
// gauge or high-water mark), description, one line of help, and how to read its value. The queue's counters
// come from RECLAIM_COUNTERS (cuda_reclaim/reclaim_abi.h) and what CUDA holds from RECLAIM_GRAPH_COUNTERS
// (graph/counters.h); the rest is written here.

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Adds, all derived from the one table: STATS_KEYS (the queue's counters, in the order of the C ABI's
// struct), SOURCE_KEYS, HOLD_KEYS, CALL_KEYS, STATS_DOCS (every key → what it counts), STATS_HELP (every
// key → one short line, a metric's HELP), STATS_KINDS (every key → "counter", "gauge" or
// "high_water_mark"), CONSERVATION_BUCKETS (read off the law's one definition, reclaim_stats_conserved),
// and the functions _all_stats() (every key, one read) and _diagnostics() (what is not a counter). Returns
// 0, or -1 with an exception set. Requires an attached thread state (GIL); module init only.
int add_stats(PyObject* module);

}  // namespace reclaim::bindings
