/* cuda_reclaim/cuda_reclaim.h — the C API of the cuda_reclaim extension module, for other extensions.
 *
 * Every extension in a process that uses this header shares the one queue, atexit hook and counters of
 * the loaded `cuda_reclaim._reclaim` module, reached through its capsule `cuda_reclaim._reclaim._C_API`.
 *
 *   #include "cuda_reclaim/cuda_reclaim.h"      // compile with -I$(python -c "import cuda_reclaim;
 *                                               //                  print(cuda_reclaim.get_include())")
 *   static const cuda_reclaim_c_api* reclaim_api;  // in module init, with the GIL:
 *   if (cuda_reclaim_import(&reclaim_api) < 0) return NULL;   // ImportError is set
 *
 *   // on any thread, e.g. as the destructor of a CUDA graph user object:
 *   Py_INCREF(obj);
 *   cuUserObjectCreate(&uo, obj, reclaim_api->host_destructor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
 *
 * ABI rules: the struct starts with its ABI version and size; fields are only ever appended; a module
 * whose abi_version is older than CUDA_RECLAIM_ABI_VERSION is refused by cuda_reclaim_import(). */

#ifndef CUDA_RECLAIM_CUDA_RECLAIM_H_
#define CUDA_RECLAIM_CUDA_RECLAIM_H_

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_RECLAIM_ABI_VERSION 1
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

typedef struct cuda_reclaim_c_api {
  uint32_t abi_version; /* CUDA_RECLAIM_ABI_VERSION of the loaded module */
  uint32_t struct_size; /* sizeof(cuda_reclaim_c_api) of the loaded module */

  /* Hands one reference to `obj` over. Steals it, whatever the result. Returns CUDA_RECLAIM_*.
   * Any thread; no GIL needed; never touches Python; never blocks. */
  int (*push)(PyObject* obj);

  /* CUhostFn / cudaHostFn_t-compatible destructor: pushes `user_data` (a PyObject* whose reference it
   * steals). For cuUserObjectCreate, cudaUserObjectCreate and cuLaunchHostFunc.
   * Any thread; no GIL needed; never touches Python; never blocks. */
  void (*host_destructor)(void* user_data);

  /* Releases up to `max_items` queued references (negative: all) on this thread. Returns the number
   * released, or -1 with an exception set. Requires an attached thread state (GIL). */
  Py_ssize_t (*drain)(Py_ssize_t max_items);

  /* Copies min(size, sizeof(cuda_reclaim_stats)) bytes of counters into *out. Returns 0, or -1 when
   * `out` is NULL (no exception set). Any thread; never touches Python; never blocks. */
  int (*get_stats)(cuda_reclaim_stats* out, size_t size);
} cuda_reclaim_c_api;

/* Imports cuda_reclaim and stores its C API in *api; this also starts the package's automatic drain
 * (lazily, as any hand-over through a Python-side API does). Returns 0, or -1 with ImportError set when
 * the module is missing or its ABI is older than this header's. Requires the GIL. */
static inline int cuda_reclaim_import(const cuda_reclaim_c_api** api) {
  PyObject* package;
  PyObject* started;
  const cuda_reclaim_c_api* found =
      (const cuda_reclaim_c_api*)PyCapsule_Import(CUDA_RECLAIM_CAPSULE_NAME, 0);
  if (found == NULL) return -1;
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
