// bench/release_like_bindings.h — bindings' release action (bindings/drain.cc's release_references: the
// loop of bindings/release_loop.h) run over a plain array, for the drain table's decomposition row (the
// drain minus the queue). Compiled apart, with the library's own compile options (library_copts.bzl), so
// that the loop is the one the extension runs.

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>

namespace reclaim_bench {

// Releases the caller's references items[0, count) as a drain of them would: one dequeue's worth at a
// time (cleanup's kDrainBatch), each handed to the release action in one call.
// Requires the GIL; every reference is released.
void release_like_bindings(PyObject* const* items, std::size_t count);

}  // namespace reclaim_bench
