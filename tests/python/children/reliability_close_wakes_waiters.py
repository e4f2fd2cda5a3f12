"""Child of test_reliability.py: close() wakes a thread blocked in drain(timeout=...) (argv: the timeout,
as float() reads it), and a drain after close returns at once.

Ends by printing "done"; a hang is caught by the test's timeout."""

import sys
import threading
import time

import cuda_reclaim

timeout = float(sys.argv[1])
cuda_reclaim.set_auto_drain("off")
entered = threading.Event()
result = []


def waiter():
    entered.set()
    result.append(cuda_reclaim.drain(timeout=timeout))


thread = threading.Thread(target=waiter)
thread.start()
entered.wait()
# Not synchronization: the test holds whenever close() comes (a waiter that has not blocked yet returns at
# once too); the pause only makes the blocked case, the one that used to hang, the likely one.
time.sleep(0.05)
cuda_reclaim.close()
thread.join(30)
assert not thread.is_alive(), "close() must wake the waiter"
assert result == [0], result
assert cuda_reclaim.drain(timeout=timeout) == 0, "a drain after close returns at once"
print("done", flush=True)
