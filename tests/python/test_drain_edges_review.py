"""The drain's edges, attacked: a drain that outlives close() (its thread stopped by the close, or a gc-mode
drain on another thread) must not leave what it took pending in a closed queue that no drain takes again;
the drain thread's trim clock starts over after each trim.

Each scenario runs in a child with the fake driver (tests/graph/fake_libcuda.cc), under a timeout."""

import fake_cuda

LIMIT = 60


def test_close_from_a_call_on_the_drain_thread_releases_the_rest_of_its_batch():
    # One stream: the call, then ten keep_alive_until payloads behind it, all in one dequeue of the drain
    # thread. The call closes. The payloads were queued before the close: close() releases everything
    # queued before it, so after the drain thread leaves nothing may be pending and every payload is gone.
    # (The close stops the drain thread; the stopped drain put the rest of its dequeue back at the front of
    # the closed queue, after the close's final drain, where nothing takes it until a second close().)
    fake_cuda.run(
        """
order = []
class Q:
    def __del__(self):
        order.append("payload")
def closing():
    order.append("call")
    cuda_reclaim.close()
    order.append("closed")
future = cuda_reclaim.launch_host_func(0x5600, closing)
for _ in range(10):
    cuda_reclaim.keep_alive_until(0x5600, Q())
assert fake.fake_cuda_run_host_functions() == 11
assert cuda_reclaim.pending() == 11
cuda_reclaim.set_auto_drain("thread")
wait_until(lambda: future.done())
time.sleep(0.3)  # the drain thread leaves its drain
s = cuda_reclaim.stats()
assert cuda_reclaim.conserved(s), s
assert s["pending"] == 0 and s["in_drain"] == 0, f"queued before close() and left pending after it: {s}"
assert order.count("payload") == 10, order
print("done")
""",
        timeout=LIMIT,
    )


def test_a_gc_drain_that_outlives_a_close_on_another_thread_leaves_nothing_pending():
    # A gc-mode drain on a worker thread is inside a finalizer (GIL released) when the main thread closes;
    # the call behind that finalizer in the same dequeue was queued before the close, and close() cancelled
    # it. The gc drain then gives it back to the front of the closed queue, where no drain takes it again.
    fake_cuda.run(
        """
import gc
gc.disable()  # only the worker's collection drains: an automatic one on this thread would run Blocks here
entered = threading.Event()
closed = threading.Event()
class Blocks:
    def __del__(self):
        entered.set()
        closed.wait(30)
cuda_reclaim.set_auto_drain("gc")
cuda_reclaim.keep_alive_until(0x5610, Blocks())
future = cuda_reclaim.launch_host_func(0x5610, lambda: None)
assert fake.fake_cuda_run_host_functions() == 2
assert cuda_reclaim.pending() == 2
worker = threading.Thread(target=gc.collect)
worker.start()
assert entered.wait(30)
cuda_reclaim.close()
closed.set()
worker.join()
assert future.cancelled()
s = cuda_reclaim.stats()
assert cuda_reclaim.conserved(s), s
assert s["pending"] == 0 and s["in_drain"] == 0, f"left pending in the closed queue: {s}"
print("done")
""",
        timeout=LIMIT,
    )


def test_the_drain_thread_waits_the_trim_delay_again_after_each_burst():
    # After a trim, the next burst must again stay at or below the reserved capacity for the whole delay
    # before its memory goes back: a stream of bursts keeps its blocks. (The trim clock kept the moment the
    # first burst went low, so every later burst was trimmed as soon as it was drained, several times over.)
    fake_cuda.run(
        """
_reclaim._set_trim_delay(1.0)
cuda_reclaim.set_auto_drain("thread")
def burst():
    objects = [P() for _ in range(50000)]  # far beyond the reserved capacity below
    for obj in objects:
        cuda_reclaim.defer_release(obj)
burst()
wait_until(lambda: cuda_reclaim.stats()["trims"] == 1)
started = time.monotonic()
burst()
wait_until(lambda: cuda_reclaim.pending() == 0)
time.sleep(0.3)
elapsed = time.monotonic() - started
s = cuda_reclaim.stats()
if elapsed < 0.9:  # else this machine was too slow for the check to mean anything
    assert s["trims"] == 1, f"{s['trims'] - 1} more trims {elapsed:.2f} s after the second burst (delay: 1 s)"
wait_until(lambda: cuda_reclaim.stats()["trims"] == 2)
time.sleep(0.5)
assert cuda_reclaim.stats()["trims"] == 2
print("done")
""",
        timeout=LIMIT,
        CUDA_RECLAIM_RESERVED_CAPACITY="1024",
    )
