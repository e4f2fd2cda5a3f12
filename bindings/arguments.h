// bindings/arguments.h — the one argument parser of the extension's builtins, and the rules every public
// function of cuda_reclaim follows (the package docstring states them for users):
//
//   timeouts  a number of seconds (int or float, not bool); None waits for ever; NaN or < 0: ValueError.
//   counts    an int (not bool); None means all, 0 none; < 0: ValueError.
//   handles   an int in [0, 2**64) (not bool).
//   errors    TypeError for a wrong type, ValueError for a wrong value; the message starts "name(): ".
//
// Every function here requires an attached thread state (GIL), never blocks, and returns false with the
// exception set on failure. `function` is the name the user called, as it appears in the message.

#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>

namespace reclaim::bindings {

// The parameters of a METH_FASTCALL | METH_KEYWORDS builtin: `names` in order, null-terminated; the first
// `positional_only` take no keyword, the first `required` must be given.
struct Parameters {
  const char* function;
  const char* const* names;
  int positional_only;
  int required;
};

// Sets values[i] (borrowed; null when not given) for each parameter of `spec` from a vectorcall's
// arguments. TypeError for too many or too few arguments, an unknown keyword, or a value given twice.
bool parse_arguments(const Parameters& spec, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                     PyObject** values);

// A handle (CUgraph, CUstream, CUgraphNode): an int in [0, 2**64), named `what` in the message.
bool parse_handle(const char* function, const char* what, PyObject* value, std::uintptr_t* handle);

// A count named `what`: null (not given) or None → SIZE_MAX (all); an int >= 0 → itself (one at or above
// SIZE_MAX also means all).
bool parse_count(const char* function, const char* what, PyObject* value, std::size_t* count);

// A timeout named `what`, in seconds → milliseconds for poll(2), rounded up: null (not given) → `absent_ms`
// (the parameter's default: 0, or -1 for None); None → -1 (no limit); one too large for poll(2) also → -1.
bool parse_timeout(const char* function, const char* what, PyObject* value, int absent_ms, int* timeout_ms);

// A callable named `what`.
bool check_callable(const char* function, const char* what, PyObject* value);

// Adds _checked_count, _checked_handle and _checked_seconds to the module: the rules above for the package's Python
// functions, so that they are written once. Returns 0, or -1 with an exception set.
int add_argument_functions(PyObject* module);

}  // namespace reclaim::bindings
