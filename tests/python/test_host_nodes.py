"""add_host_node against the fake libcuda: one call per firing, on every launch of every executable graph,
run in a drain; the function and its arguments live until the last call ran and the graph is gone (a
native count: no Python reference change on CUDA's thread); exceptions, dependencies, failures, close,
exit and finalizers. The fake-driver scenarios are programs of children/host_nodes_scenarios.py
(fake_cuda.run_script)."""

import pytest

import cuda_reclaim
import fake_cuda
from exit_report import last_report

SCENARIOS = "host_nodes_scenarios.py"


def test_add_host_node_checks_its_arguments():
    with pytest.raises(TypeError, match=r"\(\): fn must be callable"):
        cuda_reclaim.add_host_node(0x1234, None)
    with pytest.raises(TypeError, match=r"NodeHandle\(\): node must be an int handle, not str"):
        cuda_reclaim.NodeHandle("1")
    with pytest.raises(TypeError, match="dependencies must be an iterable"):
        cuda_reclaim.add_host_node(0x1234, print, dependencies="node")
    with pytest.raises(TypeError, match="dependencies must be graph nodes"):
        cuda_reclaim.add_host_node(0x1234, print, dependencies=[1.5])
    with pytest.raises(TypeError, match="GraphDefinition or GraphBuilder"):
        cuda_reclaim.add_host_node(object(), print)
    driver = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(TypeError, match="CUgraphExec"):
        cuda_reclaim.add_host_node(driver.CUgraphExec(0x7000), print)


def test_each_firing_of_every_launch_calls_the_function_in_a_drain():
    fake_cuda.run_script(SCENARIOS, "each_firing_of_every_launch_calls_the_function_in_a_drain")


def test_the_node_handle_is_the_cugraphnode_int_and_keywords_reach_the_function():
    fake_cuda.run_script(SCENARIOS, "the_node_handle_is_the_cugraphnode_int_and_keywords_reach_the_function")


def test_calls_still_queued_keep_the_function_alive_after_the_graph_is_gone():
    fake_cuda.run_script(SCENARIOS, "calls_still_queued_keep_the_function_alive_after_the_graph_is_gone")


def test_an_exception_goes_to_the_unraisable_hook_and_later_firings_still_run():
    fake_cuda.run_script(SCENARIOS, "an_exception_goes_to_the_unraisable_hook_and_later_firings_still_run")


def test_dependencies_order_the_nodes_and_a_refused_node_leaves_its_function_with_the_graph():
    fake_cuda.run_script(
        SCENARIOS, "dependencies_order_the_nodes_and_a_refused_node_leaves_its_function_with_the_graph"
    )


def test_a_graph_that_refuses_the_user_object_gets_no_node_and_nothing_is_kept():
    fake_cuda.run_script(SCENARIOS, "a_graph_that_refuses_the_user_object_gets_no_node_and_nothing_is_kept")


def test_many_launches_on_many_cuda_threads_call_once_per_firing():
    fake_cuda.run_script(SCENARIOS, "many_launches_on_many_cuda_threads_call_once_per_firing")


def test_firings_after_close_never_run_and_their_payload_is_never_touched():
    fake_cuda.run_script(SCENARIOS, "firings_after_close_never_run_and_their_payload_is_never_touched")


def test_exit_with_a_live_graph_reports_its_node_as_held():
    result = fake_cuda.run_script(SCENARIOS, "exit_with_a_live_graph_reports_its_node_as_held", CUDA_RECLAIM_REPORT="1")
    assert result.stdout.count("fired") == 1, result.stdout
    report = last_report(result.stderr)
    assert report["held_by_cuda"] == 1 and report["conserved"] == "yes", result.stderr


@pytest.mark.parametrize("ending", ["exit", "close", "fork"])
def test_finalizers_that_add_and_destroy_host_nodes_are_safe(ending):
    result = fake_cuda.run_script(
        SCENARIOS, "finalizers_that_add_and_destroy_host_nodes_are_safe", ending, CUDA_RECLAIM_REPORT="1"
    )
    assert result.stdout.strip().splitlines()[-1] == "done", result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    report = last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    assert report["attached_to_cuda"] == report["handed_back_by_cuda"] + report["held_by_cuda"], result.stderr
