// bench/probe_type.h — `_reclaim_bench.Probe`: an object whose release is timestamped, for the release-
// latency benchmark. Every function here requires the GIL.

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <vector>

namespace reclaim_bench {

// steady_clock now, in ns: the clock of every timestamp of the benchmarks. Any thread.
std::int64_t now_ns() noexcept;

// Creates the heap type and keeps a reference to it; returns it (borrowed), or nullptr with an exception set.
PyTypeObject* create_probe_type();

// Starts a new run: probes of earlier runs stamp nothing from now on, and `stamped` slots (release times,
// 0 = not released yet) are ready for new_probe(index) with index < stamped.
void begin_probe_run(std::size_t stamped);

// A new Probe of the current run. index >= 0 stamps release_times()[index] when it is deallocated;
// -1 stamps nothing. New reference, or nullptr with an exception set.
PyObject* new_probe(Py_ssize_t index);

// The release times of the current run's probes, by index.
const std::vector<std::int64_t>& release_times();

}  // namespace reclaim_bench
