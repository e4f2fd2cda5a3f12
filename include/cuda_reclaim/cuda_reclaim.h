/* cuda_reclaim/cuda_reclaim.h — the C API of the cuda_reclaim extension module, for other extensions.
 *
 * Every extension in a process that uses this header shares the one queue, atexit hook and counters of
 * the loaded `cuda_reclaim._reclaim` module, reached through its capsule `cuda_reclaim._reclaim._C_API`,
 * which holds the one entry-point table of cuda_reclaim/reclaim_abi.h (reclaim_api: what each entry does
 * and who may call it, the counters, the push results, the ABI rules). Compile with
 * -I"$(python -c 'import cuda_reclaim; print(cuda_reclaim.get_include())')" and the Python headers.
 * Cython: `from cuda_reclaim.c_api cimport ...` (cuda_reclaim/c_api.pxd declares all of this).
 *
 * ```c
 * #include "cuda_reclaim/cuda_reclaim.h"
 *
 * static const cuda_reclaim_c_api* api;  // the capsule's table, valid for the life of the process
 *
 * // Call from PyInit_mymod, with the GIL: 0, or -1 with ImportError set.
 * int mymod_import_reclaim(void) { return cuda_reclaim_import(&api); }
 *
 * // Any thread, without the GIL: hands over a reference the caller owns, released later by a drain.
 * // For CUDA, pass api->host_destructor to cuUserObjectCreate or cuLaunchHostFunc instead.
 * void mymod_hand_over(PyObject* obj) { (void)api->push(obj); }
 * ```
 *
 * An extension built with Bazel that links its own copy of cleanup/ makes that copy use this same table
 * with cuda_reclaim_import_shared_queue() (bindings/shared_queue.h). */

#ifndef CUDA_RECLAIM_CUDA_RECLAIM_H_
#define CUDA_RECLAIM_CUDA_RECLAIM_H_

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_reclaim/reclaim_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_RECLAIM_ABI_VERSION RECLAIM_ABI_VERSION
#define CUDA_RECLAIM_CAPSULE_NAME "cuda_reclaim._reclaim._C_API"

/* The ABI's types under this header's prefix. */
typedef reclaim_api cuda_reclaim_c_api;
typedef reclaim_stats cuda_reclaim_stats;

/* Replaces the pending exception by ImportError("<what>: <original message>"). Requires the GIL. */
static inline void cuda_reclaim_import_error_(const char* what) {
  PyObject* cause;
#if PY_VERSION_HEX >= 0x030C0000
  cause = PyErr_GetRaisedException();
#else
  PyObject *type, *traceback;
  PyErr_Fetch(&type, &cause, &traceback);
  PyErr_NormalizeException(&type, &cause, &traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
#endif
  PyErr_Format(PyExc_ImportError, "%s: %S", what, cause ? cause : Py_None);
  Py_XDECREF(cause);
}

/* Imports cuda_reclaim and stores its C API in *api, then announces itself (api->announce(): the package starts its
 * automatic drain, lazily, as any hand-over through a Python-side API does). Returns 0, or -1 with
 * ImportError set when the module or its capsule is missing or its ABI is older than this header's (then
 * *api is untouched), or with the announce's exception. Call it once, from module init.
 * Requires an attached thread state (GIL). */
static inline int cuda_reclaim_import(const cuda_reclaim_c_api** api) {
  /* The package first: importing it installs the atexit and fork hooks that own the queue's life. */
  PyObject* package = PyImport_ImportModule("cuda_reclaim");
  const cuda_reclaim_c_api* found;
  if (package == NULL) return -1;
  Py_DECREF(package);
  found = (const cuda_reclaim_c_api*)PyCapsule_Import(CUDA_RECLAIM_CAPSULE_NAME, 0);
  if (found == NULL) {
    /* A missing module already is an ImportError; a missing or foreign capsule is not. */
    if (!PyErr_ExceptionMatches(PyExc_ImportError)) {
      cuda_reclaim_import_error_("cuda_reclaim C API capsule " CUDA_RECLAIM_CAPSULE_NAME " unavailable");
    }
    return -1;
  }
  if (found->abi_version < CUDA_RECLAIM_ABI_VERSION || found->struct_size < sizeof(cuda_reclaim_c_api)) {
    PyErr_Format(PyExc_ImportError,
                 "cuda_reclaim C API is too old: the module has ABI %u (%u bytes), this extension was "
                 "built against ABI %d (%zu bytes); upgrade cuda-reclaim",
                 (unsigned)found->abi_version, (unsigned)found->struct_size, CUDA_RECLAIM_ABI_VERSION,
                 sizeof(cuda_reclaim_c_api));
    return -1;
  }
  if (found->announce() < 0) return -1;
  *api = found;
  return 0;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUDA_RECLAIM_CUDA_RECLAIM_H_ */
