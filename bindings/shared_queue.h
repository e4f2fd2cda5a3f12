/* bindings/shared_queue.h — for extension modules built with Bazel that link the C entry points (//abi) and
 * push with them (abi/reclaim.h): makes their copy of the queue use the table of the
 * loaded cuda_reclaim module (the capsule's, the one ABI of cuda_reclaim/reclaim_abi.h), so that the process has
 * one queue, one atexit hook and one set of counters. Target //bindings:shared_queue.
 *
 *   PyMODINIT_FUNC PyInit_mine(void) {
 *     const cuda_reclaim_c_api* api;
 *     if (cuda_reclaim_import_shared_queue(&api) < 0) return NULL;  // before any reclaim_* call
 *     ...                                                           // reclaim_host_destructor now
 *   }                                                               // pushes into cuda_reclaim's queue */

#ifndef CUDA_RECLAIM_BINDINGS_SHARED_QUEUE_H_
#define CUDA_RECLAIM_BINDINGS_SHARED_QUEUE_H_

#include <Python.h> /* first, before any system header (CPython's rule) */

#include "cuda_reclaim/cuda_reclaim.h"
#include "abi/reclaim.h"

/* cuda_reclaim_import(), then reclaim_adopt() of the capsule's table by this shared object's copy of
 * cleanup/. Returns 0, or -1 with ImportError set: the module is missing or too old, or this copy of
 * cleanup/ was already used (it would keep a queue nobody drains). Call it once, from module init.
 * Requires an attached thread state (GIL). */
static inline int cuda_reclaim_import_shared_queue(const cuda_reclaim_c_api** api) {
  const cuda_reclaim_c_api* found;
  if (cuda_reclaim_import(&found) < 0) return -1;
  if (reclaim_adopt(found) < 0) {
    PyErr_SetString(PyExc_ImportError,
                    "cannot share cuda_reclaim's queue: this extension's copy of cleanup/ was used before "
                    "cuda_reclaim_import_shared_queue(), or is newer than the loaded cuda_reclaim");
    return -1;
  }
  *api = found;
  return 0;
}

#endif /* CUDA_RECLAIM_BINDINGS_SHARED_QUEUE_H_ */
