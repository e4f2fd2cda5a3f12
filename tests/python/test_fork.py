"""Fork: before → drain and stop the thread; child → fresh queue, parent's queue counted as abandoned,
auto drain restarts lazily; parent → nothing lost, thread restarted. No multi-threaded-fork warning."""

import sys

import pytest

from conftest import run_child

_FORK_SCENARIO = """
import os, sys, time, weakref, threading, warnings, cuda_reclaim
from cuda_reclaim import _auto
import _native_producers

class P: pass
cuda_reclaim.defer_release(P())           # auto drain thread starts
assert _auto.is_thread_running()
cuda_reclaim.set_auto_drain("off")        # keep parent's work queued, to see it abandoned in the child
cuda_reclaim.set_auto_drain("thread")
cuda_reclaim.drain()
parent_objs = [P() for _ in range(50)]
parent_refs = [weakref.ref(o) for o in parent_objs]
_native_producers.hand_over(parent_objs, 2)
del parent_objs
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    s = cuda_reclaim.stats()
    ok = (s["pending"] == 0 and not _auto.is_thread_running() and not cuda_reclaim.is_closed()
          and s["handed_over"] == s["released"] + s["pending"] + s["leaked_after_close"]
                               + s["abandoned_after_fork"])
    child = P(); ref = weakref.ref(child)
    cuda_reclaim.defer_release(child); del child
    ok = ok and _auto.is_thread_running()  # restarted lazily by the hand-over
    deadline = time.monotonic() + 30
    while ref() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    ok = ok and ref() is None
    os.write(w, b"child-ok" if ok else repr(s).encode())
    os._exit(0)
os.close(w)
message = os.read(r, 1000).decode()
os.waitpid(pid, 0)
assert message == "child-ok", message
assert all(ref() is None for ref in parent_refs), "the before-fork drain released the parent's work"
assert _auto.is_thread_running(), "the parent's drain thread is restarted after fork"
print("ok")
"""


def test_fork_child_gets_a_fresh_queue_and_parent_keeps_draining():
    args = ("-W", "error::DeprecationWarning") if sys.version_info >= (3, 12) else ()
    result = run_child(_FORK_SCENARIO, args=args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"
    assert "multi-threaded" not in result.stderr


def test_work_queued_at_fork_time_is_abandoned_in_the_child_never_released_twice():
    # libc's fork() through ctypes skips Python's before-fork hook (which would drain), so the queue
    # is non-empty at fork time: only cleanup/'s pthread_atfork reset acts in the child.
    result = run_child(
        """
        import ctypes, os, cuda_reclaim
        cuda_reclaim.set_auto_drain("off")
        released = []
        class P:
            def __init__(self, i): self.i = i
            def __del__(self): released.append((os.getpid(), self.i))
        for i in range(10):
            cuda_reclaim.defer_release(P(i))
        pid = ctypes.CDLL(None).fork()
        if pid == 0:
            s = cuda_reclaim.stats()
            law = s["handed_over"] == (s["released"] + s["pending"] + s["leaked_after_close"]
                                    + s["abandoned_after_fork"])
            cuda_reclaim.drain()
            mine = [i for (p, i) in released if p == os.getpid()]
            os.write(1, f"child {s['pending']} {s['abandoned_after_fork']} {law} {mine}\\n".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        assert cuda_reclaim.drain() == 10, "the parent still owns and releases its work"
        assert sorted(i for (p, i) in released if p == os.getpid()) == list(range(10))
        print("parent ok", flush=True)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "parent ok" in result.stdout
    line = [l for l in result.stdout.splitlines() if l.startswith("child")][0]
    assert line == "child 0 10 True []", "child: nothing pending, 10 abandoned, law holds, none released"
