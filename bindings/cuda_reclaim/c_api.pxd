# cuda_reclaim/c_api.pxd — Cython declarations of the cuda_reclaim C API (cuda_reclaim/cuda_reclaim.h and
# the one ABI it includes, cuda_reclaim/reclaim_abi.h; tests check that this file and that header agree).
#
#     from cuda_reclaim.c_api cimport cuda_reclaim_c_api, cuda_reclaim_import
#
#     cdef const cuda_reclaim_c_api* api = NULL
#     cuda_reclaim_import(&api)                  # at module import, with the GIL; raises ImportError
#
#     # hand a reference to CUDA; CUDA's thread releases it through the queue, never with the GIL:
#     Py_INCREF(obj)
#     cuUserObjectCreate(&uo, <void*>obj, api.host_destructor, 1,
#                        CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
#
# Build the extension with include_dirs=[cuda_reclaim.get_include()]; Cython finds this file on sys.path.
# Only declarations: cimporting it adds no import of a cuda_reclaim.c_api module at run time.
# Who may call each entry, and what it owns: the header, beside each field of reclaim_api (written there once).

from libc.stdint cimport uint32_t, uint64_t
from libc.stddef cimport ptrdiff_t

cdef extern from "cuda_reclaim/cuda_reclaim.h" nogil:
    enum:
        CUDA_RECLAIM_ABI_VERSION
        RECLAIM_QUEUED
        RECLAIM_LEAKED_AFTER_CLOSE
        RECLAIM_REJECTED
        RECLAIM_INVALID_ARGUMENT

    const char* CUDA_RECLAIM_CAPSULE_NAME

    ctypedef struct cuda_reclaim_stats:
        uint64_t handed_over
        uint64_t released
        uint64_t pending
        uint64_t leaked_after_close
        uint64_t rejected
        uint64_t abandoned_after_fork
        uint64_t nonempty_drains
        uint64_t max_pending
        uint64_t eventfd_writes
        uint64_t in_drain
        uint64_t trims

    int reclaim_stats_conserved(const cuda_reclaim_stats* stats)

    ctypedef struct cuda_reclaim_c_api:
        uint32_t abi_version
        uint32_t struct_size
        int (*push)(void* item) noexcept nogil
        void (*host_destructor)(void* user_data) noexcept nogil
        ptrdiff_t (*drain)(ptrdiff_t max_items) noexcept
        int (*get_stats)(cuda_reclaim_stats* out, size_t size) noexcept nogil
        int (*is_closed)() noexcept nogil
        size_t (*pending)() noexcept nogil
        int (*wakeup_fd)() noexcept nogil
        int (*write_report)(int fd) noexcept nogil
        int (*announce)() except -1
        int (*hand_back_begin)() noexcept nogil
        void (*hand_back_end)(int ticket, uint32_t* done) noexcept nogil
        int (*wait_handed_back)(double timeout_seconds) noexcept nogil

cdef extern from "cuda_reclaim/cuda_reclaim.h":
    int cuda_reclaim_import(const cuda_reclaim_c_api** api) except -1
