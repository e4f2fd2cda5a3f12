"""cuda_reclaim.asyncio.stream_reached / run_when_reached against the fake libcuda: an idle loop (asyncio
and uvloop) is woken by the queue's fd or by the drain thread, with no polling; stream order; exceptions;
cancellation (the call never runs, nothing leaks, nothing runs twice); close. The fake-driver scenarios are
programs of children/asyncio_streams_scenarios.py and children/asyncfork_loop_reader.py (fake_cuda.run_script)."""

import os

import pytest

import fake_cuda

SCENARIOS = "asyncio_streams_scenarios.py"
LOOPS = ["asyncio", "uvloop"]  # the kind of event loop, as the scenarios take it


def loop_kind(kind):
    """`kind`, once its loop can be made here (the test is skipped where uvloop is not installed)."""
    if kind == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is not installed for this Python")
    return kind


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("mode", ["off", "thread"])
def test_an_idle_loop_resumes_when_the_stream_gets_there(kind, mode):
    loop_kind(kind)
    fake_cuda.run_script(SCENARIOS, "an_idle_loop_resumes_when_the_stream_gets_there", kind, mode)


@pytest.mark.parametrize("kind", LOOPS)
def test_awaits_on_one_stream_resume_in_stream_order_and_exceptions_come_back(kind):
    loop_kind(kind)
    fake_cuda.run_script(SCENARIOS, "awaits_on_one_stream_resume_in_stream_order_and_exceptions_come_back", kind)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_cancelled_await_never_runs_the_call_and_leaks_nothing(kind):
    loop_kind(kind)
    result = fake_cuda.run_script(SCENARIOS, "a_cancelled_await_never_runs_the_call_and_leaks_nothing", kind)
    assert "Task exception was never retrieved" not in result.stderr, result.stderr
    assert "exception calling callback" not in result.stderr, result.stderr


def test_a_call_that_completes_after_its_loop_closed_is_dropped_quietly():
    result = fake_cuda.run_script(SCENARIOS, "a_call_that_completes_after_its_loop_closed_is_dropped_quietly")
    assert "Traceback" not in result.stderr, result.stderr


def test_after_close_an_await_is_cancelled():
    fake_cuda.run_script(SCENARIOS, "after_close_an_await_is_cancelled")


def test_with_the_automatic_drain_off_the_first_await_installs_the_loops_drain():
    fake_cuda.run_script(SCENARIOS, "with_the_automatic_drain_off_the_first_await_installs_the_loops_drain")


def test_a_call_that_raises_stop_iteration_ends_the_await_with_runtime_error():
    # An asyncio future refuses a StopIteration: before 3.13 set_exception raised TypeError on the loop and
    # the await never ended. It comes back wrapped, as 3.13 does, on every version.
    fake_cuda.run_script(SCENARIOS, "a_call_that_raises_stop_iteration_ends_the_await_with_runtime_error")


def test_loops_that_drained_are_not_kept_alive_after_they_close():
    # The handle install() keeps per loop holds its loop weakly: a process that runs asyncio.run() again
    # and again (with the automatic drain off, each await installs the loop's reader) keeps no old loop.
    fake_cuda.run_script(SCENARIOS, "loops_that_drained_are_not_kept_alive_after_they_close")


def test_an_await_pending_when_the_drain_thread_stops_is_served_by_its_loop():
    # Started under the drain thread, the await installs no reader; switching the mode away from "thread"
    # meanwhile must not leave it waiting for a drain that never comes.
    fake_cuda.run_script(SCENARIOS, "an_await_pending_when_the_drain_thread_stops_is_served_by_its_loop", "off")


def test_an_await_pending_when_a_finalizer_on_the_drain_thread_stops_it_is_served_by_its_loop():
    # The switch comes from a finalizer that the drain thread itself runs (it stops its own thread): the
    # mode subscriber runs there, inside the drain, and must still hand the await to the loop's reader.
    fake_cuda.run_script(
        SCENARIOS, "an_await_pending_when_a_finalizer_on_the_drain_thread_stops_it_is_served_by_its_loop"
    )


def find_example():
    """examples/callbacks_asyncio.py, from the repository (or Bazel's runfiles) layout or the GPU bundle's."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "..", "..", "examples"), os.path.join(here, "..", "examples")):
        path = os.path.normpath(os.path.join(candidate, "callbacks_asyncio.py"))
        if os.path.exists(path):
            return path
    pytest.skip("examples/callbacks_asyncio.py is not next to the tests")


def test_the_asyncio_example_says_there_is_no_gpu_and_exits_0():
    from conftest import run_child_script

    result = run_child_script(find_example(), env={"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"})
    if "No GPU present" not in result.stdout:
        pytest.skip("a GPU is present: the example runs for real in test_gpu_callbacks.py")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("mode", ["off", "thread"])
@pytest.mark.parametrize("kind", LOOPS)
def test_in_a_fork_child_a_loop_made_before_the_fork_is_left_to_the_parent_and_a_loop_made_there_drains(
    kind, mode
):
    # In the child, the loop made before the fork: its drain handle is cancelled, its await pending at the fork
    # ends cancelled, and install() and new awaits there raise RuntimeError; a loop made in the child drains and
    # its awaits resume. Nothing the child does may wake (or spin) the parent's loop, which goes on serving its
    # awaits, the one pending at the fork included. Forking with the fake CUDA's helper thread just joined may
    # still warn.
    loop_kind(kind)
    result = fake_cuda.run_script(
        "asyncfork_loop_reader.py", "a_loop_made_before_a_fork_is_left_to_the_parent", kind, mode,
        PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines.get("child") == "ok", result.stdout + result.stderr
    assert lines.get("parent") == "3", result.stdout + result.stderr
    idle = dict(item.split("=") for item in result.stdout.split() if "=" in item)
    assert int(idle["idle_drains"]) == 0, result.stdout
    assert int(idle["idle_polls"]) <= 10, result.stdout  # asyncio: one poll per timer, not a spin
    assert float(idle["idle_cpu_share"]) < 0.1, result.stdout  # a spinning loop keeps the CPU busy


@pytest.mark.parametrize("kind", LOOPS)
def test_in_a_fork_child_a_loop_that_ran_on_the_forking_thread_is_refused_though_never_used_before(kind):
    # cuda_reclaim never used the loop before the fork: it is known as the parent's because the fork was made
    # while it ran on the forking thread.
    loop_kind(kind)
    result = fake_cuda.run_script(
        "asyncfork_loop_reader.py", "a_loop_running_on_the_forking_thread_is_the_parents_in_the_child", kind,
        PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    assert "child ok" in result.stdout.splitlines(), result.stdout + result.stderr


@pytest.mark.parametrize("awaiting", ["run_when_reached", "stream_reached"])
@pytest.mark.parametrize("kind", LOOPS)
def test_a_cancelled_await_never_runs_its_call_even_if_the_drain_thread_takes_it_before_the_loop_iterates(
    kind, awaiting
):
    # task.cancel() must reach the call at once: asyncio tells a cancelled future's done-callbacks only on
    # the loop's next iteration, and until then the drain thread may take the call and run it.
    loop_kind(kind)
    fake_cuda.run_script(
        SCENARIOS,
        "a_cancelled_await_never_runs_its_call_even_if_the_drain_thread_takes_it_before_the_loop_iterates",
        kind,
        awaiting,
    )


@pytest.mark.parametrize("kind", LOOPS)
def test_an_await_cancelled_while_the_drain_thread_runs_its_call_lets_the_call_finish_once(kind):
    # A call that has started finishes, once; the await ends cancelled; the counters add up.
    loop_kind(kind)
    fake_cuda.run_script(
        SCENARIOS, "an_await_cancelled_while_the_drain_thread_runs_its_call_lets_the_call_finish_once", kind
    )


def test_a_keyboard_interrupt_while_an_await_is_cancelled_still_cancels_its_call_and_ends_the_await():
    # The interrupt comes out of the call's cancel (from the done-callback that tells the loop): the call
    # must stay cancelled, the await must still end, and the interrupt reaches whoever cancelled.
    fake_cuda.run_script(
        SCENARIOS, "a_keyboard_interrupt_while_an_await_is_cancelled_still_cancels_its_call_and_ends_the_await"
    )


@pytest.mark.parametrize("mode", ["thread", "off"])
def test_close_while_awaits_are_pending_cancels_them_and_runs_nothing_after_it(mode):
    fake_cuda.run_script(SCENARIOS, "close_while_awaits_are_pending_cancels_them_and_runs_nothing_after_it", mode)


def test_a_keyboard_interrupt_before_the_await_begins_cancels_the_launched_call():
    # The call is launched, then the await is interrupted before it waits (here: while it installs the
    # loop's drain): nobody will ever await the outcome, so the call must not run.
    fake_cuda.run_script(SCENARIOS, "a_keyboard_interrupt_before_the_await_begins_cancels_the_launched_call")
