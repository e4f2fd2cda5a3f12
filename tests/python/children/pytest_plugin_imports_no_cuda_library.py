"""Child of test_pytest_plugin.py: imports cuda_reclaim.pytest_plugin, then prints the cuda modules imported and
the libcuda lines of this process's memory maps (both empty lists where the import loads no CUDA library)."""

import sys

import cuda_reclaim.pytest_plugin  # noqa: F401 - the import is what is checked

with open("/proc/self/maps") as maps:
    mapped = [line for line in maps if "libcuda" in line]
print([name for name in sys.modules if name == "cuda" or name.startswith("cuda.")], mapped)
