"""Child of test_asyncio_streams.py: one scenario per run, named by the first argument (and, where it
takes one, the loop's kind, asyncio or uvloop, then the drain mode or what it awaits), against the fake libcuda
(tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names, with one fake CUDA thread."""

import asyncio
import gc
import threading
import weakref

import cuda_reclaim.asyncio as reclaim_asyncio
from cuda_reclaim import _asyncio_calls, _asyncio_drain
from fake_driver_child import P, cuda_reclaim, fake, wait_until

import scenario

fake.fake_cuda_start_threads(1)


def loop_factory(kind):
    """The new_event_loop of asyncio or of uvloop."""
    if kind == "uvloop":
        import uvloop  # here: uvloop is installed for some interpreters only

        return uvloop.new_event_loop
    assert kind == "asyncio", kind
    return asyncio.new_event_loop


def run(main, factory):
    """Runs the coroutine function `main` on a new loop from `factory`, closes the loop, returns main's result."""
    loop = factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def an_idle_loop_resumes_when_the_stream_gets_there(kind, mode):
    cuda_reclaim.set_auto_drain(mode)
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
    assert run(main, loop_factory(kind)) == 42
    s = cuda_reclaim.stats()
    assert s["calls_run"] == 2 and s["calls_outstanding"] == 0, s


def awaits_on_one_stream_resume_in_stream_order_and_exceptions_come_back(kind):
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
    assert run(main, loop_factory(kind)) == "ok"


def a_cancelled_await_never_runs_the_call_and_leaks_nothing(kind):
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
    run(main, loop_factory(kind))
    gc.collect()
    assert ran == [], "a cancelled call never runs"
    assert refs[0]() is None, "its references went once CUDA handed the call back"
    s = cuda_reclaim.stats()
    assert s["calls_cancelled"] == 2 and s["calls_run"] == 1 and s["calls_outstanding"] == 0, s
    print("clean")


def a_call_that_completes_after_its_loop_closed_is_dropped_quietly():
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


def after_close_an_await_is_cancelled():
    cuda_reclaim.close()
    async def main():
        try:
            await reclaim_asyncio.stream_reached(0x9500)
        except asyncio.CancelledError:
            return "cancelled"
    assert run(main, asyncio.new_event_loop) == "cancelled"
    assert cuda_reclaim.stats()["attached_to_cuda"] == 0


def with_the_automatic_drain_off_the_first_await_installs_the_loops_drain():
    async def main():
        loop = asyncio.get_running_loop()
        assert _asyncio_drain._installed.get(loop) is None
        await asyncio.wait_for(reclaim_asyncio.stream_reached(0x9600), 30)
        handle = _asyncio_drain._installed.get(loop)
        assert handle is not None and handle.mode == "reader" and handle.drained >= 1
        from cuda_reclaim import _auto
        assert not _auto.is_thread_running()
    run(main, asyncio.new_event_loop)


def a_call_that_raises_stop_iteration_ends_the_await_with_runtime_error():
    def stops():
        raise StopIteration("from the call")
    async def main():
        try:
            await asyncio.wait_for(reclaim_asyncio.run_when_reached(0x9700, stops), 30)
        except RuntimeError as error:
            return type(error.__cause__).__name__
    assert run(main, asyncio.new_event_loop) == "StopIteration"


def loops_that_drained_are_not_kept_alive_after_they_close():
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


def an_await_pending_when_the_drain_thread_stops_is_served_by_its_loop(new_mode):
    cuda_reclaim.set_auto_drain("thread")
    stream = 0x9900
    fake.fake_cuda_stream_hold(stream, 1)
    async def main():
        task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(stream, int, 7))
        await asyncio.sleep(0.05)
        cuda_reclaim.set_auto_drain(new_mode)
        await asyncio.sleep(0.05)
        fake.fake_cuda_stream_hold(stream, 0)
        return await asyncio.wait_for(task, 30)
    assert run(main, asyncio.new_event_loop) == 7


def an_await_pending_when_a_finalizer_on_the_drain_thread_stops_it_is_served_by_its_loop():
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


def a_cancelled_await_never_runs_its_call_even_if_the_drain_thread_takes_it_before_the_loop_iterates(kind, awaiting):
    stream = 0xA200
    ran = []
    cuda_reclaim.set_auto_drain("thread")
    def call():
        ran.append("ran")
    async def main():
        fake.fake_cuda_stream_hold(stream, 1)
        if awaiting == "run_when_reached":
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
    assert run(main, loop_factory(kind)) == "cancelled"
    assert ran == [], "a call that had not started when its await was cancelled never runs"
    s = cuda_reclaim.stats()
    assert s["calls_cancelled"] == 1 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s


def an_await_cancelled_while_the_drain_thread_runs_its_call_lets_the_call_finish_once(kind):
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
    run(main, loop_factory(kind))
    assert ran == ["ran"], ran
    s = cuda_reclaim.stats()
    assert s["calls_run"] == 1 and s["calls_cancelled"] == 0 and s["calls_outstanding"] == 0, s
    print("clean")


def a_keyboard_interrupt_while_an_await_is_cancelled_still_cancels_its_call_and_ends_the_await():
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


def close_while_awaits_are_pending_cancels_them_and_runs_nothing_after_it(mode):
    stream = 0xA500
    ran = []
    cuda_reclaim.set_auto_drain(mode)
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


def a_keyboard_interrupt_before_the_await_begins_cancels_the_launched_call():
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


if __name__ == "__main__":
    scenario.run(
        an_idle_loop_resumes_when_the_stream_gets_there,
        awaits_on_one_stream_resume_in_stream_order_and_exceptions_come_back,
        a_cancelled_await_never_runs_the_call_and_leaks_nothing,
        a_call_that_completes_after_its_loop_closed_is_dropped_quietly,
        after_close_an_await_is_cancelled,
        with_the_automatic_drain_off_the_first_await_installs_the_loops_drain,
        a_call_that_raises_stop_iteration_ends_the_await_with_runtime_error,
        loops_that_drained_are_not_kept_alive_after_they_close,
        an_await_pending_when_the_drain_thread_stops_is_served_by_its_loop,
        an_await_pending_when_a_finalizer_on_the_drain_thread_stops_it_is_served_by_its_loop,
        a_cancelled_await_never_runs_its_call_even_if_the_drain_thread_takes_it_before_the_loop_iterates,
        an_await_cancelled_while_the_drain_thread_runs_its_call_lets_the_call_finish_once,
        a_keyboard_interrupt_while_an_await_is_cancelled_still_cancels_its_call_and_ends_the_await,
        close_while_awaits_are_pending_cancels_them_and_runs_nothing_after_it,
        a_keyboard_interrupt_before_the_await_begins_cancels_the_launched_call,
    )
