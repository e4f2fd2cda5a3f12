"""An explicit drain on a worker thread is inside a finalizer when the main thread closes; the call behind that
finalizer in the same dequeue was queued before the close, and close() cancelled it. Nothing is left pending in
the closed queue, where no drain would take it again."""

import threading

from fake_driver_child import cuda_reclaim, fake

entered = threading.Event()
closed = threading.Event()


class Blocks:
    def __del__(self):
        entered.set()
        closed.wait(30)


cuda_reclaim.set_auto_drain("off")  # only the worker's drain takes the two items
cuda_reclaim.keep_alive_until(0x5610, Blocks())
future = cuda_reclaim.launch_host_func(0x5610, lambda: None)
assert fake.fake_cuda_run_host_functions() == 2
assert cuda_reclaim.stats()["pending"] == 2
worker = threading.Thread(target=cuda_reclaim.drain)
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
