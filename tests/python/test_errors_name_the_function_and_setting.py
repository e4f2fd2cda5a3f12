"""Errors name the function called and the setting: a DriverError starts with the public function's name and,
where the driver library could not be loaded, names CUDA_RECLAIM_LIBCUDA (also when its value is not UTF-8);
a bad since= says which rule it breaks. The driver is loaded once per process, so each case runs in a child: a
program of children/errors_scenarios.py."""

import os
import re

import pytest

import cuda_reclaim
import fake_cuda
from conftest import run_child_script

SCENARIOS = "errors_scenarios.py"

# Each public function that loads the driver: children/errors_scenarios.py calls each so that it gets that far.
FUNCTIONS = [
    "keep_alive", "keep_alive_until", "launch_host_func", "add_host_node", "stream_reached", "run_when_reached"
]


def driver_errors(library=None, **env):
    """{function: the message of the DriverError it raised} in a child with CUDA_RECLAIM_LIBCUDA=`library`
    (None: unset)."""
    child_env = dict(env, CUDA_RECLAIM_LIBCUDA=library) if library is not None else env
    scenario = "each_call_raises" if library is not None else "each_call_raises_without_the_setting"
    result = run_child_script(SCENARIOS, scenario, *FUNCTIONS, env=child_env)
    assert result.returncode == 0, result.stdout + result.stderr
    errors = dict(line.split(" raised: ", 1) for line in result.stdout.splitlines())
    assert sorted(errors) == sorted(FUNCTIONS)
    return errors


def test_a_missing_driver_library_named_by_the_setting():
    for function, message in driver_errors("/nonexistent/libcuda.so.1").items():
        assert message.startswith(f"{function}(): the CUDA driver library /nonexistent/libcuda.so.1 could not be "), (
            message
        )
        assert message.endswith("; CUDA_RECLAIM_LIBCUDA names this library"), message


def test_a_driver_library_named_by_the_setting_that_is_too_old():
    if not os.path.exists(fake_cuda.PATH):
        pytest.skip(f"fake driver not built: {fake_cuda.PATH}")
    for function, message in driver_errors(fake_cuda.PATH, FAKE_CUDA_VERSION="11020").items():
        assert message.startswith(f"{function}(): the CUDA driver is version 11.2; "), message
        assert message.endswith("; CUDA_RECLAIM_LIBCUDA names this library"), message


def test_without_the_setting_a_missing_driver_says_which_setting_to_use():
    # libcuda.so.1 itself: only where no NVIDIA driver is installed does the load fail.
    result = run_child_script(SCENARIOS, "driver_status_without_the_setting", env={"CUDA_RECLAIM_LIBCUDA": ""})
    if result.stdout.strip() != "library_missing":
        pytest.skip(f"libcuda.so.1 loads here ({result.stdout.strip()}{result.stderr.strip()})")
    for function, message in driver_errors(None).items():
        assert message.startswith(f"{function}(): the CUDA driver library libcuda.so.1 could not be loaded"), message
        assert message.endswith(
            "; set CUDA_RECLAIM_LIBCUDA to the driver library's path if it is installed elsewhere"
        ), message


def test_a_setting_that_is_not_utf8_gives_the_documented_error():
    # os.environb holds b"\xff"; the message shows it as \xff (before: UnicodeDecodeError out of keep_alive).
    for function, message in driver_errors("/nonexistent/\udcff/libcuda.so.1").items():
        assert message.startswith(f"{function}(): the CUDA driver library /nonexistent/\\xff/libcuda.so.1 could"), (
            message
        )
        assert "CUDA_RECLAIM_LIBCUDA" in message


@pytest.mark.parametrize("function", ["flush", "wait_handed_back"])
def test_since_that_is_negative_or_not_yet_made_says_which(function):
    call = getattr(cuda_reclaim, function)
    expected = f"{function}(): since must be a mark from hand_back_mark(), not -1: marks are never negative"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        call(0, since=-1)
    latest = cuda_reclaim.hand_back_mark()
    with pytest.raises(ValueError) as raised:
        call(0, since=latest + 10**6)
    message = str(raised.value)
    assert message.startswith(f"{function}(): since must be a mark from hand_back_mark(), not {latest + 10**6}: ")
    made = int(message.rsplit(" ", 1)[1])
    assert latest <= made < latest + 10**6  # the marks made so far, as a number
    with pytest.raises(ValueError, match=r"not 18446744073709551616: the marks made so far go up to \d+$"):
        call(0, since=2**64)
    assert call(0, since=latest) in (True, False, 0)  # a real mark is taken
