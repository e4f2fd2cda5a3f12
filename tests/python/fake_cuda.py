"""The fake libcuda (tests/graph/fake_libcuda.cc) from Python: its path, its controls with their ctypes
signatures, and the runner of the child programs (children/) that use it as their driver."""

import ctypes
import os
import subprocess

import pytest

from conftest import run_child_script

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "graph", "fake_libcuda.so")

_SIGNATURES = {
    # name: (restype, argtypes)
    "fake_cuda_graph_create": (ctypes.c_void_p, []),
    "fake_cuda_graph_destroy": (None, [ctypes.c_void_p]),
    "fake_cuda_failing_graph": (ctypes.c_void_p, []),
    "fake_cuda_graph_host_node_count": (ctypes.c_int, [ctypes.c_void_p]),
    "fake_cuda_graph_instantiate": (ctypes.c_void_p, [ctypes.c_void_p]),
    "fake_cuda_graph_launch": (None, [ctypes.c_void_p, ctypes.c_void_p]),
    "fake_cuda_graph_exec_destroy": (None, [ctypes.c_void_p]),
    "fake_cuda_defer_destructors": (None, [ctypes.c_int]),
    "fake_cuda_run_deferred": (ctypes.c_int, []),
    "fake_cuda_run_host_functions": (ctypes.c_int, []),
    "fake_cuda_start_threads": (None, [ctypes.c_int]),
    "fake_cuda_stream_hold": (None, [ctypes.c_void_p, ctypes.c_int]),
    "fake_cuda_stream_sleep": (None, [ctypes.c_void_p, ctypes.c_uint]),
    "fake_cuda_stream_synchronize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "fake_cuda_items_run": (ctypes.c_ulonglong, []),
    "fake_cuda_capturing_stream": (ctypes.c_void_p, [ctypes.c_void_p]),
    "fake_cuda_failing_stream": (ctypes.c_void_p, []),
    "fake_cuda_launch_host_func": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
}


def load(path=PATH):
    """The fake driver's controls, as a ctypes library with signatures set."""
    fake = ctypes.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(fake, name)
        function.restype = restype
        function.argtypes = argtypes
    return fake


HANG_LIMIT = 120


def run_script(name, *script_args, expect_ok=True, timeout=HANG_LIMIT, **env):
    """Run the program children/`name` with `script_args` in a child whose driver is the fake (a program that
    starts with the prelude children/fake_driver_child.py), with the environment variables `env` added; fail on a
    hang (and, by default, on a non-zero exit). Returns the CompletedProcess. Skips where the fake is not built."""
    if not os.path.exists(PATH):
        pytest.skip(f"fake driver not built: {PATH}")
    try:
        result = run_child_script(name, *script_args, env={"CUDA_RECLAIM_LIBCUDA": PATH, **env}, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the child hung (no exit within {expired.timeout} s); output so far:\n{expired.stdout}")
    if expect_ok:
        assert result.returncode == 0, result.stdout + result.stderr
    return result
