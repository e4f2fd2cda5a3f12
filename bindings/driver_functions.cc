// bindings/driver_functions.cc — see driver_functions.h.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/driver_functions.h"

#include <cstdio>
#include <cstring>

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

// `text` as a str: UTF-8, with any byte that is not (a library path from a non-UTF-8 CUDA_RECLAIM_LIBCUDA)
// written as \xNN. Null with an exception set only when memory runs out.
PyObject* readable(const char* text) {
  return PyUnicode_DecodeUTF8(text, static_cast<Py_ssize_t>(std::strlen(text)), "backslashreplace");
}

PyObject* py_driver_info(PyObject*, PyObject*) {
  const graph::Driver* driver = loaded_driver();
  static const char* const kStatus[] = {"ok", "library_missing", "driver_too_old", "init_failed"};
  PyObject* message = readable(driver->message);
  if (message == nullptr) return nullptr;
  return Py_BuildValue("{s:s,s:i,s:N}", "status", kStatus[static_cast<int>(driver->status)], "version",
                       driver->version, "message", message);
}

// One device as a dict: ordinal, name, compute capability ("9.0") and total memory in bytes.
PyObject* device_dict(int ordinal, const graph::DeviceProperties& properties) {
  const auto length = static_cast<Py_ssize_t>(std::strlen(properties.name));
  PyObject* name = PyUnicode_DecodeUTF8(properties.name, length, "replace");
  if (name == nullptr) return nullptr;
  char capability[32];
  std::snprintf(capability, sizeof capability, "%d.%d", properties.major, properties.minor);
  return Py_BuildValue("{s:i,s:N,s:s,s:K}", "ordinal", ordinal, "name", name, "compute_capability",
                       capability, "total_memory", static_cast<unsigned long long>(properties.total_memory));
}

PyObject* py_driver_devices(PyObject* module, PyObject*) {
  const graph::Driver* driver = loaded_driver();
  int count = 0;
  graph::DeviceQuery query;
  Py_BEGIN_ALLOW_THREADS
  query = graph::device_count(*driver, &count);
  Py_END_ALLOW_THREADS
  if (!query.ok) {
    PyErr_SetString(driver_error(module), query.why);  // ASCII: names of calls and CUDA errors
    return nullptr;
  }
  PyObject* devices = PyList_New(0);
  if (devices == nullptr) return nullptr;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    graph::DeviceProperties properties;
    Py_BEGIN_ALLOW_THREADS
    query = graph::device_properties(*driver, ordinal, &properties);
    Py_END_ALLOW_THREADS
    if (!query.ok) {
      PyErr_SetString(driver_error(module), query.why);
      Py_DECREF(devices);
      return nullptr;
    }
    PyObject* device = device_dict(ordinal, properties);
    if (device == nullptr || PyList_Append(devices, device) < 0) {
      Py_XDECREF(device);
      Py_DECREF(devices);
      return nullptr;
    }
    Py_DECREF(device);
  }
  return devices;
}

PyMethodDef kDriverMethods[] = {
    {"_driver_info", py_driver_info, METH_NOARGS,
     "_driver_info($module, /)\n--\n\n"
     "Load the CUDA driver if needed; return its status, version and message as a dict."},
    {"_driver_devices", py_driver_devices, METH_NOARGS,
     "_driver_devices($module, /)\n--\n\n"
     "Only for `python -m cuda_reclaim info` and tests: it initializes CUDA in the process (cuInit; no\n"
     "context is created). Load the CUDA driver if needed and return the devices it sees, one dict each:\n"
     "ordinal, name, compute_capability (\"9.0\") and total_memory (bytes); [] when it sees none. Raises\n"
     "DriverError saying why when there is no driver, it lacks an entry point, or a call fails\n"
     "(e.g. \"cuInit failed: CUDA_ERROR_NO_DEVICE\")."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

const graph::Driver* usable_driver(PyObject* module) {
  const graph::Driver* driver = loaded_driver();
  if (driver->status != graph::DriverStatus::kOk) {
    PyObject* message = readable(driver->message);
    if (message != nullptr) {
      PyErr_SetObject(driver_error(module), message);
      Py_DECREF(message);
    }
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
