"""The conftest of test_pytest_plugin.py's pytester runs: the fake driver's few controls these tests use, a
payload class, no automatic drain, and destroy_later(graph, seconds)."""

import ctypes
import os
import threading

import cuda_reclaim

cuda_reclaim.set_auto_drain("off")
fake = ctypes.CDLL(os.environ["CUDA_RECLAIM_LIBCUDA"])
fake.fake_cuda_graph_create.restype = ctypes.c_void_p
fake.fake_cuda_graph_destroy.argtypes = [ctypes.c_void_p]
fake.fake_cuda_stream_hold.argtypes = [ctypes.c_void_p, ctypes.c_int]


class P:
    pass


def destroy_later(graph, seconds):
    """Destroys `graph` on a timer thread after `seconds`: CUDA hands its payloads back then."""
    timer = threading.Timer(seconds, fake.fake_cuda_graph_destroy, (graph,))
    timer.start()
    return timer
