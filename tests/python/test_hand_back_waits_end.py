"""Every wait on the hand-back barrier ends (fake driver): at exit, against non-daemon threads, executors and a
shut barrier; in a fork child, with the asyncio lock held or a parent's ticket ended there; inside a drain, in a
finalizer; with two uvloop loops; and under every kind of waiter against concurrent attachments and hand-backs.
Beside them, three edges of the package around the barrier: the first import during threading's shutdown, a
node handle that pickles, a cycle through an attachment that the collector frees.

The scenarios are children/hand_back_edges_scenarios.py, and children/hand_back_edges_first_import_during_shutdown.py
for the import."""

import subprocess

import pytest

import fake_cuda
from conftest import run_child_script

SCENARIOS = "hand_back_edges_scenarios.py"
SHORT = 25  # seconds: a child that has not exited by then is hung


def run(name, *args, timeout=SHORT):
    return fake_cuda.run_script(SCENARIOS, name, *args, timeout=timeout)


def test_an_asyncio_waiter_in_a_non_daemon_thread_does_not_hold_the_exit():
    result = run("an_asyncio_waiter_in_a_non_daemon_thread_does_not_hold_the_exit")
    assert "asyncio waiter returned False" in result.stdout, result.stdout


def test_an_asyncio_await_after_the_barrier_was_shut_ends_at_once():
    run("an_asyncio_await_after_the_barrier_was_shut_ends_at_once")


def test_an_executor_worker_waiting_does_not_hold_the_exit():
    result = run("an_executor_worker_waiting_does_not_hold_the_exit")
    assert "executor waiter returned False" in result.stdout, result.stdout


def test_a_fork_while_another_thread_holds_the_asyncio_lock_does_not_hang_the_child():
    run("a_fork_while_another_thread_holds_the_asyncio_lock_does_not_hang_the_child")


def test_a_parents_ticket_ended_in_a_fork_child_leaves_its_barrier_counting():
    run("a_parents_ticket_ended_in_a_fork_child_leaves_its_barrier_counting")


def test_a_finalizer_that_a_drain_runs_never_waits_for_itself():
    run("a_finalizer_that_a_drain_runs_never_waits_for_itself")


def test_the_first_import_during_threading_shutdown_works():
    try:
        result = run_child_script("hand_back_edges_first_import_during_shutdown.py", timeout=SHORT)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the child hung (no exit within {expired.timeout} s); output so far:\n{expired.stdout}")
    assert "import ok" in result.stdout, result.stdout + result.stderr


def test_a_node_handle_pickles_and_copies_as_its_int():
    run("a_node_handle_pickles_and_copies_as_its_int")


def test_a_cycle_through_an_attachment_is_collected_once_cuda_let_go():
    run("a_cycle_through_an_attachment_is_collected_once_cuda_let_go")


def test_two_uvloop_loops_both_resume():
    run("two_uvloop_loops_both_resume")


def test_every_kind_of_waiter_against_concurrent_hand_backs_loses_no_wake_up():
    run("every_kind_of_waiter_against_concurrent_hand_backs_loses_no_wake_up", "200", timeout=90)
