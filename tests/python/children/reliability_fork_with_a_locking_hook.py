"""Child of test_reliability.py: fork does not hang when another before fork hook holds a lock the drain thread needs.

Ends by printing "done"; a hang is caught by the test's timeout."""

import os, threading, time, cuda_reclaim, scenario
entered = threading.Event()
lock = threading.Lock()
os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release)
class NeedsTheLock:
    def __del__(self):
        entered.set()
        time.sleep(0.2)            # a busy finalizer: the main thread's fork lands while it runs
        with lock:
            pass
with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
    cuda_reclaim.defer_release(NeedsTheLock())
assert entered.wait(30)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("done", flush=True)
