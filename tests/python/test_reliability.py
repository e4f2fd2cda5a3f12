"""Reliability: finalizers that call back into cuda_reclaim while the drain is stopping, lost wake-ups,
exit ordering against non-daemon threads, close() and blocked waiters, reloads, bad configuration.

Each scenario runs in a child interpreter under a timeout: a hang fails the test instead of the suite.
"""

import subprocess
import sys

import pytest

import exit_report
from conftest import run_child_script

pytest.importorskip("_native_producers")

# Generous: a scenario that works takes well under a second or two; only a hang reaches this.
HANG_LIMIT = 120

# Small scenarios, run by name; the larger ones have a program of children/ each (reliability_*.py).
SCENARIOS = "reliability_scenarios.py"


def run_scenario_script(name, *script_args, **kwargs):
    """Run the program children/`name` with `script_args` (run_child_script's keywords in `kwargs`); fail on a
    hang."""
    kwargs.setdefault("timeout", HANG_LIMIT)
    try:
        return run_child_script(name, *script_args, **kwargs)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the scenario hung (no exit within {expired.timeout} s); output so far:\n{expired.stdout}")


def run_settings_scenario(name, **kwargs):
    """Run the scenario `name` of children/reliability_settings_scenarios.py like run_scenario_script()."""
    return run_scenario_script("reliability_settings_scenarios.py", name, **kwargs)


def assert_clean_exit(result, last_line="done"):
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == last_line, result.stdout
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    return report


# --- finalizers that hand over while the drain thread is being stopped ----------------------------------



@pytest.mark.parametrize("ending, count", [("exit", 50000), ("close", 2000), ("fork", 2000)])
def test_finalizer_on_the_drain_thread_hands_over_while_the_thread_is_stopped(ending, count):
    script = "reliability_hand_over_while_stopping.py"
    report = assert_clean_exit(run_scenario_script(script, ending, str(count), env={"CUDA_RECLAIM_REPORT": "1"}))
    # Every Parent was handed over before the close, so each was released (by the drain thread or by the
    # close itself); each Child was either released too, or handed over by a finalizer that the close's
    # own final drain ran, after the close, and then counted as leaked: exactly one of the two.
    assert report["released"] >= count
    assert report["released"] + report["leaked_after_close"] == 2 * count


def test_finalizer_on_the_drain_thread_toggles_keeps_alive_and_closes_while_exiting():
    script = "reliability_finalizers_toggle_and_close_while_exiting.py"
    assert_clean_exit(run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"}))


# --- lost wake-ups after the drain thread stops itself --------------------------------------------------

def test_after_a_finalizer_switches_the_drain_thread_off_later_work_still_wakes_the_fd():
    script = "reliability_wakeup_after_self_stop.py"
    assert_clean_exit(run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_toggling_off_and_on_from_a_finalizer_leaves_one_drain_thread():
    script = "reliability_toggle_from_finalizer.py"
    assert_clean_exit(run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_fork_from_a_finalizer_on_the_drain_thread_leaves_both_processes_draining():
    script = "reliability_fork_from_drain_thread.py"
    # Forking from a non-main thread warns on 3.12+.
    env = {"CUDA_RECLAIM_REPORT": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    assert_clean_exit(run_scenario_script(script, env=env))


@pytest.mark.parametrize("mode", ["drain", "thread"])
def test_fork_from_a_finalizer_that_a_drain_runs_leaves_a_child_that_goes_on(mode):
    # The child returns from the finalizer into the drain that ran it: that drain must stop taking from the
    # parent's storage (the reset counted it as abandoned) and must not count itself out of the child's
    # readers, or every later drain, counter read and the exit's close() wait for ever.
    script = "reliability_fork_from_drain_child_goes_on.py"
    env = {"CUDA_RECLAIM_REPORT": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    assert_clean_exit(run_scenario_script(script, mode, env=env))


def test_ctrl_c_while_the_exit_hook_waits_for_the_drain_thread_still_drains_and_closes():
    result = run_scenario_script("reliability_ctrl_c_while_exit_waits.py", env={"CUDA_RECLAIM_REPORT": "1"})
    assert "queued before exit: released" in result.stdout, result.stdout + result.stderr
    assert "KeyboardInterrupt" in result.stderr, "the Ctrl-C reached the exit hook's wait: " + result.stderr
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    # Closed by the hook: what the native threads pushed after that is leaked, nothing stays pending.
    assert report["pending"] == 0 and report["leaked_after_close"] > 0, result.stderr


# --- exit ordering against non-daemon threads ------------------------------------------------------------

def test_exit_does_not_hang_when_a_non_daemon_thread_waits_for_finalizers_to_free_slots():
    script = "reliability_exit_with_back_pressure.py"
    report = assert_clean_exit(run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"}))
    assert report["released"] == 200


# --- close() and waiters --------------------------------------------------------------------------------

@pytest.mark.parametrize("timeout_text", ["inf", "1e6"])
def test_close_wakes_a_thread_blocked_in_drain_with_a_timeout(timeout_text):
    script = "reliability_close_wakes_waiters.py"
    assert_clean_exit(run_scenario_script(script, timeout_text, env={"CUDA_RECLAIM_REPORT": "1"}))


# --- reload ----------------------------------------------------------------------------------------------

def test_reload_does_not_register_the_process_hooks_twice():
    script = "reliability_reload_and_fork.py"
    result = run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"})
    assert_clean_exit(result)
    assert len(exit_report.find_reports(result.stderr)) == 1, result.stderr


def test_the_exit_report_is_written_once_after_reloads():
    result = run_scenario_script(SCENARIOS, "reload_then_exit", env={"CUDA_RECLAIM_REPORT": "1"})
    assert_clean_exit(result)
    assert len(exit_report.find_reports(result.stderr)) == 1, result.stderr


# --- configuration and reporting --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["2261669771489293824", "0", "-5", "12k", "16777217", ""])
def test_bad_reserved_capacity_is_a_clear_import_error(value):
    result = run_settings_scenario("import_the_package", env={"CUDA_RECLAIM_RESERVED_CAPACITY": value})
    assert result.returncode == 1, result.stderr
    assert "ImportError" in result.stderr and "CUDA_RECLAIM_RESERVED_CAPACITY" in result.stderr
    assert "from 1 to 16777216" in result.stderr


def test_largest_reserved_capacity_is_accepted():
    env = {"CUDA_RECLAIM_RESERVED_CAPACITY": "16777216", "CUDA_RECLAIM_REPORT": "1"}
    result = run_settings_scenario("hand_over_one", env=env)
    assert_clean_exit(result)


@pytest.mark.parametrize("value, reported", [("1", True), ("TRUE", True), ("yes", True), ("On", True),
                                             ("0", False), ("false", False), ("", False), ("off", False)])
def test_report_setting_accepts_the_usual_spellings(value, reported):
    result = run_settings_scenario("import_the_package", env={"CUDA_RECLAIM_REPORT": value})
    assert result.returncode == 0, result.stderr
    assert bool(exit_report.find_reports(result.stderr)) == reported


def test_report_setting_that_is_not_understood_is_an_import_error():
    result = run_settings_scenario("import_the_package", env={"CUDA_RECLAIM_REPORT": "please"})
    assert result.returncode == 1
    assert "CUDA_RECLAIM_REPORT" in result.stderr and "ImportError" in result.stderr


def test_exit_by_keyboard_interrupt_still_writes_the_report():
    result = run_scenario_script(SCENARIOS, "keyboard_interrupt_at_exit", env={"CUDA_RECLAIM_REPORT": "1"})
    assert result.returncode in (-2, 130), result.returncode  # killed by SIGINT, as CPython does
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes" and report["released"] == 10
    assert len(exit_report.find_reports(result.stderr)) == 1


def test_max_pending_is_never_below_pending():
    result = run_scenario_script(SCENARIOS, "max_pending_never_below_pending", env={"CUDA_RECLAIM_REPORT": "1"})
    assert_clean_exit(result)


def test_a_failed_keep_alive_starts_no_drain_thread():
    env = {"CUDA_RECLAIM_REPORT": "1", "CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"}
    result = run_scenario_script(SCENARIOS, "failed_keep_alive", env=env)
    assert "refused: DriverError" in result.stdout, result.stdout + result.stderr
    assert_clean_exit(result)


# --- fork and the automatic drain -----------------------------------------------------------------------

def test_fork_with_the_auto_drain_off_leaves_the_parent_queue_alone():
    script = "reliability_fork_with_auto_drain_off.py"
    assert_clean_exit(run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_a_fork_child_of_a_closed_queue_gets_an_open_queue_and_an_automatic_drain():
    script = "reliability_fork_after_close.py"
    assert_clean_exit(run_scenario_script(script, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_fork_does_not_hang_when_another_before_fork_hook_holds_a_lock_the_drain_thread_needs():
    # logging registers a before-fork hook that takes its module lock and holds it across the fork; when
    # logging is imported after cuda_reclaim, that hook runs first. A finalizer on the drain thread that
    # logs then waits for the lock while the fork waits for the drain thread: the fork must go ahead.
    script = "reliability_fork_with_a_locking_hook.py"
    # The fork may find the drain thread still alive (3.12+ warns).
    env = {"CUDA_RECLAIM_REPORT": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    assert_clean_exit(run_scenario_script(script, env=env))


def test_toggling_in_a_finalizer_at_finalization_does_not_wait_for_a_thread_that_will_never_run():
    # A daemon thread holds the state lock when finalization begins, so it never releases it; a finalizer
    # the interpreter runs during finalization toggles the drain and must go ahead without the lock.
    result = run_scenario_script("reliability_toggle_at_finalization_while_the_lock_is_held.py")
    assert result.returncode == 0, result.stdout
    assert "done" in result.stdout and "toggled" in result.stdout, result.stdout


# --- the automatic drain's lifecycle at its edges (children/lifecycle_scenarios.py) ------------------------

LIFECYCLE = "lifecycle_scenarios.py"


def run_lifecycle(name, *args, env=None):
    result = run_scenario_script(LIFECYCLE, name, *args, env={"CUDA_RECLAIM_REPORT": "1", **(env or {})})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done" in result.stdout.splitlines(), result.stdout + result.stderr
    assert exit_report.last_report(result.stderr)["conserved"] == "yes", result.stderr
    return result.stdout.splitlines()


def test_once_switching_off_returns_no_drain_thread_releases_anything():
    lines = run_lifecycle("switch_off_while_the_drain_thread_works_through_a_backlog")
    assert "released after the switch returned: 0" in lines, lines
    assert "pending is the rest: True" in lines, lines
    assert "in order: True" in lines, lines


def test_switching_back_on_while_a_stopped_drain_thread_is_inside_a_release_never_runs_two():
    lines = run_lifecycle("switch_back_on_while_the_stopped_thread_is_inside_a_release")
    assert "threads while the stopped one is inside a release: 1" in lines, lines
    assert "most threads draining at once: 1" in lines, lines
    assert "threads in the end: 1" in lines, lines


def test_toggling_off_and_on_many_times_from_a_finalizer_never_adds_a_drain_thread():
    lines = run_lifecycle("toggles_from_a_finalizer_on_the_drain_thread")
    assert "threads right after the toggles: 1" in lines, lines
    assert "threads in the end: 1" in lines, lines


def test_a_fork_that_could_not_wait_for_the_drain_thread_leaves_the_parent_one_drain_thread():
    # Forking a process with threads warns on 3.12+.
    lines = run_lifecycle("fork_while_the_drain_thread_is_inside_a_release",
                          env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert "parent threads after the fork: 1" in lines, lines
    assert "threads in the end: 1" in lines, lines


def test_finalizers_that_a_drain_runs_wait_for_a_stopped_drain_thread_once():
    lines = run_lifecycle("finalizers_that_a_drain_runs_wait_for_the_stopped_drain_thread_once")
    assert "switches run by the main thread: 5" in lines, lines
    assert "joins while the lock was held: 1" in lines, lines
    assert "closed: True" in lines, lines
    assert "the stopped thread left: True" in lines, lines


def test_ctrl_c_while_close_waits_for_the_drain_thread_still_closes_the_queue():
    lines = run_lifecycle("ctrl_c_while_close_waits_for_the_drain_thread")
    assert lines[:3] == ["interrupted", "closed: True", "hand-over accepted: False"], lines


def test_a_drain_thread_that_cannot_start_is_reported_and_started_by_a_later_hand_over():
    lines = run_lifecycle("a_drain_thread_that_cannot_start", "2")
    warned = [line for line in lines if line.startswith("RuntimeWarning:")]
    assert len(warned) == 1 and "can't start new thread" in warned[0], lines  # once, with the cause
    assert "mode: off running: False" in lines, lines
    assert "after a later hand-over, mode: thread" in lines, lines


def test_launch_from_a_finalizer_during_finalization_returns_a_cancelled_future():
    env = {"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"}
    lines = run_lifecycle("launch_from_a_finalizer_during_finalization", "return", env=env)
    assert "finalizing=True cancelled=True" in lines, lines


def test_launch_from_a_finalizer_during_an_exit_by_ctrl_c_returns_a_cancelled_future():
    env = {"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1", "CUDA_RECLAIM_REPORT": "1"}
    result = run_scenario_script(LIFECYCLE, "launch_from_a_finalizer_during_finalization", "ctrl-c", env=env)
    assert result.returncode in (-2, 130), result.stdout + result.stderr  # killed by SIGINT, as CPython does
    assert "finalizing=True cancelled=True" in result.stdout.splitlines(), result.stdout + result.stderr
    assert exit_report.last_report(result.stderr)["conserved"] == "yes", result.stderr


@pytest.mark.parametrize("where", ["atexit", "thread"])
def test_the_first_launch_of_a_process_made_at_exit_completes(where):
    import fake_cuda

    lines = run_lifecycle("first_launch_at_exit", where, env={"CUDA_RECLAIM_LIBCUDA": fake_cuda.PATH})
    assert "result 7" in lines, lines
