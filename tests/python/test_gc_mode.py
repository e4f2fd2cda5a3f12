"""The automatic drain's "gc" mode: the collector's hook releases references and never runs a call (a call
may take a lock that the collecting thread holds); calls wait for another drain, with the wake-up fd readable.

Each program in children/ (named below) runs in a child with the fake driver, under a timeout."""

import pytest

import fake_cuda


@pytest.mark.parametrize("program", [
    "gc_mode_releases_references_but_runs_no_call.py",
    "gc_mode_runs_no_call_inside_the_collecting_threads_lock.py",
])
def test_gc_mode(program):
    fake_cuda.run_script(program, timeout=60)
