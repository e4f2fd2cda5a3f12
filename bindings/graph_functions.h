// bindings/graph_functions.h — the graph/stream keep-alive functions of cuda_reclaim._reclaim.

#pragma once

#include <Python.h>

// Adds _keep_alive_graph, _keep_alive_capture, _keep_alive_stream, _source_stats, _driver_info and the
// DriverError exception to the extension module. Returns 0, or -1 with an exception set.
// Requires an attached thread state (GIL).
int add_graph_functions(PyObject* module);
