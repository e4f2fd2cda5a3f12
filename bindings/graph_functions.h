// bindings/graph_functions.h — the graph/stream keep-alive functions of cuda_reclaim._reclaim.

#pragma once

#include <Python.h>

#include "graph/driver.h"

// Adds _keep_alive_graph, _keep_alive_capture, _keep_alive_stream, _source_stats, _driver_info and the
// DriverError exception to the extension module, and keeps the exception in the module's state
// (bindings/module_state.h). Returns 0, or -1 with an exception set.
// Requires an attached thread state (GIL).
int add_graph_functions(PyObject* module);

// The process-wide driver, loaded on first use with the GIL released, or null with `module`'s DriverError
// set when it is unusable. `module` is the cuda_reclaim._reclaim module object whose function is running.
// Requires an attached thread state (GIL).
const reclaim::graph::Driver* usable_driver(PyObject* module);

// `module`'s cuda_reclaim.DriverError: borrowed from the module's state, alive as long as the module.
// Requires an attached thread state (GIL).
PyObject* driver_error(PyObject* module);
