"""cuda_reclaim.asyncio.stream_reached / run_when_reached against the fake libcuda: an idle loop (asyncio
and uvloop) is woken by the queue's fd or by the drain thread, with no polling; stream order; exceptions;
cancellation (the call never runs, nothing leaks, nothing runs twice); close."""

import os

import pytest

import fake_cuda

LOOPS = [
    pytest.param("asyncio.new_event_loop", id="asyncio"),
    pytest.param("uvloop.new_event_loop", id="uvloop"),
]

# A fake CUDA thread, and the loop under test; `run(main)` runs a coroutine function on it and closes it.
SETUP = """
import asyncio, gc, warnings
import cuda_reclaim.asyncio as reclaim_asyncio
from cuda_reclaim import _asyncio_calls, _asyncio_drain
fake.fake_cuda_start_threads(1)
def run(main, factory):
    loop = factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
"""


def loop_factory(name):
    """The factory's expression for the child, with its import."""
    if name.startswith("uvloop"):
        pytest.importorskip("uvloop", reason="uvloop is not installed for this Python")
        return "__import__('uvloop').new_event_loop"
    return name


@pytest.mark.parametrize("factory", LOOPS)
@pytest.mark.parametrize("mode", ["off", "thread"])
def test_an_idle_loop_resumes_when_the_stream_gets_there(factory, mode):
    factory = loop_factory(factory)
    fake_cuda.run(
        SETUP
        + f"""
cuda_reclaim.set_auto_drain({mode!r})
stream = 0x9100
async def main():
    loop = asyncio.get_running_loop()
    fake.fake_cuda_stream_sleep(stream, 50000)     # a 50 ms "kernel" ahead of the point
    started = loop.time()
    # Nothing else is scheduled: only the fd (mode off: the loop's reader) or the drain thread's
    # call_soon_threadsafe (mode thread) can wake the loop.
    await asyncio.wait_for(reclaim_asyncio.stream_reached(stream), 30)
    waited = loop.time() - started
    assert waited >= 0.04, waited
    value = await asyncio.wait_for(reclaim_asyncio.run_when_reached(stream, lambda a, b=0: a + b, 40, b=2), 30)
    return value
assert run(main, {factory}) == 42
s = cuda_reclaim.stats()
assert s["calls_run"] == 2 and s["calls_outstanding"] == 0, s
"""
    )


@pytest.mark.parametrize("factory", LOOPS)
def test_awaits_on_one_stream_resume_in_stream_order_and_exceptions_come_back(factory):
    factory = loop_factory(factory)
    fake_cuda.run(
        SETUP
        + f"""
fake.fake_cuda_start_threads(3)
stream = 0x9200
async def main():
    order = []
    async def wait(i):
        await reclaim_asyncio.run_when_reached(stream, order.append, i)
    await asyncio.gather(*(wait(i) for i in range(500)))
    assert order == list(range(500)), order[:20]
    def fails():
        raise KeyError("in the callback")
    try:
        await reclaim_asyncio.run_when_reached(stream, fails)
    except KeyError as error:
        assert error.__traceback__ is not None
    else:
        raise AssertionError("the exception did not come back")
    return "ok"
assert run(main, {factory}) == "ok"
"""
    )


@pytest.mark.parametrize("factory", LOOPS)
def test_a_cancelled_await_never_runs_the_call_and_leaks_nothing(factory):
    factory = loop_factory(factory)
    result = fake_cuda.run(
        SETUP
        + f"""
stream = 0x9300
ran = []
refs = []
async def main():
    fake.fake_cuda_stream_hold(stream, 1)      # the stream is busy: the call waits in CUDA
    arg = P(); refs.append(weakref.ref(arg))
    task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, ran.append, arg))
    del arg
    reached = asyncio.ensure_future(reclaim_asyncio.stream_reached(stream))
    await asyncio.sleep(0)
    task.cancel(); reached.cancel()
    for cancelled in (task, reached):
        try:
            await cancelled
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("not cancelled")
    fake.fake_cuda_stream_hold(stream, 0)
    await asyncio.wait_for(reclaim_asyncio.stream_reached(stream), 30)  # the stream passed both
    for _ in range(100):                        # the drain that took the cancelled calls may still run
        if cuda_reclaim.stats()["calls_outstanding"] == 0:
            break
        await asyncio.sleep(0.01)
cuda_reclaim.set_auto_drain("thread")
run(main, {factory})
gc.collect()
assert ran == [], "a cancelled call never runs"
assert refs[0]() is None, "its references went once CUDA handed the call back"
s = cuda_reclaim.stats()
assert s["calls_cancelled"] == 2 and s["calls_run"] == 1 and s["calls_outstanding"] == 0, s
print("clean")
"""
    )
    assert "Task exception was never retrieved" not in result.stderr, result.stderr
    assert "exception calling callback" not in result.stderr, result.stderr


def test_a_call_that_completes_after_its_loop_closed_is_dropped_quietly():
    result = fake_cuda.run(
        SETUP
        + """
stream = 0x9400
cuda_reclaim.set_auto_drain("thread")
fake.fake_cuda_stream_hold(stream, 1)
async def main():
    asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, int, 7))
    await asyncio.sleep(0)
run(main, asyncio.new_event_loop)                 # closes the loop with the await pending
fake.fake_cuda_stream_hold(stream, 0)
wait_until(lambda: cuda_reclaim.stats()["calls_run"] == 1)
print("done")
"""
    )
    assert "Traceback" not in result.stderr, result.stderr


def test_after_close_an_await_is_cancelled():
    fake_cuda.run(
        SETUP
        + """
cuda_reclaim.close()
async def main():
    try:
        await reclaim_asyncio.stream_reached(0x9500)
    except asyncio.CancelledError:
        return "cancelled"
assert run(main, asyncio.new_event_loop) == "cancelled"
assert cuda_reclaim.stats()["attached_to_cuda"] == 0
"""
    )


def test_with_the_automatic_drain_off_the_first_await_installs_the_loops_drain():
    fake_cuda.run(
        SETUP
        + """
async def main():
    loop = asyncio.get_running_loop()
    assert _asyncio_drain._installed.get(loop) is None
    await asyncio.wait_for(reclaim_asyncio.stream_reached(0x9600), 30)
    handle = _asyncio_drain._installed.get(loop)
    assert handle is not None and handle.mode == "reader" and handle.drained >= 1
    from cuda_reclaim import _auto
    assert not _auto.is_thread_running()
run(main, asyncio.new_event_loop)
"""
    )


def test_a_call_that_raises_stop_iteration_ends_the_await_with_runtime_error():
    # An asyncio future refuses a StopIteration: before 3.13 set_exception raised TypeError on the loop and
    # the await never ended. It comes back wrapped, as 3.13 does, on every version.
    fake_cuda.run(
        SETUP
        + """
def stops():
    raise StopIteration("from the call")
async def main():
    try:
        await asyncio.wait_for(reclaim_asyncio.run_when_reached(0x9700, stops), 30)
    except RuntimeError as error:
        return type(error.__cause__).__name__
assert run(main, asyncio.new_event_loop) == "StopIteration"
"""
    )


def test_loops_that_drained_are_not_kept_alive_after_they_close():
    # The handle install() keeps per loop holds its loop weakly: a process that runs asyncio.run() again
    # and again (with the automatic drain off, each await installs the loop's reader) keeps no old loop.
    fake_cuda.run(
        SETUP
        + """
import weakref
cuda_reclaim.set_auto_drain("off")
loops = []
async def main():
    loops.append(weakref.ref(asyncio.get_running_loop()))
    reclaim_asyncio.install()
    await asyncio.wait_for(reclaim_asyncio.stream_reached(0x9800), 30)
for _ in range(20):
    run(main, asyncio.new_event_loop)
gc.collect()
assert all(ref() is None for ref in loops), sum(ref() is not None for ref in loops)
assert len(_asyncio_drain._installed) == 0
"""
    )


@pytest.mark.parametrize("new_mode", ["off", "gc"])
def test_an_await_pending_when_the_drain_thread_stops_is_served_by_its_loop(new_mode):
    # Started under the drain thread, the await installs no reader; switching the mode away from "thread"
    # meanwhile must not leave it waiting for a drain that never comes.
    fake_cuda.run(
        SETUP
        + f"""
cuda_reclaim.set_auto_drain("thread")
stream = 0x9900
fake.fake_cuda_stream_hold(stream, 1)
async def main():
    task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, int, 7))
    await asyncio.sleep(0.05)
    cuda_reclaim.set_auto_drain({new_mode!r})
    await asyncio.sleep(0.05)
    fake.fake_cuda_stream_hold(stream, 0)
    return await asyncio.wait_for(task, 30)
assert run(main, asyncio.new_event_loop) == 7
"""
    )


def test_an_await_pending_when_a_finalizer_on_the_drain_thread_stops_it_is_served_by_its_loop():
    # The switch comes from a finalizer that the drain thread itself runs (it stops its own thread): the
    # mode listener runs there, inside the drain, and must still hand the await to the loop's reader.
    fake_cuda.run(
        SETUP
        + """
cuda_reclaim.set_auto_drain("thread")
stream = 0x9A00
fake.fake_cuda_stream_hold(stream, 1)
class SwitchesOff:
    def __del__(self):
        cuda_reclaim.set_auto_drain("off")
async def main():
    task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, int, 7))
    await asyncio.sleep(0.05)
    # Handed over with the drain thread off: the queue holds the only reference, so the drain thread runs it.
    previous = cuda_reclaim.set_auto_drain("off")
    cuda_reclaim.defer_release(SwitchesOff())
    cuda_reclaim.set_auto_drain(previous)  # before the loop runs again: the await stays the drain thread's
    for _ in range(600):
        if cuda_reclaim.get_auto_drain() == "off":
            break
        await asyncio.sleep(0.05)
    assert cuda_reclaim.get_auto_drain() == "off"
    fake.fake_cuda_stream_hold(stream, 0)
    return await asyncio.wait_for(task, 30)
assert run(main, asyncio.new_event_loop) == 7
"""
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
@pytest.mark.parametrize("factory", LOOPS)
def test_in_a_fork_child_a_loop_made_before_the_fork_is_left_to_the_parent_and_a_loop_made_there_drains(
    factory, mode
):
    # In the child, the loop made before the fork: its drain handle is cancelled, its await pending at the fork
    # ends cancelled, and install() and new awaits there raise RuntimeError; a loop made in the child drains and
    # its awaits resume. Nothing the child does may wake (or spin) the parent's loop, which goes on serving its
    # awaits, the one pending at the fork included. Forking with the fake CUDA's helper thread just joined may
    # still warn.
    kind = "uvloop" if factory.startswith("uvloop") else "asyncio"
    if kind == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is not installed for this Python")
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


@pytest.mark.parametrize("factory", LOOPS)
def test_in_a_fork_child_a_loop_that_ran_on_the_forking_thread_is_refused_though_never_used_before(factory):
    # cuda_reclaim never used the loop before the fork: it is known as the parent's because the fork was made
    # while it ran on the forking thread.
    kind = "uvloop" if factory.startswith("uvloop") else "asyncio"
    if kind == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is not installed for this Python")
    result = fake_cuda.run_script(
        "asyncfork_loop_reader.py", "a_loop_running_on_the_forking_thread_is_the_parents_in_the_child", kind,
        PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    assert "child ok" in result.stdout.splitlines(), result.stdout + result.stderr


@pytest.mark.parametrize("awaiting", ["run_when_reached", "stream_reached"])
@pytest.mark.parametrize("factory", LOOPS)
def test_a_cancelled_await_never_runs_its_call_even_if_the_drain_thread_takes_it_before_the_loop_iterates(
    factory, awaiting
):
    # task.cancel() must reach the call at once: asyncio tells a cancelled future's done-callbacks only on
    # the loop's next iteration, and until then the drain thread may take the call and run it.
    factory = loop_factory(factory)
    fake_cuda.run(
        SETUP
        + f"""
stream = 0xA200
ran = []
cuda_reclaim.set_auto_drain("thread")
def call():
    ran.append("ran")
async def main():
    fake.fake_cuda_stream_hold(stream, 1)
    if {awaiting!r} == "run_when_reached":
        task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, call))
    else:
        task = asyncio.ensure_future(reclaim_asyncio.stream_reached(stream))
    await asyncio.sleep(0)                       # the task launched its call and awaits it
    assert task.cancel()
    # Still in this step, before the loop iterates: the stream gets there and the drain thread takes the call.
    fake.fake_cuda_stream_hold(stream, 0)
    wait_until(lambda: cuda_reclaim.stats()["calls_outstanding"] == 0)
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
assert run(main, {factory}) == "cancelled"
assert ran == [], "a call that had not started when its await was cancelled never runs"
s = cuda_reclaim.stats()
assert s["calls_cancelled"] == 1 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s
"""
    )


@pytest.mark.parametrize("factory", LOOPS)
def test_an_await_cancelled_while_the_drain_thread_runs_its_call_lets_the_call_finish_once(factory):
    # A call that has started finishes, once; the await ends cancelled; the counters add up.
    factory = loop_factory(factory)
    fake_cuda.run(
        SETUP
        + f"""
stream = 0xA300
started, release, ran = threading.Event(), threading.Event(), []
cuda_reclaim.set_auto_drain("thread")
def call():
    started.set()
    assert release.wait(30)
    ran.append("ran")
    return "result"
async def main():
    task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, call))
    await asyncio.sleep(0)
    assert started.wait(30)                      # the drain thread runs the call now
    assert task.cancel()
    release.set()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the await was not cancelled")
    wait_until(lambda: cuda_reclaim.stats()["calls_outstanding"] == 0)
    await asyncio.sleep(0.05)                    # the outcome reaches the loop, and is dropped quietly
run(main, {factory})
assert ran == ["ran"], ran
s = cuda_reclaim.stats()
assert s["calls_run"] == 1 and s["calls_cancelled"] == 0 and s["calls_outstanding"] == 0, s
print("clean")
"""
    )


def test_a_keyboard_interrupt_while_an_await_is_cancelled_still_cancels_its_call_and_ends_the_await():
    # The interrupt comes out of the call's cancel (from the done-callback that tells the loop): the call
    # must stay cancelled, the await must still end, and the interrupt reaches whoever cancelled.
    fake_cuda.run(
        SETUP
        + """
stream = 0xA400
ran = []
cuda_reclaim.set_auto_drain("thread")
async def main():
    loop = asyncio.get_running_loop()
    fake.fake_cuda_stream_hold(stream, 1)
    task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, ran.append, "ran"))
    await asyncio.sleep(0)
    schedule = loop.call_soon
    def interrupted(callback, *args, **kwargs):
        if callback is _asyncio_calls._copy_outcome:
            loop.call_soon = schedule
            raise KeyboardInterrupt
        return schedule(callback, *args, **kwargs)
    loop.call_soon = interrupted
    try:
        task.cancel()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt did not reach the caller")
    loop.call_soon = schedule
    fake.fake_cuda_stream_hold(stream, 0)
    wait_until(lambda: cuda_reclaim.stats()["calls_outstanding"] == 0)
    try:
        await asyncio.wait_for(task, 30)
    except asyncio.CancelledError:
        return "cancelled"
assert run(main, asyncio.new_event_loop) == "cancelled"
assert ran == []
s = cuda_reclaim.stats()
assert s["calls_cancelled"] == 1 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s
"""
    )


@pytest.mark.parametrize("mode", ["thread", "off"])
def test_close_while_awaits_are_pending_cancels_them_and_runs_nothing_after_it(mode):
    fake_cuda.run(
        SETUP
        + f"""
stream = 0xA500
ran = []
cuda_reclaim.set_auto_drain({mode!r})
async def main():
    fake.fake_cuda_stream_hold(stream, 1)
    tasks = [asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, ran.append, i)) for i in range(20)]
    tasks.append(asyncio.ensure_future(reclaim_asyncio.stream_reached(stream)))
    await asyncio.sleep(0)
    tasks[3].cancel()                            # one of them cancelled before the close
    cuda_reclaim.close()
    fake.fake_cuda_stream_hold(stream, 0)
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    return [type(outcome).__name__ for outcome in outcomes]
assert run(main, asyncio.new_event_loop) == ["CancelledError"] * 21
assert ran == []
s = cuda_reclaim.stats()
assert s["calls_cancelled"] == 21 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s
"""
    )


def test_a_keyboard_interrupt_before_the_await_begins_cancels_the_launched_call():
    # The call is launched, then the await is interrupted before it waits (here: while it installs the
    # loop's drain): nobody will ever await the outcome, so the call must not run.
    fake_cuda.run(
        SETUP
        + """
stream = 0xA600
ran = []
fake.fake_cuda_stream_hold(stream, 1)
install = _asyncio_calls.install
def interrupted(loop=None, **kwargs):
    raise KeyboardInterrupt
_asyncio_calls.install = interrupted
async def main():
    await reclaim_asyncio.run_when_reached(stream, ran.append, "ran")
try:
    run(main, asyncio.new_event_loop)
except KeyboardInterrupt:
    pass
else:
    raise AssertionError("the interrupt did not come out")
_asyncio_calls.install = install
fake.fake_cuda_stream_hold(stream, 0)
wait_until(lambda: cuda_reclaim.stats()["held_by_cuda"] == 0)
cuda_reclaim.drain()
assert ran == [], "nobody awaits the call: it never runs"
s = cuda_reclaim.stats()
assert s["calls_cancelled"] == 1 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s
"""
    )
