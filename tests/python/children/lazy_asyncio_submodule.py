"""Child of test_package.py: cuda_reclaim.asyncio is imported on first use, not with the package.
Prints "ok"."""

import sys

import cuda_reclaim

assert "asyncio" not in sys.modules and "cuda_reclaim.asyncio" not in sys.modules, "imported eagerly"
install = cuda_reclaim.asyncio.install
assert cuda_reclaim.asyncio is sys.modules["cuda_reclaim.asyncio"]
assert install is sys.modules["cuda_reclaim.asyncio"].install
print("ok")
