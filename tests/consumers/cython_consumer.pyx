# cython: language_level=3
# tests/consumers/cython_consumer.pyx — consumer (b): a Cython extension that cimports the wheel's
# cuda_reclaim/c_api.pxd and is built with setuptools + cythonize against the installed wheel
# (setup.py). Its native threads are raw pthreads that hand references over through the capsule's
# CUhostFn-compatible host_destructor, exactly as CUDA's thread runs a user-object destructor.

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from libc.stdlib cimport free, malloc

from cuda_reclaim.c_api cimport cuda_reclaim_c_api, cuda_reclaim_import, cuda_reclaim_stats


cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t* thread, void* attr, void* (*start)(void*) noexcept nogil, void* arg)
    int pthread_join(pthread_t thread, void** result)


cdef const cuda_reclaim_c_api* api = NULL
cuda_reclaim_import(&api)  # ImportError if cuda_reclaim is missing or older than the .pxd's header


cdef struct Batch:
    void** items
    Py_ssize_t count


cdef void* destroy_batch(void* arg) noexcept nogil:
    cdef Batch* batch = <Batch*>arg
    cdef Py_ssize_t i
    for i in range(batch.count):
        api.host_destructor(batch.items[i])  # what cuUserObjectCreate would be given
    return NULL


def hand_over(list objs, int threads):
    """Hand one new reference to each object to `threads` pthreads; returns len(objs)."""
    if threads < 1:
        raise ValueError("threads must be >= 1")
    cdef Py_ssize_t n = len(objs), per = (n + threads - 1) // threads, i, t
    cdef void** items = <void**>malloc(max(n, 1) * sizeof(void*))
    cdef Batch* batches = <Batch*>malloc(threads * sizeof(Batch))
    cdef pthread_t* ids = <pthread_t*>malloc(threads * sizeof(pthread_t))
    if items == NULL or batches == NULL or ids == NULL:
        free(items); free(batches); free(ids)
        raise MemoryError()
    for i in range(n):
        Py_INCREF(objs[i])  # the reference the destructor steals
        items[i] = <void*><PyObject*>objs[i]
    with nogil:
        for t in range(threads):
            batches[t].items = items + min(t * per, n)
            batches[t].count = max(0, min(per, n - t * per))
            pthread_create(&ids[t], NULL, destroy_batch, &batches[t])
        for t in range(threads):
            pthread_join(ids[t], NULL)
    free(items); free(batches); free(ids)
    return n


def drain():
    """Drain through the capsule (GIL held)."""
    return api.drain(-1)


def stats():
    cdef cuda_reclaim_stats s
    if api.get_stats(&s, sizeof(s)) < 0:
        raise RuntimeError("get_stats failed")
    return {"handed_over": s.handed_over, "released": s.released, "pending": s.pending,
            "leaked_after_close": s.leaked_after_close}
