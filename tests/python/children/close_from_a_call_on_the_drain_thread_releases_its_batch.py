"""One stream: a call, then ten keep_alive_until payloads behind it, all in one dequeue of the drain thread.
The call closes the queue. The payloads were queued before the close, and close() releases everything queued
before it: once the drain thread has left its drain, nothing is pending and every payload is gone."""

from fake_driver_child import cuda_reclaim, fake, wait_until

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
assert cuda_reclaim.stats()["pending"] == 11
cuda_reclaim.set_auto_drain("thread")
wait_until(future.done)
wait_until(lambda: cuda_reclaim.stats()["in_drain"] == 0)  # the drain thread has left its drain
s = cuda_reclaim.stats()
assert cuda_reclaim.conserved(s), s
assert s["pending"] == 0, f"queued before close() and left pending after it: {s}"
assert order.count("payload") == 10, order
print("done")
