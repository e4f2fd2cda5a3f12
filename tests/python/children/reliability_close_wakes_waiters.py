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


def blocked_in_the_wait(tid):
    """The thread `tid` sleeps in drain(timeout)'s poll(2) on the queue's fds, not in a futex wait for the
    GIL: /proc names the kernel function a sleeping thread waits in."""
    with open(f"/proc/self/task/{tid}/wchan") as wchan:
        return "poll" in wchan.read()


thread = threading.Thread(target=waiter)
thread.start()
assert entered.wait(30)
deadline = time.monotonic() + 30
while not blocked_in_the_wait(thread.native_id):  # close() comes while the waiter is blocked in its wait
    assert time.monotonic() < deadline, "the waiter never blocked in drain()"
    time.sleep(0.001)  # the pace of a poll with a deadline, on a state the kernel exposes
cuda_reclaim.close()
thread.join(30)
assert not thread.is_alive(), "close() must wake the waiter"
assert result == [0], result
assert cuda_reclaim.drain(timeout=timeout) == 0, "a drain after close returns at once"
print("done", flush=True)
