"""After close(), the caller is told: each Python-level hand-over (keep_alive, keep_alive_until, defer_release,
launch_host_func, add_host_node) gives a ResourceWarning the first time in a process, get_auto_drain() says
"closed", and an await of a stream point gets a CancelledError whose message says why. close() is for good,
so every scenario runs in a child interpreter whose driver is the fake: a program of
children/after_close_scenarios.py (fake_cuda.run_script)."""

import pytest

import fake_cuda

SCENARIOS = "after_close_scenarios.py"


@pytest.mark.parametrize(
    "function", ["add_host_node", "defer_release", "keep_alive", "keep_alive_until", "launch_host_func"]
)
def test_a_hand_over_after_close_warns_once_per_process(function):
    result = fake_cuda.run_script(SCENARIOS, f"hand_over_{function}")
    assert f"warned: {function}() after cuda_reclaim.close(): " in result.stdout


def test_the_warning_is_an_error_where_the_filters_say_so():
    # -W error::ResourceWarning: the caller gets the exception; the reference is counted all the same.
    result = fake_cuda.run_script(SCENARIOS, "the_warning_is_an_error_where_the_filters_say_so")
    assert "raised: defer_release() after cuda_reclaim.close(): the reference is never released" in result.stdout


def test_get_auto_drain_says_closed_after_close_whatever_the_mode():
    result = fake_cuda.run_script(SCENARIOS, "get_auto_drain_says_closed_whatever_the_mode")
    assert "closed ok" in result.stdout


@pytest.mark.parametrize("function", ["stream_reached", "run_when_reached"])
def test_an_await_after_close_is_cancelled_with_a_message_saying_why(function):
    result = fake_cuda.run_script(SCENARIOS, "an_await_after_close_is_cancelled", function)
    assert f"args: ('{function}(): cuda_reclaim is closed: the call never runs',)" in result.stdout
