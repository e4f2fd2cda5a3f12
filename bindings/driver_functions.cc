// bindings/driver_functions.cc — see driver_functions.h.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/driver_functions.h"

#include "bindings/module_state.h"

namespace reclaim::bindings {
namespace {

// The driver, loaded on first use with the GIL released (dlopen and cuInit can be slow).
const graph::Driver* loaded_driver() {
  const graph::Driver* driver;
  Py_BEGIN_ALLOW_THREADS
  driver = &graph::driver();
  Py_END_ALLOW_THREADS
  return driver;
}

PyObject* py_driver_info(PyObject*, PyObject*) {
  const graph::Driver* driver = loaded_driver();
  static const char* const kStatus[] = {"ok", "library_missing", "driver_too_old", "init_failed"};
  return Py_BuildValue("{s:s,s:i,s:s}", "status", kStatus[static_cast<int>(driver->status)], "version",
                       driver->version, "message", driver->message);
}

PyMethodDef kDriverMethods[] = {
    {"_driver_info", py_driver_info, METH_NOARGS,
     "_driver_info($module, /)\n--\n\n"
     "Load the CUDA driver if needed; return its status, version and message as a dict."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

const graph::Driver* usable_driver(PyObject* module) {
  const graph::Driver* driver = loaded_driver();
  if (driver->status != graph::DriverStatus::kOk) {
    PyErr_SetString(driver_error(module), driver->message);
    return nullptr;
  }
  return driver;
}

PyObject* driver_error(PyObject* module) { return module_state(module)->driver_error; }

int add_driver_functions(PyObject* module) {
  PyObject* error = PyErr_NewExceptionWithDoc(
      "cuda_reclaim._reclaim.DriverError",
      "The CUDA driver is missing or too old for graph/stream keep-alive, or a driver call failed.",
      PyExc_RuntimeError, nullptr);
  if (error == nullptr) return -1;
  module_state(module)->driver_error = error;  // the state's reference
  if (PyModule_AddObjectRef(module, "DriverError", error) < 0) return -1;
  return PyModule_AddFunctions(module, kDriverMethods);
}

}  // namespace reclaim::bindings
