// bindings/driver_functions.h — the CUDA driver as the extension module sees it: the DriverError
// exception (kept in the module's state), _driver_info() and _driver_devices().

#pragma once

#include <Python.h>

#include "graph/driver.h"

namespace reclaim::bindings {

// Adds the DriverError exception, _driver_info and _driver_devices to the extension module, and keeps the
// exception in the module's state (bindings/module_state.h). Returns 0, or -1 with an exception set.
// _driver_devices initializes CUDA (cuInit) in the process: only the info command and tests call it.
// Requires an attached thread state (GIL).
int add_driver_functions(PyObject* module);

// The process-wide driver, loaded on first use with the GIL released, or null with `module`'s DriverError
// set when it is unusable. `module` is the cuda_reclaim._reclaim module object whose function is running.
// Requires an attached thread state (GIL); blocks while the driver loads (dlopen, cuInit), GIL released.
const reclaim::graph::Driver* usable_driver(PyObject* module);

// `module`'s DriverError: borrowed from the module's state, alive as long as the module.
// Requires an attached thread state (GIL).
PyObject* driver_error(PyObject* module);

}  // namespace reclaim::bindings
