// bindings/arguments.cc — see arguments.h.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings/arguments.h"

#include <cmath>
#include <cstring>

namespace reclaim::bindings {
namespace {

// bool is an int subclass, but True is never meant as a count, a handle or one second.
bool is_int(PyObject* value) { return PyLong_Check(value) && !PyBool_Check(value); }

int count_names(const char* const* names) {
  int count = 0;
  while (names[count] != nullptr) ++count;
  return count;
}

// seconds ≥ 0 from `value` (not null), or *forever for None. False with the exception set.
bool parse_seconds(const char* function, const char* what, PyObject* value, double* seconds, bool* forever) {
  *forever = value == Py_None;
  if (*forever) return true;
  if (!PyFloat_Check(value) && !is_int(value)) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be a number of seconds or None, not %.100s", function, what,
                 Py_TYPE(value)->tp_name);
    return false;
  }
  *seconds = PyFloat_AsDouble(value);
  if (*seconds == -1.0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return false;
    PyErr_Clear();  // an int beyond any float: as long as no limit, or negative
    int overflow = 0;
    (void)PyLong_AsLongLongAndOverflow(value, &overflow);
    *seconds = overflow < 0 ? -1.0 : HUGE_VAL;
  }
  if (!(*seconds >= 0.0)) {                                 // also rejects NaN
    PyErr_Format(PyExc_ValueError, "%s(): %s must be >= 0 seconds or None, not %R", function, what, value);
    return false;
  }
  return true;
}

// _checked_count(function, name, value) -> int | None
PyObject* py_checked_count(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_checked_count() takes (function: str, name: str, value)");
    return nullptr;
  }
  std::size_t count;
  if (!parse_count(PyUnicode_AsUTF8(args[0]), PyUnicode_AsUTF8(args[1]), args[2], &count)) return nullptr;
  return Py_NewRef(args[2]);
}

// _checked_handle(function, name, value) -> int (a plain int, also for an int subclass)
PyObject* py_checked_handle(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_checked_handle() takes (function: str, name: str, value)");
    return nullptr;
  }
  std::uintptr_t handle;
  if (!parse_handle(PyUnicode_AsUTF8(args[0]), PyUnicode_AsUTF8(args[1]), args[2], &handle)) return nullptr;
  return PyLong_FromUnsignedLongLong(handle);
}

// _checked_seconds(function, name, value) -> float | None
PyObject* py_checked_seconds(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_checked_seconds() takes (function: str, name: str, value)");
    return nullptr;
  }
  double seconds;
  bool forever;
  if (!parse_seconds(PyUnicode_AsUTF8(args[0]), PyUnicode_AsUTF8(args[1]), args[2], &seconds, &forever)) {
    return nullptr;
  }
  if (forever) Py_RETURN_NONE;
  return PyFloat_FromDouble(seconds);
}

PyMethodDef kArgumentMethods[] = {
    {"_checked_count", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_checked_count)), METH_FASTCALL,
     "_checked_count($module, function, name, value, /)\n--\n\n"
     "Internal: value if it is a count (an int >= 0, not bool, or None); else the error naming function()."},
    {"_checked_handle", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_checked_handle)),
     METH_FASTCALL,
     "_checked_handle($module, function, name, value, /)\n--\n\n"
     "Internal: value as a plain int if it is a handle (an int in [0, 2**64), not bool); else the error naming\n"
     "function()."},
    {"_checked_seconds", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_checked_seconds)),
     METH_FASTCALL,
     "_checked_seconds($module, function, name, value, /)\n--\n\n"
     "Internal: value as a float if it is a number of seconds >= 0 (not bool), None for None; else the\n"
     "error naming function()."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool parse_arguments(const Parameters& spec, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                     PyObject** values) {
  const int total = count_names(spec.names);
  if (nargs > total) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d argument%s (%zd given)", spec.function, total,
                 total == 1 ? "" : "s", nargs);
    return false;
  }
  for (int i = 0; i < total; ++i) values[i] = i < nargs ? args[i] : nullptr;
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* keyword = PyTuple_GET_ITEM(kwnames, k);
    const char* name = PyUnicode_AsUTF8(keyword);
    if (name == nullptr) return false;
    int index = spec.positional_only;
    while (index < total && std::strcmp(spec.names[index], name) != 0) ++index;
    if (index == total) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", spec.function, keyword);
      return false;
    }
    if (values[index] != nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", spec.function, name);
      return false;
    }
    values[index] = args[nargs + k];
  }
  for (int i = 0; i < spec.required; ++i) {
    if (values[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", spec.function, spec.names[i]);
      return false;
    }
  }
  return true;
}

bool parse_handle(const char* function, const char* what, PyObject* value, std::uintptr_t* handle) {
  if (!is_int(value)) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be an int handle, not %.100s", function, what,
                 Py_TYPE(value)->tp_name);
    return false;
  }
  const unsigned long long parsed = PyLong_AsUnsignedLongLong(value);
  if (parsed == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s(): %s %R is not a valid handle (expected 0 <= handle < 2**64)", function,
                 what, value);
    return false;
  }
  *handle = static_cast<std::uintptr_t>(parsed);
  return true;
}

bool parse_count(const char* function, const char* what, PyObject* value, std::size_t* count) {
  *count = SIZE_MAX;
  if (value == nullptr || value == Py_None) return true;
  if (!is_int(value)) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be an int or None, not %.100s", function, what,
                 Py_TYPE(value)->tp_name);
    return false;
  }
  int overflow = 0;
  const long long parsed = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (parsed == -1 && PyErr_Occurred()) return false;
  if (overflow > 0) return true;  // larger than any queue: all
  if (overflow < 0 || parsed < 0) {
    PyErr_Format(PyExc_ValueError, "%s(): %s must be >= 0 or None, not %R", function, what, value);
    return false;
  }
  *count = static_cast<std::size_t>(parsed);
  return true;
}

bool parse_timeout(const char* function, const char* what, PyObject* value, int absent_ms, int* timeout_ms) {
  *timeout_ms = absent_ms;
  if (value == nullptr) return true;
  double seconds = 0.0;
  bool forever;
  if (!parse_seconds(function, what, value, &seconds, &forever)) return false;
  const double ms = forever ? -1.0 : std::ceil(seconds * 1000.0);
  *timeout_ms = ms < 0.0 || ms > 2147483647.0 ? -1 : static_cast<int>(ms);
  return true;
}

bool check_callable(const char* function, const char* what, PyObject* value) {
  if (PyCallable_Check(value)) return true;
  PyErr_Format(PyExc_TypeError, "%s(): %s must be callable, not %.100s", function, what, Py_TYPE(value)->tp_name);
  return false;
}

int add_argument_functions(PyObject* module) { return PyModule_AddFunctions(module, kArgumentMethods); }

}  // namespace reclaim::bindings
