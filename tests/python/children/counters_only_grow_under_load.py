"""Two threads launch host calls and keep_alive_until payloads on four fake CUDA threads while the drain
thread drains: no key of kind "counter" or "high_water_mark" (cuda_reclaim.COUNTERS) ever goes down between
two reads of stats(), and direct_pushes stays zero (nothing is pushed directly)."""

import threading
import time

from fake_driver_child import P, cuda_reclaim, fake

fake.fake_cuda_start_threads(4)
cuda_reclaim.set_auto_drain("thread")
ONLY_UP = {key for key, counter in cuda_reclaim.COUNTERS.items() if counter.kind != "gauge"}
stop = threading.Event()


def launcher(base):
    i = 0
    while not stop.is_set() and i < 200000:
        stream = base + (i % 4)
        cuda_reclaim.launch_host_func(stream, int)
        cuda_reclaim.keep_alive_until(stream, P())
        i += 1


threads = [threading.Thread(target=launcher, args=(0x6000 + 16 * k,)) for k in range(2)]
for t in threads:
    t.start()
previous = cuda_reclaim.stats()
reads = 0
try:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        now = cuda_reclaim.stats()
        reads += 1
        assert now["direct_pushes"] == 0, f"direct_pushes is {now['direct_pushes']} with no direct push at all"
        down = [k for k in ONLY_UP if now[k] < previous[k]]
        assert not down, f"counters went down: {[(k, previous[k], now[k]) for k in down]}"
        previous = now
finally:
    stop.set()
    for t in threads:
        t.join()
assert reads > 100 and previous["host_calls"] > 0 and previous["stream_host_functions"] > 0, (reads, previous)
print("done")
