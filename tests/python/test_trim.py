"""trim(): the memory a burst left behind is freed; nothing queued is lost or released by it."""

import threading
import weakref

import cuda_reclaim
import fake_cuda
from children.scenario import wait_until
from cuda_reclaim import _reclaim

# Above the default reserved capacity (64 Ki references), so that the burst grows the queue.
BURST = 100_000


class Item:
    pass


def _counters():
    stats = cuda_reclaim.stats()
    return {key: stats[key] for key in ("handed_over", "released", "pending", "leaked_after_close")}


def test_nothing_to_free_without_a_burst(drained):
    cuda_reclaim.trim()  # whatever earlier tests left behind
    cuda_reclaim.defer_release(Item())
    assert cuda_reclaim.drain() == 1
    assert cuda_reclaim.trim() is False


def test_after_a_burst_pending_references_move_and_later_drains_release_them(drained):
    shared = Item()
    for _ in range(BURST):
        cuda_reclaim.defer_release(shared)
    assert cuda_reclaim.drain(BURST - 10) == BURST - 10
    before = _counters()
    assert cuda_reclaim.trim() is True
    assert _counters() == before  # a trim releases nothing and counts nothing
    assert cuda_reclaim.trim() is False  # freed already
    last = Item()
    alive = weakref.ref(last)
    cuda_reclaim.defer_release(last)
    del last
    assert cuda_reclaim.drain() == 11
    assert alive() is None
    assert cuda_reclaim.conserved()


class TrimsInFinalizer:
    results = []

    def __del__(self):
        TrimsInFinalizer.results.append(cuda_reclaim.trim())


def test_trim_from_a_finalizer_run_by_a_drain_returns_false_and_the_drain_goes_on(drained):
    shared = Item()
    for _ in range(BURST):
        cuda_reclaim.defer_release(shared)
    TrimsInFinalizer.results = []
    cuda_reclaim.defer_release(TrimsInFinalizer())
    assert cuda_reclaim.drain() == BURST + 1
    assert TrimsInFinalizer.results == [False]  # busy: its own drain is in the storage
    assert cuda_reclaim.trim() is True  # afterwards it can


def test_the_drain_thread_frees_a_burst_once_the_queue_is_quiet():
    previous = cuda_reclaim.set_auto_drain("off")
    try:
        cuda_reclaim.drain()
        cuda_reclaim.trim()
        shared = Item()
        for _ in range(BURST):  # with nobody draining: the queue grows beyond its reserve
            cuda_reclaim.defer_release(shared)
        assert _reclaim._trim_would_help()
        cuda_reclaim.set_auto_drain("thread")
        wait_until(lambda: cuda_reclaim.pending() == 0, "the drain thread drained the burst", timeout=60.0)
        wait_until(lambda: not _reclaim._trim_would_help(), "the drain thread trimmed", timeout=60.0)
        assert cuda_reclaim.trim() is False  # nothing left to free
        assert cuda_reclaim.conserved()
    finally:
        cuda_reclaim.set_auto_drain(previous)


class TrimsOnItsThread:
    calls = []

    def __del__(self):
        TrimsOnItsThread.calls.append((threading.get_ident(), cuda_reclaim.trim()))


def test_trim_from_a_finalizer_on_the_drain_thread_returns_false():
    previous = cuda_reclaim.set_auto_drain("off")
    try:
        cuda_reclaim.drain()
        shared = Item()
        for _ in range(BURST):  # something to free, so only the drain in progress can refuse
            cuda_reclaim.defer_release(shared)
        TrimsOnItsThread.calls = []
        cuda_reclaim.defer_release(TrimsOnItsThread())
        cuda_reclaim.set_auto_drain("thread")
        wait_until(lambda: TrimsOnItsThread.calls, "the drain thread ran the finalizer", timeout=60.0)
        ((thread, trimmed),) = TrimsOnItsThread.calls
        assert thread != threading.main_thread().ident
        assert trimmed is False  # busy: the drain thread's own drain is in the storage
        wait_until(lambda: cuda_reclaim.pending() == 0, "the drain thread drained the burst", timeout=60.0)
        assert cuda_reclaim.conserved()
    finally:
        cuda_reclaim.set_auto_drain(previous)


def test_the_drain_thread_trims_after_a_burst_while_a_trickle_goes_on():
    fake_cuda.run_script("trim_after_a_burst_under_a_trickle.py", timeout=60, CUDA_RECLAIM_RESERVED_CAPACITY="1024")


def test_the_drain_thread_waits_the_trim_delay_again_after_each_burst():
    fake_cuda.run_script("trim_delay_starts_over_after_each_burst.py", timeout=60,
                         CUDA_RECLAIM_RESERVED_CAPACITY="1024")
