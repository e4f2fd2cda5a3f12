"""launch_host_func against the fake libcuda: the call runs in a drain (never on CUDA's thread) into its
Future, in stream order, with exceptions, cancellation, close, fork, exit and finalizers that launch more.
Each scenario runs in a child interpreter under a timeout: a program of children/host_call_scenarios.py
(fake_cuda.run_script)."""

import pytest

import cuda_reclaim
import fake_cuda
from exit_report import find_reports, last_report

SCENARIOS = "host_call_scenarios.py"


def test_launch_host_func_checks_its_arguments():
    with pytest.raises(TypeError, match=r"\(\): fn must be callable"):
        cuda_reclaim.launch_host_func(0, "print")
    with pytest.raises(TypeError, match=r"launch_host_func\(\) expects a stream"):
        cuda_reclaim.launch_host_func(object(), print)
    with pytest.raises(ValueError, match="handle"):
        cuda_reclaim.launch_host_func(-1, print)


def test_the_package_imports_what_a_launch_needs_with_itself_and_nothing_at_exit():
    # An import at exit (say, of launch_host_func's Future) may register logging's fork hooks while another
    # thread is between its before- and after-fork hooks: that thread then releases a lock it never took,
    # and the report of it, printed during finalization, kills the process. So the package imports it all
    # with itself. This atexit hook, registered first, runs after the package's.
    from conftest import run_child_script

    result = run_child_script(
        "host_calls_import_with_the_package.py", env={"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["imported with the package: True", "imported at exit: []"], result.stdout


def test_without_a_driver_nothing_is_launched_and_nothing_kept():
    from conftest import run_child_script

    result = run_child_script(
        SCENARIOS, "without_a_driver", env={"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"}
    )
    assert result.returncode == 0, result.stderr
    assert "DriverError: launch_host_func(): the CUDA driver library /nonexistent/libcuda.so.1" in result.stdout


def test_the_call_runs_in_a_drain_into_its_future_never_on_cudas_thread():
    fake_cuda.run_script(SCENARIOS, "runs_in_a_drain_into_its_future")


def test_exceptions_go_to_the_future_with_their_traceback():
    fake_cuda.run_script(SCENARIOS, "exceptions_go_to_the_future")


def test_a_call_after_a_deallocator_that_leaves_an_exception_set_runs_clean():
    fake_cuda.run_script(SCENARIOS, "a_call_after_a_deallocator_that_leaves_an_exception_runs_clean")


@pytest.mark.parametrize("then", ["drain", "close"])
def test_the_report_before_a_call_may_drain_again_or_close(then):
    fake_cuda.run_script(SCENARIOS, "the_report_before_a_call_may_drain_again_or_close", then)


def test_calls_of_one_stream_run_in_stream_order_whichever_cuda_thread_and_drain_runs_them():
    # Four CUDA threads take turns on three streams (so consecutive host functions of one stream push
    # through different producer lanes); the automatic drain thread and small budgeted drains on the main
    # thread take the calls concurrently. Per stream, the calls must run in launch order.
    fake_cuda.run_script(SCENARIOS, "stream_order_across_cuda_threads_and_drains")


def test_a_call_that_drains_again_runs_the_later_calls_of_its_stream_after_it_returns():
    fake_cuda.run_script(SCENARIOS, "a_call_that_drains_again")


def test_a_cancelled_future_never_runs_and_its_references_go_when_cuda_hands_the_call_back():
    fake_cuda.run_script(SCENARIOS, "a_cancelled_future_never_runs")


def test_after_close_nothing_runs_futures_are_cancelled_and_references_released():
    fake_cuda.run_script(SCENARIOS, "after_close_nothing_runs")


def test_a_call_that_closes_cancels_the_calls_that_would_run_after_it():
    fake_cuda.run_script(SCENARIOS, "a_call_that_closes")


@pytest.mark.parametrize("budget", ["all", "1"])
def test_a_close_from_inside_a_drain_cancels_what_that_drain_took_and_had_not_run(budget):
    fake_cuda.run_script(SCENARIOS, "a_call_that_closes_from_a_drain_that_took_other_streams_calls", budget)


def test_a_launch_racing_close_on_another_thread_is_run_or_cancelled_never_left_pending():
    fake_cuda.run_script(SCENARIOS, "a_launch_racing_close_is_run_or_cancelled")


def test_a_fork_child_cancels_the_parents_calls_and_launches_its_own():
    fake_cuda.run_script(SCENARIOS, "a_fork_child_cancels_the_parents_calls")


@pytest.mark.parametrize(
    "name",
    [
        "a_launch_by_a_done_callback_during_the_childs_cancellation_is_the_childs_own",
        "a_done_callback_that_relaunches_when_cancelled_lets_the_fork_return",
        "a_fork_or_close_from_a_done_callback_during_the_childs_cancellation_cancels_the_rest_once",
    ],
)
def test_a_fork_child_cancels_exactly_the_parents_calls_whatever_their_done_callbacks_do(name):
    # Done-callbacks run while the child cancels: what they launch is the child's own (with a fresh stream
    # order); a fork or close from one of them cancels the rest once.
    result = fake_cuda.run_script("asyncfork_child_cancels.py", name)
    assert result.stdout.strip() == "ok", result.stdout + result.stderr


def test_exit_runs_what_cuda_handed_back_and_cancels_what_it_still_holds():
    result = fake_cuda.run_script(SCENARIOS, "exit_runs_what_cuda_handed_back", CUDA_RECLAIM_REPORT="1")
    assert "ran at exit" in result.stdout and "never runs" not in result.stdout, result.stdout
    assert "held future cancelled: True" in result.stdout
    report = last_report(result.stderr)
    assert report["held_by_cuda"] == 1 and report["conserved"] == "yes", result.stderr


def test_a_future_callback_and_the_cuda_stream_protocol_work_together():
    fake_cuda.run_script(SCENARIOS, "a_future_callback_and_the_cuda_stream_protocol")


@pytest.mark.parametrize(
    "ending, count",
    [
        pytest.param("exit", 3000, id="exit"),
        pytest.param("close", 3000, id="close"),
        pytest.param("fork", 1000, id="fork"),
        pytest.param("close-in-finalizer", 1000, id="close-in-finalizer"),
    ],
)
def test_finalizers_that_launch_host_calls_are_safe_through_close_exit_and_fork(ending, count):
    result = fake_cuda.run_script(SCENARIOS, "finalizers_that_launch", ending, str(count), CUDA_RECLAIM_REPORT="1")
    assert result.stdout.strip().splitlines()[-1] == "done", result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    for report in find_reports(result.stderr):
        assert report["conserved"] == "yes", result.stderr
        assert report["attached_to_cuda"] == report["handed_back_by_cuda"] + report["held_by_cuda"], result.stderr
