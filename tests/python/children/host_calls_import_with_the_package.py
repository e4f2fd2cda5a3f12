"""Child of test_host_calls.py: says whether `import cuda_reclaim` imports concurrent.futures and logging with
it, then lists the modules imported at exit, from an atexit hook registered before the import (so it runs after
the package's hook, which stops the drain thread and closes)."""

import atexit
import os
import sys

before_exit = []


def imported_at_exit():
    os.write(1, f"imported at exit: {sorted(set(sys.modules) - before_exit[0])}\n".encode())


atexit.register(imported_at_exit)
import cuda_reclaim  # noqa: E402 - imported after the hook is registered

with_it = "concurrent.futures" in sys.modules and "logging" in sys.modules
print("imported with the package:", with_it, flush=True)
cuda_reclaim.defer_release(object())  # the drain thread starts; the exit hook stops it and closes
before_exit.append(set(sys.modules))
