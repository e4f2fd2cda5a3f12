"""After a trim, the next burst must again stay low for the whole trim delay before its memory goes back: a
stream of bursts keeps its blocks. CUDA_RECLAIM_RESERVED_CAPACITY is set by the test, below the bursts."""

import time

from cuda_reclaim import _reclaim
from fake_driver_child import P, cuda_reclaim, drain_thread_waits, wait_until

_reclaim._set_trim_delay(1.0)
cuda_reclaim.set_auto_drain("thread")


def burst():
    objects = [P() for _ in range(50000)]
    for obj in objects:
        cuda_reclaim.defer_release(obj)


burst()
wait_until(lambda: cuda_reclaim.stats()["trims"] == 1)
started = time.monotonic()
burst()
wait_until(lambda: cuda_reclaim.stats()["pending"] == 0)
drain_thread_waits()  # a trim that did not wait the delay again would have come before this wait
elapsed = time.monotonic() - started
trims = cuda_reclaim.stats()["trims"]
if elapsed < 0.9:  # else this machine was too slow for the check to mean anything
    assert trims == 1, f"{trims - 1} more trims {elapsed:.2f} s after the second burst (delay: 1 s)"
wait_until(lambda: cuda_reclaim.stats()["trims"] == 2)
drain_thread_waits(without_limit=True)  # no third trim is due for the same burst
assert cuda_reclaim.stats()["trims"] == 2
print("done")
