# cuda_reclaim/c_api.pxd — Cython declarations of the cuda_reclaim C API (cuda_reclaim/cuda_reclaim.h).
#
#     from cuda_reclaim.c_api cimport cuda_reclaim_c_api, cuda_reclaim_import
#
#     cdef const cuda_reclaim_c_api* reclaim_api = NULL
#     cuda_reclaim_import(&reclaim_api)          # at module import, with the GIL; raises ImportError
#
#     # hand a reference to CUDA; CUDA's thread releases it through the queue, never with the GIL:
#     Py_INCREF(obj)
#     cuUserObjectCreate(&uo, <void*>obj, reclaim_api.host_destructor, 1,
#                        CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
#
# Build the extension with include_dirs=[cuda_reclaim.get_include()]; Cython finds this file on sys.path.
# Only declarations: cimporting it adds no import of a cuda_reclaim.c_api module at run time.
# Who may call what (the header says the same): push, host_destructor, get_stats and queue_ops: any
# thread, no GIL, never block; drain and cuda_reclaim_import: with the GIL.

from cpython.object cimport PyObject
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "cuda_reclaim/cuda_reclaim.h" nogil:
    enum:
        CUDA_RECLAIM_ABI_VERSION
        CUDA_RECLAIM_QUEUED
        CUDA_RECLAIM_LEAKED_AFTER_CLOSE
        CUDA_RECLAIM_REJECTED
        CUDA_RECLAIM_INVALID_ARGUMENT

    const char* CUDA_RECLAIM_CAPSULE_NAME

    ctypedef struct cuda_reclaim_stats:
        uint64_t enqueued
        uint64_t released
        uint64_t pending
        uint64_t leaked_after_close
        uint64_t rejected
        uint64_t abandoned_after_fork
        uint64_t drain_calls
        uint64_t max_pending
        uint64_t wakeups

    ctypedef struct cuda_reclaim_c_api:
        uint32_t abi_version
        uint32_t struct_size
        # ABI 1
        int (*push)(PyObject* obj) noexcept nogil              # steals obj
        void (*host_destructor)(void* user_data) noexcept nogil  # steals user_data (a PyObject*)
        Py_ssize_t (*drain)(Py_ssize_t max_items) except -1  # GIL required
        int (*get_stats)(cuda_reclaim_stats* out, size_t size) noexcept nogil
        # ABI 2 (opaque here: cleanup/reclaim.h's struct reclaim_queue_ops)
        const void* (*queue_ops)() noexcept nogil

cdef extern from "cuda_reclaim/cuda_reclaim.h":
    int cuda_reclaim_import(const cuda_reclaim_c_api** api) except -1
