"""References handed over by std::threads that Python did not create, through the capsule's
CUhostFn-compatible host destructor, are released only by Python-side drains."""

import threading
import time
import weakref

import pytest

import cuda_reclaim
from conftest import conserved

_native_producers = pytest.importorskip("_native_producers")


class Payload:
    def __init__(self):
        self.releaser = None

    def __del__(self):
        Payload.releasers.add(threading.get_ident())


Payload.releasers = set()


def test_native_threads_hand_over_and_python_releases_on_the_draining_thread(drained):
    objs = [Payload() for _ in range(4000)]
    refs = [weakref.ref(o) for o in objs]
    before = cuda_reclaim.stats()
    assert _native_producers.hand_over(objs, 4) == 4
    del objs
    assert all(r() is not None for r in refs), "nothing is released on the native threads"
    assert cuda_reclaim.pending() == 4000
    Payload.releasers.clear()
    assert cuda_reclaim.drain() == 4000
    assert all(r() is None for r in refs)
    assert Payload.releasers == {threading.get_ident()}
    after = cuda_reclaim.stats()
    assert after["handed_over"] - before["handed_over"] == 4000
    assert conserved(after)


def test_auto_drain_thread_releases_while_the_main_thread_sleeps_in_c():
    # Runs in a child: the auto drain starts lazily there, on the C API import.
    from conftest import run_child_script

    result = run_child_script("auto_drain_with_native_threads.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
