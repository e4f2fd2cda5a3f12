"""The automatic drain: lazy thread start, thread/off modes, stopped before finalization."""

import inspect
import threading
import weakref

import pytest

import cuda_reclaim
import exit_report
from cuda_reclaim import _auto, _reclaim
from conftest import run_child_script

SCENARIOS = "auto_drain_scenarios.py"


class Payload:
    pass


def test_no_thread_until_something_is_handed_over():
    result = run_child_script(SCENARIOS, "no_thread_until_something_is_handed_over")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_thread_mode_releases_without_an_explicit_drain():
    previous = cuda_reclaim.set_auto_drain("thread")
    try:
        obj = Payload()
        gone = threading.Event()
        ref = weakref.ref(obj, lambda _: gone.set())
        cuda_reclaim.defer_release(obj)
        del obj
        assert gone.wait(30) and ref() is None
        assert _auto.is_thread_running()
    finally:
        cuda_reclaim.set_auto_drain(previous)


def test_off_mode_stops_the_thread_and_leaves_work_queued(drained):
    assert not _auto.is_thread_running()
    cuda_reclaim.defer_release(Payload())  # a hand-over starts a drain thread before it returns, if any
    assert cuda_reclaim.pending() == 1
    assert not _auto.is_thread_running()
    assert cuda_reclaim.drain() == 1


def test_set_auto_drain_rejects_unknown_modes_and_returns_the_previous_one(drained):
    with pytest.raises(ValueError, match="must be one of 'thread', 'off'"):
        cuda_reclaim.set_auto_drain("sometimes")
    assert cuda_reclaim.set_auto_drain("thread") == "off"
    assert cuda_reclaim.get_auto_drain() == "thread"
    assert cuda_reclaim.set_auto_drain("off") == "thread"


def test_drain_thread_runs_through_later_atexit_hooks_and_is_stopped_by_the_final_close():
    # atexit hooks run last-registered first. One registered after the import runs before cuda_reclaim's
    # hook: the drain thread still releases then. One registered before the import runs after it: the
    # thread has been stopped and joined, and the queue is closed, before finalization.
    result = run_child_script(
        SCENARIOS, "drain_thread_runs_through_later_atexit_hooks", env={"CUDA_RECLAIM_REPORT": "1"}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["before close: True False", "after close: False True"]
    assert exit_report.last_report(result.stderr)["conserved"] == "yes"


def test_finalizer_run_by_the_drain_thread_may_switch_the_auto_drain_off():
    result = run_child_script(SCENARIOS, "finalizer_on_the_drain_thread_switches_the_auto_drain_off")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_drain_thread_lingers_under_steady_traffic_and_stops_lingering_when_it_ends():
    # 4000 native pushes about 50 µs apart, released by the lingering drain thread (how few eventfd writes
    # that costs is pinned exactly by tests/cleanup:wakeup_test's linger tests and measured in
    # docs/benchmarks.md, not asserted here: it depends on scheduling). Once the traffic ends, the thread
    # must stop lingering: a later push is an empty→non-empty edge again (one write), and the fd is quiet.
    result = run_child_script(SCENARIOS, "drain_thread_lingers_under_steady_traffic")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize("name", ["_DrainWorker", "_NativeThread"])
def test_drain_worker_types_are_immutable(name):
    type_ = getattr(_reclaim, name)
    with pytest.raises(TypeError):
        type_.extra = 1
    assert not hasattr(type_, "extra")


def test_drain_worker_methods_carry_their_signatures():
    assert str(inspect.signature(_reclaim._DrainWorker.run)) == "(self, /)"
    assert str(inspect.signature(_reclaim._DrainWorker.stop)) == "(self, /)"
    assert str(inspect.signature(_reclaim._NativeThread.join)) == "(self, /, timeout=None)"


def test_native_thread_join_takes_its_timeout_by_position_or_keyword():
    started, finish = threading.Event(), threading.Event()
    ran = []

    def target():
        started.set()
        finish.wait()
        ran.append(threading.get_ident())

    thread = _reclaim._NativeThread(target)
    assert started.wait(30)
    # The target is inside finish.wait(): a zero timeout returns False however it is passed.
    assert thread.join(timeout=0) is False
    assert thread.join(0.0) is False
    assert thread.is_alive()
    with pytest.raises(TypeError, match="unexpected keyword argument 'limit'"):
        thread.join(limit=1)
    with pytest.raises(TypeError, match="multiple values for argument 'timeout'"):
        thread.join(1, timeout=1)
    with pytest.raises(TypeError, match="at most 1 argument"):
        thread.join(1, 2)
    # The package's timeout rules (docs/guide.md): negative or NaN is a ValueError, a bool a TypeError.
    with pytest.raises(ValueError, match=r"^_NativeThread.join\(\): timeout"):
        thread.join(-1)
    with pytest.raises(ValueError, match=r"^_NativeThread.join\(\): timeout"):
        thread.join(float("nan"))
    with pytest.raises(TypeError, match=r"^_NativeThread.join\(\): timeout"):
        thread.join(True)
    finish.set()
    assert thread.join(timeout=None) is True
    assert not thread.is_alive()
    assert ran == [thread.ident]


def test_a_signal_ends_a_native_thread_join_without_a_limit():
    result = run_child_script(SCENARIOS, "a_signal_ends_a_native_thread_join_without_a_limit", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["KeyboardInterrupt, thread alive: True", "joined after the signal: True"]


@pytest.mark.parametrize("mode", [1, None, b"thread"])
def test_set_auto_drain_names_itself_when_the_mode_is_not_a_str(mode):
    with pytest.raises(TypeError, match=r"^set_auto_drain\(\): the mode must be a str"):
        cuda_reclaim.set_auto_drain(mode)
