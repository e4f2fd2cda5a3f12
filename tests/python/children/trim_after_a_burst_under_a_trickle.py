"""After a burst beyond the reserved capacity (CUDA_RECLAIM_RESERVED_CAPACITY, set by the test), the drain thread
frees the memory once the queue stayed low for the trim delay, also while a trickle of hand-overs goes on."""

import time

from cuda_reclaim import _reclaim
from fake_driver_child import P, cuda_reclaim, wait_until

_reclaim._set_trim_delay(0.2)
cuda_reclaim.set_auto_drain("thread")
burst = [P() for _ in range(50000)]
for obj in burst:
    cuda_reclaim.defer_release(obj)
del burst, obj
wait_until(lambda: cuda_reclaim.stats()["pending"] == 0)
deadline = time.monotonic() + 30
while cuda_reclaim.stats()["trims"] == 0 and time.monotonic() < deadline:
    cuda_reclaim.defer_release(P())
    time.sleep(0.02)  # the trickle: one hand-over every 20 ms
s = cuda_reclaim.stats()
assert s["trims"] == 1, s
assert not _reclaim._trim_would_help()
print("done")
