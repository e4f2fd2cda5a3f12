"""Child of test_reliability.py: after a finalizer switches the drain thread off later work still wakes the fd.

Ends by printing "done"; a hang is caught by the test's timeout."""

import select, threading, cuda_reclaim, _native_producers, scenario
from cuda_reclaim import _auto
stopped = threading.Event()
stopper = []  # the drain thread that switches itself off
class SwitchesOff:
    def __del__(self):
        stopper.append(threading.current_thread())
        cuda_reclaim.set_auto_drain("off")
        stopped.set()
# Enough work that the drain thread lingers (keeps the signal set) right before it stops.
with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
    for _ in range(100):
        cuda_reclaim.defer_release(object())
    cuda_reclaim.defer_release(SwitchesOff())
assert stopped.wait(30)
stopper[0].join(30)
assert not _auto.is_thread_running()
cuda_reclaim.drain()
_native_producers.hand_over([object()], 1)          # like CUDA's thread
readable, _, _ = select.select([cuda_reclaim.fileno()], [], [], 30)
assert readable, "the push after the self-stop must make the fd readable"
assert cuda_reclaim.drain() == 1
cuda_reclaim.set_auto_drain("thread")               # a new thread starts and must wake for new work
released = threading.Event()
class Marker:
    def __del__(self): released.set()
_native_producers.hand_over([Marker()], 1)
assert released.wait(30), "the restarted drain thread released the new work"
print("done", flush=True)
