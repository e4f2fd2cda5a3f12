"""Child of test_reliability.py: fork from a finalizer on the drain thread leaves both processes draining.

Ends by printing "done"; a hang is caught by the test's timeout."""

import os, threading, time, cuda_reclaim, scenario
from cuda_reclaim import _auto
forked = threading.Event()
child_pid = []
class Forks:
    def __del__(self):
        pid = os.fork()
        if pid == 0:
            # The child: only this (drain) thread exists. Its loop must leave, and a new drain
            # thread must serve the child's own hand-overs.
            released = threading.Event()
            class Marker:
                def __del__(self): released.set()
            ok = True
            def check():
                nonlocal ok
                cuda_reclaim.defer_release(Marker())
                ok = released.wait(30)
            t = threading.Thread(target=check); t.start(); t.join()
            os._exit(0 if ok else 3)
        child_pid.append(pid)
        forked.set()
with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
    cuda_reclaim.defer_release(Forks())
assert forked.wait(30)
_, status = os.waitpid(child_pid[0], 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
released = threading.Event()
class Marker:
    def __del__(self): released.set()
cuda_reclaim.defer_release(Marker())
assert released.wait(30), "the parent's drain thread restarted after the fork"
print("done", flush=True)
