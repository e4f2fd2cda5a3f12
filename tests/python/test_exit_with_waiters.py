"""A thread that waits for CUDA never holds the exit: the barrier's exit hook, registered once per process at
import, closes the barrier before Python joins the threads that are not daemons (concurrent.futures' workers
among them), and the waits there return False. Each scenario runs in a child whose driver is the fake: a program
of children/exit_with_waiters_scenarios.py (fake_cuda.run_script)."""

import pytest

import fake_cuda

SCENARIOS = "exit_with_waiters_scenarios.py"

# What every waiter waits for: a graph that CUDA keeps for good (the scenarios' held()).
WAITS = ["Attachment.wait", "NodeHandle.wait", "flush", "wait_handed_back"]


@pytest.mark.parametrize("wait", WAITS)
def test_an_executor_worker_waiting_for_cuda_does_not_hold_the_exit(wait):
    result = fake_cuda.run_script(SCENARIOS, "an_executor_worker_waits", wait, timeout=60)
    assert "main ends" in result.stdout
    expected = "returned 0" if wait == "flush" else "returned False"
    assert expected in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("wait", WAITS)
def test_a_plain_thread_waiting_for_cuda_does_not_hold_the_exit(wait):
    result = fake_cuda.run_script(SCENARIOS, "a_plain_thread_waits", wait, timeout=60)
    expected = "returned 0" if wait == "flush" else "returned False"
    assert expected in result.stdout, result.stdout + result.stderr


def test_attachments_and_waits_add_no_threading_exit_hooks():
    # Each keep_alive, keep_alive_until and wait leaves threading's exit hooks as the import left them.
    result = fake_cuda.run_script(SCENARIOS, "attachments_and_waits_add_no_threading_exit_hooks", timeout=120)
    assert result.stdout.splitlines() == ["ok"], result.stdout


def test_threads_waiting_at_once_raise_nothing():
    # Threads switching as often as they can while three of them wait at once, and other exit hooks are
    # registered meanwhile (as modules imported then would).
    result = fake_cuda.run_script(SCENARIOS, "threads_waiting_at_once_raise_nothing", timeout=120)
    assert result.stdout.splitlines() == ["ok"], result.stdout
