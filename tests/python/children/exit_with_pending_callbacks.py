"""Child of test_gpu_callbacks: exits while a 2 s kernel runs, with three host calls (launch_host_func) and
a keep_alive_until host function queued behind it. None of the calls may run: they are still held by
CUDA at exit, or handed back after cuda_reclaim's close (counted as leaked). `--sync-after-close` waits,
after the final drain and close, until the stream is done, so that everything is handed back then.

Run with CUDA_RECLAIM_REPORT=1; the test reads the exit report and this program's stdout.
"""

import atexit
import ctypes
import os
import sys

SYNC_AFTER_CLOSE = "--sync-after-close" in sys.argv[1:]
KERNELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels.cu")

stream = None


def sync_after_close():
    """Registered before cuda_reclaim is imported, so it runs after its final drain and close."""
    stream.sync()  # the kernel ends now; the host functions behind it run after the close


if SYNC_AFTER_CLOSE:
    atexit.register(sync_after_close)

from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch  # noqa: E402

import cuda_reclaim  # noqa: E402


class Token:
    pass


def callback(i):
    print("callback ran", i, flush=True)


device = Device()
device.set_current()
with open(KERNELS) as source:
    program = Program(source.read(), code_type="c++", options=ProgramOptions(arch=f"sm_{device.arch}"))
spin = program.compile("cubin").get_kernel("spin")
stream = device.create_stream()
two_seconds = ctypes.c_ulonglong(int(device.properties.clock_rate * 2000))  # clock_rate is in kHz
launch(stream, LaunchConfig(grid=1, block=1), spin, two_seconds)
futures = [cuda_reclaim.launch_host_func(stream, callback, i) for i in range(3)]
cuda_reclaim.keep_alive_until(stream, Token())
print("exiting with the kernel running", flush=True)
