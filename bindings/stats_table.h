// bindings/stats_table.h — cuda_reclaim.stats(), read in one loop over the counter table RECLAIM_COUNTER_TABLE
// (cuda_reclaim/reclaim_abi.h), each row from the reader of its source (the queue, the origins of
// handed_over, what CUDA holds, the calls).

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Adds, all derived from the one table: _COUNTER_TABLE (a tuple of (name, kind, source, help, description),
// one per row, in the table's order: cuda_reclaim.COUNTERS is built from it), _CONSERVATION_BUCKETS (the
// queue's counters on the right-hand side of the conservation law, read off its one definition,
// reclaim_stats_conserved) and the functions _all_stats() (every key, one read, in the table's order) and
// _diagnostics() (what is not a counter). Returns 0, or -1 with an exception set.
// Requires an attached thread state (GIL); module init only; allocates.
int add_stats(PyObject* module);

}  // namespace reclaim::bindings
