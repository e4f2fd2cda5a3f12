"""What the GPU tests (test_gpu_graph.py, test_gpu_callbacks.py) and their child programs share: the
test kernels (kernels.cu) compiled for a device, and kernel durations in clock cycles (children/scenario.py
holds the poll for a condition). Imports cuda.core only when a kernel is compiled, and never cuda_reclaim: the
GPU children choose when cuda_reclaim is imported, since that sets where its atexit hook runs among theirs."""

import ctypes
import os

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.cu")


def compile_kernels(device):
    """kernels.cu compiled for `device` (a cuda.core Device): the ObjectCode to take kernels from."""
    from cuda.core import Program, ProgramOptions

    with open(KERNELS) as source:
        program = Program(source.read(), code_type="c++", options=ProgramOptions(arch=f"sm_{device.arch}"))
    return program.compile("cubin")


def cycles_for(device, seconds):
    """The `spin` kernel's argument for about `seconds` on `device`."""
    return ctypes.c_ulonglong(int(device.properties.clock_rate * 1000 * seconds))  # clock_rate is kHz
