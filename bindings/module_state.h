// bindings/module_state.h — the state of one cuda_reclaim._reclaim module object.
//
// What the module's functions hand to Python code lives here rather than in a process global: a re-import
// makes a new module object with a state of its own, while the functions of the old one (still held by the
// package that imported it) keep raising the exception classes that package exports.
// The queue, the call bookkeeping and the _HostItem type stay process globals: CUDA's threads and other
// extensions reach the queue with no module at hand, and queued items outlive any one module object.

#pragma once

#include <Python.h>

namespace reclaim::bindings {

struct ModuleState {
  PyObject* driver_error;  // cuda_reclaim._reclaim.DriverError (strong; set by add_driver_functions)
};

// The state of `module`, a cuda_reclaim._reclaim module object (the `self` its functions receive). Never
// null; borrowed, it lives as long as the module. Requires an attached thread state (GIL).
inline ModuleState* module_state(PyObject* module) {
  return static_cast<ModuleState*>(PyModule_GetState(module));
}

}  // namespace reclaim::bindings
