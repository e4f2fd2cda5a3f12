/* cuda_reclaim/cuda_reclaim.h — the C API of the cuda_reclaim extension module, for other extensions.
 *
 * Every extension in a process that uses this header shares the one queue, atexit hook and counters of
 * the loaded `cuda_reclaim._reclaim` module, reached through its capsule `cuda_reclaim._reclaim._C_API`.
 * Cython: `from cuda_reclaim.c_api cimport ...` (cuda_reclaim/c_api.pxd declares all of this).
 *
 *   #include "cuda_reclaim/cuda_reclaim.h"      // compile with -I$(python -c "import cuda_reclaim;
 *                                               //                  print(cuda_reclaim.get_include())")
 *   static const cuda_reclaim_c_api* reclaim_api;  // in module init, with the GIL:
 *   if (cuda_reclaim_import(&reclaim_api) < 0) return NULL;   // ImportError is set
 *
 *   // hand a reference to CUDA, released on CUDA's thread through the queue, never with the GIL:
 *   Py_INCREF(obj);
 *   cuUserObjectCreate(&uo, obj, reclaim_api->host_destructor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
 *
 * ABI rules: the struct starts with its ABI version and size; fields are only ever appended, and each
 * append bumps CUDA_RECLAIM_ABI_VERSION. cuda_reclaim_import() refuses a module whose abi_version is
 * older than this header's, or whose struct is smaller; a newer module is fine. Existing fields never
 * change meaning. Each entry states who may call it.
 *
 * History: ABI 1: push, host_destructor, drain, get_stats. ABI 2: queue_ops. */

#ifndef CUDA_RECLAIM_CUDA_RECLAIM_H_
#define CUDA_RECLAIM_CUDA_RECLAIM_H_

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_RECLAIM_ABI_VERSION 2
#define CUDA_RECLAIM_CAPSULE_NAME "cuda_reclaim._reclaim._C_API"

/* Results of push(). */
#define CUDA_RECLAIM_QUEUED 0             /* queued; released later in a safe context */
#define CUDA_RECLAIM_LEAKED_AFTER_CLOSE 1 /* queue closed (process exiting): counted, never touched */
#define CUDA_RECLAIM_REJECTED 2           /* could not be stored (out of memory): counted, leaked */
#define CUDA_RECLAIM_INVALID_ARGUMENT 3   /* NULL: nothing handed over */

/* Counters; the conservation law: enqueued == released + pending + leaked_after_close
 * + abandoned_after_fork. Fields are only ever appended. */
typedef struct cuda_reclaim_stats {
  uint64_t enqueued;
  uint64_t released;
  uint64_t pending;
  uint64_t leaked_after_close;
  uint64_t rejected;
  uint64_t abandoned_after_fork;
  uint64_t drain_calls;
  uint64_t max_pending;
  uint64_t wakeups;
} cuda_reclaim_stats;

/* cleanup/reclaim.h's table of queue entry points; opaque here (only Bazel builds that link cleanup/
 * need its definition). */
struct reclaim_queue_ops;

typedef struct cuda_reclaim_c_api {
  uint32_t abi_version; /* CUDA_RECLAIM_ABI_VERSION of the loaded module */
  uint32_t struct_size; /* sizeof(cuda_reclaim_c_api) of the loaded module */

  /* --- ABI 1 --- */

  /* Hands one reference to `obj` over. Steals it, whatever the result. Returns CUDA_RECLAIM_*; never
   * raises. Cost: one lock-free queue push, relaxed counter updates, at most one eventfd write.
   * Any thread; never touches Python; never blocks. */
  int (*push)(PyObject* obj);

  /* CUhostFn / cudaHostFn_t-compatible destructor: pushes `user_data` (a PyObject* whose reference it
   * steals; NULL is ignored). For cuUserObjectCreate, cudaUserObjectCreate and cuLaunchHostFunc.
   * Any thread; never touches Python; never blocks. */
  void (*host_destructor)(void* user_data);

  /* Releases up to `max_items` queued references (negative: all) on this thread, running their
   * finalizers (exceptions go to sys.unraisablehook). Releases nothing while the interpreter finalizes.
   * Returns the number released, or -1 with an exception set.
   * Requires an attached thread state (GIL). */
  Py_ssize_t (*drain)(Py_ssize_t max_items);

  /* Copies min(size, the module's sizeof(cuda_reclaim_stats)) bytes of counters into *out (pass
   * sizeof(cuda_reclaim_stats)). Returns 0, or -1 when `out` is NULL (no exception set).
   * Any thread; never touches Python; never blocks. */
  int (*get_stats)(cuda_reclaim_stats* out, size_t size);

  /* --- ABI 2 --- */

  /* The module's cleanup/ queue as a reclaim_queue_ops table (cleanup/reclaim.h), for an extension
   * built with Bazel that links its own copy of cleanup/: pass it to reclaim_adopt() at module init,
   * before that copy is used, and that copy's reclaim_* functions use this module's queue (one queue,
   * one atexit hook, one set of counters per process). bindings/shared_queue.h does both steps.
   * Push through the adopted functions; leave drain and close to the module, which releases only where
   * it is safe. Static; never NULL.
   * Any thread; never touches Python; never blocks. */
  const struct reclaim_queue_ops* (*queue_ops)(void);
} cuda_reclaim_c_api;

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

/* Imports cuda_reclaim and stores its C API in *api; this also starts the package's automatic drain
 * (lazily, as any hand-over through a Python-side API does). Returns 0, or -1 with ImportError set when
 * the module or its capsule is missing or its ABI is older than this header's (then *api is untouched).
 * Call it once, from module init. Requires an attached thread state (GIL). */
static inline int cuda_reclaim_import(const cuda_reclaim_c_api** api) {
  PyObject* package;
  PyObject* started;
  const cuda_reclaim_c_api* found =
      (const cuda_reclaim_c_api*)PyCapsule_Import(CUDA_RECLAIM_CAPSULE_NAME, 0);
  if (found == NULL) {
    /* A missing module already is an ImportError; a missing or foreign capsule is not. */
    if (!PyErr_ExceptionMatches(PyExc_ImportError)) {
      cuda_reclaim_import_error_("cuda_reclaim C API capsule " CUDA_RECLAIM_CAPSULE_NAME " unavailable");
    }
    return -1;
  }
  if (found->abi_version < CUDA_RECLAIM_ABI_VERSION ||
      found->struct_size < sizeof(cuda_reclaim_c_api)) {
    PyErr_Format(PyExc_ImportError,
                 "cuda_reclaim C API is too old: the module has ABI %u (%u bytes), this extension was "
                 "built against ABI %d (%zu bytes); upgrade cuda-reclaim",
                 (unsigned)found->abi_version, (unsigned)found->struct_size, CUDA_RECLAIM_ABI_VERSION,
                 sizeof(cuda_reclaim_c_api));
    return -1;
  }
  package = PyImport_ImportModule("cuda_reclaim");
  if (package == NULL) return -1;
  started = PyObject_CallMethod(package, "_c_api_imported", NULL);
  Py_DECREF(package);
  if (started == NULL) return -1;
  Py_DECREF(started);
  *api = found;
  return 0;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUDA_RECLAIM_CUDA_RECLAIM_H_ */
