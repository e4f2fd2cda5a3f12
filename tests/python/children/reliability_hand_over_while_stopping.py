"""Child of test_reliability.py: finalizers on the drain thread hand references over while the drain
thread is being stopped, by the exit, by close() or by a fork (argv: ending, count).

Ends by printing "done"; a hang is caught by the test's timeout."""

import os
import sys
import threading
import time

import cuda_reclaim

ending, count = sys.argv[1], int(sys.argv[2])
# With a pause in each finalizer the drain thread is surely inside one when close() or fork() stops it.
pause = 0.0005 if ending in ("close", "fork") else 0.0


class Child:
    pass


releasing = threading.Event()  # a finalizer is running (on the drain thread: nothing else drains here)


class Parent:
    def __del__(self):
        releasing.set()
        if pause:
            time.sleep(pause)  # a busy finalizer: the close or the fork lands while it runs
        cuda_reclaim.defer_release(Child())


for _ in range(count):
    cuda_reclaim.defer_release(Parent())
if ending == "close":
    assert releasing.wait(30)  # the drain thread is inside its finalizers
    cuda_reclaim.close()
elif ending == "fork":
    assert releasing.wait(30)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print("done", flush=True)
