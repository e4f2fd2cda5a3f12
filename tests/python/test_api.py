"""The public API: drain, pending, stats, close, defer_release, fileno, argument errors."""

import gc
import select
import threading
import time
import weakref

import pytest

import cuda_reclaim
import exit_report
from children.scenario import holds_within
from conftest import conserved, run_child_script

SCENARIOS = "api_scenarios.py"


class Payload:
    pass


def test_stats_are_plain_ints_with_the_documented_keys(drained):
    stats = cuda_reclaim.stats()
    assert tuple(stats) == tuple(cuda_reclaim.COUNTERS)
    assert all(type(value) is int for value in stats.values())
    assert conserved(stats)


def test_defer_release_keeps_the_object_alive_until_drain(drained):
    obj = Payload()
    ref = weakref.ref(obj)
    assert cuda_reclaim.defer_release(obj) is True
    del obj
    gc.collect()
    assert ref() is not None, "the queue holds a reference until a drain"
    assert cuda_reclaim.pending() == 1
    assert cuda_reclaim.drain() == 1
    assert ref() is None
    assert cuda_reclaim.pending() == 0


def test_counters_follow_a_round_trip_and_conserve(drained):
    before = cuda_reclaim.stats()
    for _ in range(100):
        cuda_reclaim.defer_release(Payload())
    middle = cuda_reclaim.stats()
    assert middle["handed_over"] - before["handed_over"] == 100
    assert middle["pending"] == 100
    assert conserved(middle)
    assert cuda_reclaim.drain() == 100
    after = cuda_reclaim.stats()
    assert after["released"] - before["released"] == 100
    assert after["nonempty_drains"] == before["nonempty_drains"] + 1
    assert after["max_pending"] >= 100
    assert after["pending"] == 0
    assert conserved(after)
    for key, counter in cuda_reclaim.COUNTERS.items():
        if counter.kind != "gauge":
            assert after[key] >= before[key], f"{key} must never decrease"


def test_drain_honours_max_items(drained):
    for _ in range(10):
        cuda_reclaim.defer_release(Payload())
    assert cuda_reclaim.drain(3) == 3
    assert cuda_reclaim.drain(max_items=0) == 0
    assert cuda_reclaim.pending() == 7
    assert cuda_reclaim.drain(max_items=None) == 7


def test_empty_drain_returns_zero_without_allocating(drained):
    import itertools
    import tracemalloc

    def traced_after(calls):
        tracemalloc.start()
        try:
            for _ in itertools.repeat(None, calls):  # no int object per iteration
                assert cuda_reclaim.drain() == 0
            return tracemalloc.get_traced_memory()[1]  # peak
        finally:
            tracemalloc.stop()

    cuda_reclaim.drain()
    # Whatever the loop itself costs is the same for 10 and 100000 calls; an allocation per empty
    # drain() would grow with the count (the result 0 is a cached small int).
    assert traced_after(100000) == traced_after(10)


def test_drain_timeout_waits_for_work_from_another_thread(drained):
    waiter = threading.get_native_id()

    def later():  # hands over once the waiter sleeps in drain()'s poll(2), the kernel function /proc names
        def waiter_polls():
            with open(f"/proc/self/task/{waiter}/wchan") as wchan:
                return "poll" in wchan.read()

        holds_within(waiter_polls)
        cuda_reclaim.defer_release(Payload())

    producer = threading.Thread(target=later)
    producer.start()
    try:
        # The wait ends because work arrived, long before the 30 s limit.
        assert cuda_reclaim.drain(timeout=30.0) == 1
    finally:
        producer.join()


def test_drain_timeout_returns_zero_when_nothing_arrives(drained):
    assert cuda_reclaim.drain(timeout=0.01) == 0


def test_drain_releases_the_gil_while_it_waits(drained):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)  # the ticker's pace: it ticks only while it gets the GIL

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        cuda_reclaim.drain(timeout=0.2)
    finally:
        stop.set()
        thread.join()
    assert len(ticks) > 5, "another Python thread must run while drain() waits"


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        (("x",), {}, TypeError, r"drain\(\): max_items must be an int or None"),
        ((True,), {}, TypeError, r"drain\(\): max_items must be an int or None, not bool"),
        ((-1,), {}, ValueError, r"drain\(\): max_items must be >= 0"),
        ((), {"timeout": -1}, ValueError, r"drain\(\): timeout must be >= 0"),
        ((), {"timeout": float("nan")}, ValueError, r"drain\(\): timeout must be >= 0"),
        ((), {"timeout": "soon"}, TypeError, r"drain\(\): timeout must be a number"),
        ((), {"timeout": False}, TypeError, r"drain\(\): timeout must be a number"),
        ((), {"budget": 1}, TypeError, r"drain\(\) got an unexpected keyword argument 'budget'"),
        ((1, 2, 3), {}, TypeError, r"drain\(\) takes at most 2 arguments"),
        ((1,), {"max_items": 1}, TypeError, r"drain\(\) got multiple values for argument 'max_items'"),
    ],
)
def test_drain_rejects_bad_arguments_clearly(drained, args, kwargs, error, message):
    with pytest.raises(error, match=message):
        cuda_reclaim.drain(*args, **kwargs)


def test_fileno_is_readable_exactly_while_work_is_pending(drained):
    fd = cuda_reclaim.fileno()
    assert select.select([fd], [], [], 0)[0] == []
    cuda_reclaim.defer_release(Payload())
    assert select.select([fd], [], [], 0)[0] == [fd]
    cuda_reclaim.drain()
    assert select.select([fd], [], [], 0)[0] == []


def test_defer_release_from_many_python_threads(drained):
    objs = [Payload() for _ in range(2000)]
    refs = [weakref.ref(o) for o in objs]

    def hand(chunk):
        for o in chunk:
            cuda_reclaim.defer_release(o)

    threads = [threading.Thread(target=hand, args=(objs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    del objs, t
    assert cuda_reclaim.drain() == 2000
    assert all(r() is None for r in refs)


def test_get_include_holds_the_c_api_header():
    import os

    header = os.path.join(cuda_reclaim.get_include(), "cuda_reclaim", "cuda_reclaim.h")
    assert os.path.isfile(header)
    with open(header) as f:
        assert "cuda_reclaim_import" in f.read()


def test_close_is_final_idempotent_and_counts_later_pushes_as_leaked():
    result = run_child_script(SCENARIOS, "close_is_final_and_counts_later_pushes_as_leaked")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_atexit_hook_drains_what_is_left_and_closes():
    result = run_child_script(SCENARIOS, "atexit_hook_drains_what_is_left", env={"CUDA_RECLAIM_REPORT": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["later hook ran first", "released at exit"]
    report = exit_report.last_report(result.stderr)
    assert report["released"] == 1 and report["pending"] == 0, report


def test_import_in_a_subinterpreter_is_refused_with_a_clear_error():
    _testcapi = pytest.importorskip("_testcapi")
    if not hasattr(_testcapi, "run_in_subinterp"):
        pytest.skip("this CPython has no _testcapi.run_in_subinterp")
    result = run_child_script(SCENARIOS, "import_in_a_subinterpreter")
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout, result.stdout + result.stderr
    assert "main interpreter" in result.stdout or "does not support" in result.stdout
