"""Child of test_reliability.py: reload does not register the process hooks twice.

Ends by printing "done"; a hang is caught by the test's timeout."""

import importlib, os, threading, cuda_reclaim, _native_producers
from cuda_reclaim import _auto
cuda_reclaim = importlib.reload(cuda_reclaim)
cuda_reclaim = importlib.reload(cuda_reclaim)
cuda_reclaim.defer_release(object())
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
assert _auto.is_thread_running(), "every fork restarts the parent's drain thread"
released = threading.Event()
class Marker:
    def __del__(self): released.set()
_native_producers.hand_over([Marker()], 1)   # a push from a native thread: only the drain thread releases it
assert released.wait(30)
print("done", flush=True)
