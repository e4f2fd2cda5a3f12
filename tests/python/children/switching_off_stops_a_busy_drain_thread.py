"""set_auto_drain("off") stops a busy drain thread before its next call, and what the thread had taken goes
back to the front of the queue in order."""

import threading
import time

from cuda_reclaim import _auto
from fake_driver_child import cuda_reclaim, fake, wait_until

ran = []


def slow(i):
    time.sleep(0.002)  # a call that takes a while, so that the thread is busy when it is stopped
    ran.append(i)


futures = [cuda_reclaim.launch_host_func(0x5400, slow, i) for i in range(3000)]
assert fake.fake_cuda_run_host_functions() == 3000
cuda_reclaim.set_auto_drain("thread")
wait_until(lambda: len(ran) >= 20)
cuda_reclaim.set_auto_drain("off")
stopped_at = len(ran)
for thread in [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]:
    thread.join(30)  # once no drain thread is left, no call can run but by a drain() here
assert not _auto.is_thread_running(), "the stopped drain thread never ended"
assert len(ran) == stopped_at, f"{len(ran) - stopped_at} calls ran after set_auto_drain('off') returned"
s = cuda_reclaim.stats()
assert s["in_drain"] == 0 and s["pending"] == 3000 - stopped_at, s
assert cuda_reclaim.conserved(s), s
cuda_reclaim.drain()  # what went back is taken first, in order
assert ran == list(range(3000)), "out of order after the put-back"
assert all(f.done() for f in futures)
print("done")
