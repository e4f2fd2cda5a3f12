"""The fake libcuda that CUDA_RECLAIM_LIBCUDA names, with one CUDA thread started (once per process), and
fresh stream handles: the stand-ins' streams."""

import ctypes
import itertools
import os
import threading

_lock = threading.Lock()
_started = []
_handles = itertools.count(0xA000)


def new_stream():
    with _lock:
        if not _started:
            fake = ctypes.CDLL(os.environ["CUDA_RECLAIM_LIBCUDA"])
            fake.fake_cuda_start_threads.argtypes = [ctypes.c_int]
            fake.fake_cuda_stream_synchronize.argtypes = [ctypes.c_void_p, ctypes.c_int]
            fake.fake_cuda_start_threads(1)
            _started.append(fake)
        return next(_handles)


def synchronize(handle):
    """Waits (the GIL released) until the stream has nothing queued or running."""
    assert _started[0].fake_cuda_stream_synchronize(handle, 30000) == 0, "the stream did not finish"
