"""close() while a drain is under way — from a call that drain runs, or on another thread while an explicit drain
is inside a finalizer — releases or cancels everything queued before it: no call runs after close() returned,
and nothing is left pending in the closed queue, where no drain would take it again.

Each program in children/ (named below) runs in a child with the fake driver, under a timeout."""

import pytest

import fake_cuda


@pytest.mark.parametrize("program", [
    "close_inside_a_call_cancels_the_rest_of_its_batch.py",
    "close_from_a_call_on_the_drain_thread_releases_its_batch.py",
    "drain_outliving_a_close_leaves_nothing_pending.py",
])
def test_close_during_a_drain(program):
    fake_cuda.run_script(program, timeout=60)
