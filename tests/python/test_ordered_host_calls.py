"""launch_host_func_ordered against the fake libcuda with one CUDA thread: CUDA's thread waits on a gate
until a drain ran the call, so the stream's synchronize and later work see its effects; every gate opens
(run, raise, cancel, close, exit, fork, a push after close); a caller with no drain is refused; the
private pair of _prepare_host_call for integrations. Each scenario runs in a child interpreter under a
timeout: a program of children/ordered_scenarios.py (fake_cuda.run_script)."""

import pytest

import cuda_reclaim
import fake_cuda

SCENARIOS = "ordered_scenarios.py"


def test_launch_host_func_ordered_checks_its_arguments():
    with pytest.raises(TypeError, match=r"^launch_host_func_ordered\(\): fn must be callable"):
        cuda_reclaim.launch_host_func_ordered(0, "print")
    with pytest.raises(TypeError, match=r"^launch_host_func_ordered\(\) expects a stream"):
        cuda_reclaim.launch_host_func_ordered(object(), print)


def test_after_synchronize_fn_ran_and_nothing_after_it_ran_before_it():
    fake_cuda.run_script(SCENARIOS, "synchronize_sees_fn_and_later_work_waits")


def test_other_streams_host_functions_wait_behind_a_closed_gate():
    fake_cuda.run_script(SCENARIOS, "other_streams_wait_behind_a_closed_gate")


def test_ordered_and_unordered_calls_of_a_stream_run_in_stream_order():
    fake_cuda.run_script(SCENARIOS, "many_ordered_calls_keep_stream_order")


def test_the_gate_opens_when_fn_raises_and_the_exception_goes_to_the_future():
    fake_cuda.run_script(SCENARIOS, "fn_raises")


def test_the_gate_opens_for_a_call_cancelled_through_its_future():
    fake_cuda.run_script(SCENARIOS, "cancelled_through_its_future")


def test_refused_when_no_drain_would_run_it():
    fake_cuda.run_script(SCENARIOS, "refused_without_a_drain", "off")


def test_an_event_loop_drain_is_a_drain_that_runs_it():
    fake_cuda.run_script(SCENARIOS, "an_event_loop_drain_runs_it")


def test_fn_may_launch_ordered_calls_from_inside_its_drain():
    fake_cuda.run_script(SCENARIOS, "launched_from_inside_a_drain")


def test_a_close_from_a_drain_cancels_a_taken_call_and_opens_its_gate():
    fake_cuda.run_script(SCENARIOS, "close_opens_the_gate_of_a_call_a_drain_took")


def test_close_runs_a_waiting_call_and_host_functions_after_close_do_not_wait():
    fake_cuda.run_script(SCENARIOS, "close_runs_a_waiting_call_and_later_pushes_do_not_wait")


@pytest.mark.parametrize("how", ["queued", "cancelled"])
def test_the_process_exits_with_a_call_waiting(how):
    result = fake_cuda.run_script(SCENARIOS, "exit_with_a_call_waiting", how)
    assert result.stdout.splitlines()[0] == "exiting", result.stdout
    assert ("ran at exit" in result.stdout) == (how == "queued"), result.stdout


def test_a_fork_child_cancels_the_parents_waiting_call_and_leaves_its_gate_alone():
    fake_cuda.run_script(SCENARIOS, "a_fork_child_cancels_the_parents_waiting_call")


def test_a_busy_main_thread_does_not_hold_the_gate():
    fake_cuda.run_script(SCENARIOS, "a_busy_main_thread_does_not_hold_the_gate")


def test_a_fork_from_fn_leaves_the_gate_to_the_parent():
    fake_cuda.run_script(SCENARIOS, "a_fork_from_fn_leaves_the_gate_to_the_parent")


@pytest.mark.parametrize("ordered", ["ordered", "unordered"])
def test_a_prepared_pair_runs_its_call_when_cuda_runs_it(ordered):
    fake_cuda.run_script(SCENARIOS, "a_prepared_call", ordered)


def test_a_prepared_pair_that_cuda_never_got_is_withdrawn_and_counted():
    fake_cuda.run_script(SCENARIOS, "a_prepared_call_withdrawn")


@pytest.mark.parametrize("how", ["returns", "raises"])
def test_an_ordered_host_node_holds_each_firing_until_a_call_ran(how):
    fake_cuda.run_script(SCENARIOS, "an_ordered_host_node_holds_each_firing_until_a_call_ran", how)


def test_an_ordered_host_node_is_refused_when_no_drain_would_run_it():
    fake_cuda.run_script(SCENARIOS, "an_ordered_host_node_refused_without_a_drain", "off")


def test_an_ordered_host_nodes_firings_after_close_wait_for_nothing():
    fake_cuda.run_script(SCENARIOS, "an_ordered_host_node_after_close_does_not_wait")


def test_a_close_with_a_firing_in_flight_frees_cudas_thread():
    fake_cuda.run_script(SCENARIOS, "a_close_with_a_firing_in_flight_frees_cudas_thread")


@pytest.mark.parametrize("ending", ["close", "fork"])
def test_a_waiting_firing_opens_at_close_and_is_left_alone_in_a_fork_child(ending):
    fake_cuda.run_script(SCENARIOS, "a_waiting_firing_at_close_and_in_a_fork_child", ending)


def test_withdraw_refuses_a_stale_unknown_or_run_pair_and_never_reads_what_it_names():
    fake_cuda.run_script(SCENARIOS, "a_stale_or_unknown_pair_is_refused")


def test_withdraw_refuses_a_pair_whose_host_function_cuda_ran_and_a_second_firing_does_nothing():
    fake_cuda.run_script(SCENARIOS, "a_pair_cuda_fired_is_not_withdrawn")


@pytest.mark.parametrize("ordered", ["ordered", "unordered"])
def test_a_prepared_pair_counts_as_attached_until_its_push_or_withdrawal(ordered):
    fake_cuda.run_script(SCENARIOS, "a_prepared_pair_is_counted_until_handed_back", ordered)


def test_refused_when_the_drain_thread_cannot_start():
    fake_cuda.run_script(SCENARIOS, "refused_when_the_drain_thread_cannot_start")


def test_an_event_loop_that_is_not_running_is_no_drain():
    fake_cuda.run_script(SCENARIOS, "an_event_loop_that_does_not_run_is_no_drain")


@pytest.mark.parametrize("ordered", ["ordered", "unordered"])
def test_a_fork_child_ends_the_future_of_a_call_another_thread_was_running(ordered):
    result = fake_cuda.run_script(SCENARIOS, "a_fork_child_ends_the_future_of_a_call_another_thread_runs", ordered)
    assert "child:" not in result.stdout, result.stdout


def test_a_finalizer_that_a_drain_runs_may_launch_an_ordered_call():
    fake_cuda.run_script(SCENARIOS, "launched_from_a_finalizer_that_a_drain_runs")


def test_a_done_callback_may_launch_the_next_ordered_call_of_its_stream():
    fake_cuda.run_script(SCENARIOS, "a_done_callback_launches_the_next_ordered_call")


@pytest.mark.parametrize("form", ["call", "host node"])
def test_a_keyboard_interrupt_in_fn_is_its_outcome_and_opens_the_gate(form):
    fake_cuda.run_script(SCENARIOS, "fn_raises_keyboard_interrupt", form)
