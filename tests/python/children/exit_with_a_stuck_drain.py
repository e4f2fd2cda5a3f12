"""The process exits while the drain thread is inside a long call: the exit hook gives up waiting for it, and
the exit report counts what that drain took as in_drain (the long call, the call behind it, a payload), not
as released. The test reads the report (CUDA_RECLAIM_REPORT=1)."""

import threading
import time

from fake_driver_child import P, cuda_reclaim, fake

started = threading.Event()


def long_call():
    started.set()
    time.sleep(8)  # the behaviour under test: a call still running when the process exits


cuda_reclaim.launch_host_func(0x5500, long_call)
cuda_reclaim.launch_host_func(0x5500, lambda: None)
cuda_reclaim.keep_alive_until(0x5500, P())
assert fake.fake_cuda_run_host_functions() == 3
cuda_reclaim.set_auto_drain("thread")
assert started.wait(30)
print("done")
