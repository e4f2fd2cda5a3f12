"""Child of the GPU tests: the interpreter exits while a kernel runs, with work queued behind it.

    exit_with_running_kernel.py graph [--sync-after-close]       # test_gpu_graph
    exit_with_running_kernel.py callbacks [--sync-after-close]   # test_gpu_callbacks

graph: a 1 s kernel in a graph exec that an atexit hook destroys while the kernel runs (before
cuda_reclaim's final drain), objects kept alive by the graph, a keep_alive_until host function behind the
kernel, and three references handed over directly.
callbacks: a 2 s kernel with three host calls (launch_host_func) and a keep_alive_until host function
queued behind it. None of the calls may run: they are still held by CUDA at exit, or handed back after
cuda_reclaim's close (counted as leaked); a call that ran would print "callback ran".

`--sync-after-close` waits, after cuda_reclaim's final drain and close, until the stream is done, so that
everything CUDA held is handed back then (counted as leaked). Run with CUDA_RECLAIM_REPORT=1; the tests
read the exit report and this program's stdout.
"""

import atexit
import sys

SCENARIO = sys.argv[1]
SYNC_AFTER_CLOSE = "--sync-after-close" in sys.argv[2:]

stream = None


def sync_after_close():
    """Registered before cuda_reclaim is imported, so it runs after its final drain and close."""
    stream.sync()  # the kernel ends now; what is queued behind it reaches CUDA's thread after the close


if SYNC_AFTER_CLOSE:
    atexit.register(sync_after_close)

from cuda.core import Device, LaunchConfig, launch  # noqa: E402
from cuda.core.graph import GraphDefinition  # noqa: E402

import cuda_reclaim  # noqa: E402
from gpu_support import compile_kernels, cycles_for  # noqa: E402


class Token:
    pass


def callback(i):
    print("callback ran", i, flush=True)


# Each scenario returns what it made, which this program keeps until the interpreter tears its modules down.


def exit_with_a_live_graph_exec(device, spin):
    definition = GraphDefinition()
    definition.launch(LaunchConfig(grid=1, block=1), spin, cycles_for(device, 1.0))
    cuda_reclaim.keep_alive(definition, Token(), Token())
    executable = definition.instantiate()
    executable.launch(stream)  # runs about 1 s: still running when the interpreter exits
    cuda_reclaim.keep_alive_until(stream, Token())
    for _ in range(3):
        cuda_reclaim.defer_release(Token())
    # Runs before cuda_reclaim's final drain (registered later): the exec is destroyed while its kernel runs.
    atexit.register(executable.close)
    return definition, executable


def exit_with_pending_callbacks(device, spin):
    launch(stream, LaunchConfig(grid=1, block=1), spin, cycles_for(device, 2.0))
    futures = [cuda_reclaim.launch_host_func(stream, callback, i) for i in range(3)]
    cuda_reclaim.keep_alive_until(stream, Token())
    return futures


SCENARIOS = {"graph": exit_with_a_live_graph_exec, "callbacks": exit_with_pending_callbacks}

device = Device()
device.set_current()
stream = device.create_stream()
kept = SCENARIOS[SCENARIO](device, compile_kernels(device).get_kernel("spin"))
print("exiting with the kernel running", flush=True)
