// bench/shutdown/strategies.h — the five ways a child of the shutdown comparison releases a Python object
// from a native thread: A, B, C, D (the anchors of bench/python_anchors.h) and R (cuda-reclaim through
// the capsule's host_destructor). One strategy per process, chosen once by select_strategy().

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bench/shutdown/shared_record.h"

namespace reclaim_shutdown {

enum class Strategy { kA, kB, kC, kD, kR };

// Chooses the strategy by name ("A".."D", "R") and, for R, imports the capsule; counts into `record`
// from then on. Returns false with an exception set. Call once, before any native thread starts.
// Requires the GIL.
bool select_strategy(const char* name, SharedRecord* record);

// The hand-over record for `obj` (whose new reference it takes over): the PyObject* itself, or for D a
// node that carries it. Requires the GIL.
void* wrap_for_strategy(PyObject* obj);

// One host-destructor call of the chosen strategy on a wrap_for_strategy() item. Any thread; never throws.
void release_one(void* item) noexcept;

// The strategy's own drain on this thread (D: its stack; R: the capsule's drain; A-C: nothing).
// Returns how many it released, or -1 with an exception set. Requires the GIL.
Py_ssize_t drain_strategy();

}  // namespace reclaim_shutdown
