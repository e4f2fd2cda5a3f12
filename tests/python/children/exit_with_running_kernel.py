"""Child of test_gpu_graph: exits while a kernel runs, with a live graph exec destroyed in atexit and a
host function still queued behind the kernel. `--sync-after-close` also waits, after cuda_reclaim's final
drain and close, until the stream is done, so that what CUDA hands over then is counted as leaked.

Run with CUDA_RECLAIM_REPORT=1; the test reads the exit report.
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
    stream.sync()  # the kernel ends now; the host function behind it runs after the close


if SYNC_AFTER_CLOSE:
    atexit.register(sync_after_close)

from cuda.core import Device, LaunchConfig, Program, ProgramOptions  # noqa: E402
from cuda.core.graph import GraphDefinition  # noqa: E402

import cuda_reclaim  # noqa: E402


class Token:
    pass


device = Device()
device.set_current()
with open(KERNELS) as source:
    program = Program(source.read(), code_type="c++", options=ProgramOptions(arch=f"sm_{device.arch}"))
spin = program.compile("cubin").get_kernel("spin")
stream = device.create_stream()
one_second = ctypes.c_ulonglong(int(device.properties.clock_rate * 1000))  # clock_rate is in kHz
definition = GraphDefinition()
definition.launch(LaunchConfig(grid=1, block=1), spin, one_second)
cuda_reclaim.keep_alive(definition, Token(), Token())
executable = definition.instantiate()
executable.launch(stream)  # runs about 1 s: still running when the interpreter exits
cuda_reclaim.keep_alive_until(stream, Token())
for _ in range(3):
    cuda_reclaim.defer_release(Token())
# Runs before cuda_reclaim's final drain (registered later): the exec is destroyed while its kernel runs.
atexit.register(executable.close)
print("exiting with the kernel running", flush=True)
