"""PEP 788 (CPython 3.15+): the drain threads enter the interpreter through interpreter guards and views, and
refuse to enter once finalization is under way; before 3.15 that branch is compiled out (bindings/
interpreter_entry.h). Each test fails when a 3.15 build falls back to the older entry."""

import ast
import sys
import weakref

import pytest

import cuda_reclaim
from cuda_reclaim import _reclaim
from children.scenario import wait_until
from conftest import run_child_script

SCENARIOS = "pep788_scenarios.py"
PEP788 = sys.version_info >= (3, 15)


class Payload:
    pass


def child_result(name):
    """Runs a scenario of children/pep788_scenarios.py; returns the dict of its `result` line."""
    result = run_child_script(SCENARIOS, name)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("result ")]
    assert len(lines) == 1, (result.stdout, result.stderr)
    return ast.literal_eval(lines[0][len("result ") :])


def test_the_pep788_branch_is_compiled_in_exactly_from_3_15():
    stats = _reclaim._DrainWorker._entry_stats()
    assert stats["pep788"] is PEP788
    if not PEP788:
        assert stats["guarded_entries"] == 0
        assert stats["refused_entries"] == 0


def test_drain_thread_drains_are_guarded_entries():
    previous = cuda_reclaim.set_auto_drain("thread")
    try:
        before = _reclaim._DrainWorker._entry_stats()
        refs = []
        for _ in range(3):
            obj = Payload()
            refs.append(weakref.ref(obj))
            cuda_reclaim.defer_release(obj)
            del obj
            wait_until(lambda: refs[-1]() is None, "the drain thread released it")
        after = _reclaim._DrainWorker._entry_stats()
    finally:
        cuda_reclaim.set_auto_drain(previous)
    if PEP788:
        # One guarded entry per drain at least (a drain may release more than one hand-over).
        assert after["guarded_entries"] > before["guarded_entries"]
        assert after["refused_entries"] == before["refused_entries"]
    else:
        assert after == {"pep788": False, "guarded_entries": 0, "refused_entries": 0}


@pytest.mark.parametrize("name", ["native_thread_enters", "native_thread_started_in_an_atexit_hook"])
def test_native_thread_enters_through_a_view_while_the_interpreter_runs(name):
    result = child_result(name)
    assert result["ran"]
    assert result["pep788"] is PEP788
    assert result["guarded_entries"] == (1 if PEP788 else 0)
    assert result["refused_entries"] == 0


def test_native_thread_started_while_finalizing_calls_nothing():
    result = child_result("native_thread_started_while_finalizing")
    assert result["finalizing"]
    assert result["started"] is True
    if PEP788:
        # Refused at once: the target never runs, no forced unwind, no parked thread; the join returns.
        assert not result["ran"]
        assert result["joined"]
        assert (result["guarded_entries"], result["refused_entries"]) == (0, 1)
    else:
        # PyGILState_Ensure: ended by a forced unwind on 3.10-3.13, let in on 3.14 (then the drain loop's
        # own check of finalization is what keeps it from releasing anything).
        assert (result["guarded_entries"], result["refused_entries"]) == (0, 0)


def test_drain_thread_woken_while_finalizing_refuses_to_enter():
    result = child_result("drain_thread_woken_while_finalizing")
    assert result["finalizing"]
    before, after = result["before"], result["after"]
    if PEP788:
        assert before["guarded_entries"] >= 1  # the drain that released the payload
        assert after["refused_entries"] == before["refused_entries"] + 1
        assert after["guarded_entries"] == before["guarded_entries"]
    else:
        assert before == after == {"pep788": False, "guarded_entries": 0, "refused_entries": 0}


def test_exit_goes_on_while_a_finalizer_on_the_drain_thread_waits_for_the_main_thread():
    # The guard covers the wait for the GIL only: held across the drain, it would keep Py_FinalizeEx
    # waiting for this finalizer for ever (the child would time out).
    result = child_result("exit_while_a_finalizer_on_the_drain_thread_waits_for_the_main_thread")
    assert result == {"exiting": True}
