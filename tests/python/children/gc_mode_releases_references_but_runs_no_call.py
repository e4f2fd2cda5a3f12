"""The gc mode's drain releases references but requeues calls (they wait for a drain that may run user
code): the wake-up fd stays readable, and an explicit drain runs them."""

import gc
import select
import threading
import weakref

from fake_driver_child import P, cuda_reclaim, fake

cuda_reclaim.set_auto_drain("gc")
ran = []
future = cuda_reclaim.launch_host_func(0x5300, lambda: ran.append(threading.get_ident()))
keep = P()
ref = weakref.ref(keep)
cuda_reclaim.defer_release(keep)
del keep
assert fake.fake_cuda_run_host_functions() == 1
gc.collect()
assert ref() is None, "the gc hook releases references"
assert ran == [] and not future.done(), "the gc hook ran a user's call"
s = cuda_reclaim.stats()
assert s["pending"] == 1 and s["in_drain"] == 0, s
assert select.select([cuda_reclaim.fileno()], [], [], 0)[0], "the call was requeued without a wake-up"
gc.collect()
assert ran == [] and cuda_reclaim.stats()["pending"] == 1, "a second collection requeues it again"
assert cuda_reclaim.drain() == 1 and ran == [threading.get_ident()] and future.result() is None
assert cuda_reclaim.conserved()
print("done")
