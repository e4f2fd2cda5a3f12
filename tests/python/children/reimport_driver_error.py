"""Child of test_graph_api.py: the extension module imported a second time (a new module object from the
same shared object) does not change what the package raises. Every keep_alive*, launch_host_func and
add_host_node failure is still caught by `except cuda_reclaim.DriverError`, the second module's own
functions raise the second module's class, and once the second module is gone the first still works.

Run with CUDA_RECLAIM_LIBCUDA naming a library that does not exist. Ends by printing "ok"."""

import gc
import importlib
import sys

import cuda_reclaim
from cuda_reclaim import _reclaim as first

cuda_reclaim.set_auto_drain("off")


def package_calls():
    return (
        lambda: cuda_reclaim.keep_alive(0x1234, object()),
        lambda: cuda_reclaim.keep_alive_until(0, object()),
        lambda: cuda_reclaim.launch_host_func(0, print),
        lambda: cuda_reclaim.add_host_node(0x1234, print),
    )


def assert_package_raises_its_driver_error():
    for call in package_calls():
        try:
            call()
        except cuda_reclaim.DriverError as error:
            assert "/nonexistent/libcuda.so.1" in str(error), error
        else:
            raise AssertionError("no DriverError")


del sys.modules["cuda_reclaim._reclaim"]
second = importlib.import_module("cuda_reclaim._reclaim")
assert second is not first and second.DriverError is not first.DriverError
assert cuda_reclaim.DriverError is first.DriverError
assert_package_raises_its_driver_error()
try:
    second._keep_alive_graph(0x1234, object())
except second.DriverError:
    pass
else:
    raise AssertionError("the second module raised another class than its own DriverError")

# The second module goes away entirely: the first one's functions do not depend on anything it owned.
sys.modules["cuda_reclaim._reclaim"] = first
cuda_reclaim._reclaim = first
del second
gc.collect()
assert_package_raises_its_driver_error()
print("ok")
