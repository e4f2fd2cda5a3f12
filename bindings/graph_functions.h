// bindings/graph_functions.h — the graph/stream keep-alive functions of cuda_reclaim._reclaim.

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Adds _keep_alive_graph, _keep_alive_capture and _keep_alive_stream to the extension module (after
// add_driver_functions: they raise its DriverError). Returns 0, or -1 with an exception set.
// Requires an attached thread state (GIL).
int add_graph_functions(PyObject* module);

}  // namespace reclaim::bindings
