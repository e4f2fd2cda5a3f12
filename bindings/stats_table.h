// bindings/counter_names.h — the names the module gives the queue's counters, all read off their one
// definition (RECLAIM_COUNTERS and reclaim_stats_conserved in cleanup/reclaim_abi.h).

#pragma once

#include <Python.h>

namespace reclaim_bindings {

// Adds STATS_KEYS (the counters in order), STATS_DOCS (key → what it counts) and CONSERVATION_BUCKETS
// (the counters whose sum the conservation law equates with handed_over) to the extension module. Returns
// 0, or -1 with an exception set. Requires an attached thread state (GIL).
int add_counter_names(PyObject* module);

}  // namespace reclaim_bindings
