"""Finalizers run by a drain: exceptions go to sys.unraisablehook, re-entrant drain/defer_release."""

import sys
import weakref

import pytest

import cuda_reclaim


class Raises:
    def __del__(self):
        raise RuntimeError("finalizer failed")


class Counted:
    released = 0

    def __del__(self):
        Counted.released += 1


def test_finalizer_exception_goes_to_unraisablehook_and_the_drain_goes_on(drained, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_value))
    Counted.released = 0
    for i in range(10):
        cuda_reclaim.defer_release(Raises() if i % 2 else Counted())
    assert cuda_reclaim.drain() == 10
    assert Counted.released == 5
    assert len(seen) == 5 and all(isinstance(e, RuntimeError) for e in seen)


def test_an_exception_a_deallocator_leaves_set_is_reported_and_every_later_release_still_runs(
    drained, monkeypatch
):
    _native_producers = pytest.importorskip("_native_producers")
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_value))
    Counted.released = 0
    before = _native_producers.leaky_deallocated()
    # Three kinds interleaved in one batch: the faulty deallocator's exception is still set when the next
    # releases run (as when CPython unwinds a frame), and Python finalizers run regardless.
    for i in range(30):
        cuda_reclaim.defer_release(_native_producers.LeavesAnException() if i % 3 == 0 else Counted())
    assert cuda_reclaim.drain() == 30
    assert _native_producers.leaky_deallocated() - before == 10
    assert Counted.released == 20
    assert seen and all(isinstance(e, RuntimeError) and str(e) == "left set by a deallocator" for e in seen)
    # drain() returned its count, so it left no exception set (CPython turns a C function's result with an
    # exception set into a SystemError); and the next drain starts clean.
    cuda_reclaim.defer_release(Counted())
    assert cuda_reclaim.drain() == 1 and Counted.released == 21


class DrainsAgain:
    def __init__(self, log, depth):
        self.log, self.depth = log, depth

    def __del__(self):
        self.log.append(self.depth)
        if self.depth > 0:
            cuda_reclaim.defer_release(DrainsAgain(self.log, self.depth - 1))
            cuda_reclaim.drain()


def test_finalizer_that_defers_and_drains_again_is_safe(drained):
    log = []
    cuda_reclaim.defer_release(DrainsAgain(log, 20))
    released = cuda_reclaim.drain()
    while cuda_reclaim.pending():
        released += cuda_reclaim.drain()
    assert sorted(log) == list(range(21))
    assert cuda_reclaim.pending() == 0
    stats = cuda_reclaim.stats()
    assert stats["handed_over"] == stats["released"] + stats["pending"] + stats["leaked_after_close"] + stats[
        "abandoned_after_fork"
    ]


class Victim:
    pass


class ReleasesOthers:
    """A finalizer that hands many more objects over, as a graph's teardown can."""

    def __init__(self, others):
        self.others = others

    def __del__(self):
        for o in self.others:
            cuda_reclaim.defer_release(o)


def test_work_handed_over_by_a_finalizer_is_released_by_the_same_drain_or_the_next(drained):
    others = [Victim() for _ in range(300)]
    refs = [weakref.ref(o) for o in others]
    cuda_reclaim.defer_release(ReleasesOthers(others))
    del others
    total = cuda_reclaim.drain()
    total += cuda_reclaim.drain()
    assert total == 301
    assert all(r() is None for r in refs)
