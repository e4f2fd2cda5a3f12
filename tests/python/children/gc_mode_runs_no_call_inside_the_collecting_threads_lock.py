"""A collection that starts inside `with lock:` does not run a call that takes the same lock (that thread
would deadlock with itself: the child hangs)."""

import gc
import threading

from fake_driver_child import cuda_reclaim, fake

cuda_reclaim.set_auto_drain("gc")
lock = threading.Lock()


def takes_the_lock():
    with lock:
        pass


future = cuda_reclaim.launch_host_func(0x5310, takes_the_lock)
assert fake.fake_cuda_run_host_functions() == 1
with lock:
    gc.collect()
assert not future.done()
cuda_reclaim.drain()
assert future.done() and future.exception() is None
print("done")
