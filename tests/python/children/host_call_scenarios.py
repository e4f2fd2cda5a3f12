"""Child of test_host_calls.py: one scenario per run, named by the first argument. All but
without_a_driver run against the fake libcuda (tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA
names; that one against a CUDA_RECLAIM_LIBCUDA that does not exist (no driver)."""

import os
import sys
import threading
import weakref

import cuda_reclaim
from cuda_reclaim import _reclaim

import scenario


class P:
    pass


def fake_driver():
    """The fake driver's controls (fake_cuda.py, one directory up), with the automatic drain off."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import fake_cuda

    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain("off")
    return fake


def without_a_driver():
    fn, arg = (lambda x: x), object()
    base = sys.getrefcount(fn), sys.getrefcount(arg)
    try:
        cuda_reclaim.launch_host_func(0, fn, arg)
    except cuda_reclaim.DriverError as error:
        print("DriverError:", error)
    assert (sys.getrefcount(fn), sys.getrefcount(arg)) == base
    assert cuda_reclaim.stats()["calls_outstanding"] == 0


def runs_in_a_drain_into_its_future():
    fake = fake_driver()
    ran_on = []

    def fn(a, b, *, c):
        ran_on.append(threading.get_ident())
        return a + b + c

    future = cuda_reclaim.launch_host_func(0x8100, fn, 1, 2, c=3)
    assert not future.done() and cuda_reclaim.pending() == 0
    assert fake.fake_cuda_run_host_functions() == 1
    cuda_thread = _reclaim._diagnostics()["last_host_function_thread"]
    assert cuda_thread not in (0, threading.get_ident())
    assert not future.done() and not ran_on, "CUDA's thread only pushed"
    assert cuda_reclaim.pending() == 1
    assert cuda_reclaim.drain() == 1
    assert future.result(timeout=0) == 6
    assert ran_on == [threading.get_ident()], "ran here, in the drain"
    s = cuda_reclaim.stats()
    assert s["host_calls"] == 1 and s["calls_run"] == 1 and s["calls_outstanding"] == 0, s
    assert s["direct_pushes"] == 0 and s["held_by_cuda"] == 0, s


def exceptions_go_to_the_future():
    fake = fake_driver()

    def fails():
        raise LookupError("from the callback")

    def exits():
        raise SystemExit(3)

    futures = [cuda_reclaim.launch_host_func(0x8200, fails), cuda_reclaim.launch_host_func(0x8200, exits)]
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    error = futures[0].exception(timeout=0)
    assert isinstance(error, LookupError) and error.__traceback__ is not None, repr(error)
    assert isinstance(futures[1].exception(timeout=0), SystemExit)
    assert cuda_reclaim.stats()["calls_run"] == 2
    print("still running")


def a_call_after_a_deallocator_that_leaves_an_exception_runs_clean():
    # CUDA's thread hands over, in stream order, a reference whose deallocator leaves an exception set (a
    # faulty C extension) and then a host call: one drain releases both. The call must start with no
    # exception set (run with one, it never completes its future), and the leftover one is reported.
    import _native_producers

    fake = fake_driver()
    seen = []
    sys.unraisablehook = lambda unraisable: seen.append(str(unraisable.exc_value))
    cuda_reclaim.keep_alive_until(0x8250, _native_producers.LeavesAnException())
    future = cuda_reclaim.launch_host_func(0x8250, lambda: "ran clean")
    assert fake.fake_cuda_run_host_functions() == 2
    assert cuda_reclaim.drain() == 2
    assert _native_producers.leaky_deallocated() == 1
    assert future.result(timeout=0) == "ran clean"
    assert seen == ["left set by a deallocator"], seen


def the_report_before_a_call_may_drain_again_or_close(then):
    # The leftover exception's report (sys.unraisablehook, Python code) runs inside the drain, just before
    # the host call: a hook that drains again or closes must find the counts conserved, and the call runs
    # (drain) or is cancelled (close), never lost and never left outstanding.
    import _native_producers

    fake = fake_driver()
    seen = []

    def hook(unraisable):
        seen.append(str(unraisable.exc_value))
        s = cuda_reclaim.stats()
        assert cuda_reclaim.conserved(s), s
        if then == "drain":
            cuda_reclaim.drain()
        else:
            cuda_reclaim.close()

    sys.unraisablehook = hook
    cuda_reclaim.keep_alive_until(0x8260, _native_producers.LeavesAnException())
    future = cuda_reclaim.launch_host_func(0x8260, lambda: "ran")
    assert fake.fake_cuda_run_host_functions() == 2
    assert cuda_reclaim.drain() == 2
    assert seen == ["left set by a deallocator"], seen
    if then == "drain":
        assert future.result(timeout=0) == "ran"
    else:
        assert future.cancelled(), future
    assert cuda_reclaim.stats()["calls_outstanding"] == 0


def stream_order_across_cuda_threads_and_drains():
    fake = fake_driver()
    cuda_reclaim.set_auto_drain("thread")
    fake.fake_cuda_start_threads(4)
    streams = [0x8300, 0x8301, 0x8302]
    ran = {stream: [] for stream in streams}

    def record(stream, i):
        ran[stream].append(i)

    futures = []
    for i in range(6000):
        stream = streams[i % 3]
        futures.append(cuda_reclaim.launch_host_func(stream, record, stream, i // 3))
        if i % 50 == 0:
            cuda_reclaim.drain(max_items=7)
    for future in futures:
        future.result(timeout=60)
    for stream in streams:
        assert ran[stream] == list(range(2000)), [x for x in ran[stream][:50]]
    s = cuda_reclaim.stats()
    assert s["calls_run"] == 6000 and s["calls_outstanding"] == 0, s
    print("calls that arrived before their turn:", cuda_reclaim.stats()["calls_parked"])


def a_call_that_drains_again():
    fake = fake_driver()
    stream = 0x8400
    order = []

    def first():
        order.append("first starts")
        fake.fake_cuda_run_host_functions()  # the stream reaches the next two calls meanwhile
        assert cuda_reclaim.drain() == 2, "dequeued here, but they must wait for this call"
        order.append("first ends")

    futures = [cuda_reclaim.launch_host_func(stream, first)]
    fake.fake_cuda_run_host_functions()
    futures += [cuda_reclaim.launch_host_func(stream, order.append, name) for name in ("second", "third")]
    assert cuda_reclaim.drain() == 1
    for future in futures:
        future.result(timeout=0)
    assert order == ["first starts", "first ends", "second", "third"], order
    assert cuda_reclaim.stats()["calls_parked"] == 2


def a_cancelled_future_never_runs():
    fake = fake_driver()
    stream = 0x8500
    fake.fake_cuda_stream_hold(stream, 1)
    arg = P()
    ref = weakref.ref(arg)
    ran = []
    future = cuda_reclaim.launch_host_func(stream, ran.append, arg)
    del arg
    assert future.cancel()
    assert ref() is not None, "CUDA still holds the call"
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert not ran and ref() is None
    s = cuda_reclaim.stats()
    assert s["calls_cancelled"] == 1 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s


def after_close_nothing_runs():
    fake = fake_driver()
    stream = 0x8600
    ran = []
    fired_first = cuda_reclaim.launch_host_func(stream, ran.append, "queued before close")
    fake.fake_cuda_run_host_functions()  # pushed, not drained yet
    fake.fake_cuda_stream_hold(stream, 1)
    arg = P()
    ref = weakref.ref(arg)
    held = cuda_reclaim.launch_host_func(stream, ran.append, arg)
    del arg
    cuda_reclaim.close()
    assert fired_first.result(timeout=0) is None and ran == ["queued before close"], "the final drain ran it"
    assert held.cancelled(), "CUDA never handed it back before the close"
    assert ref() is None, "its references were released at close, though CUDA still points to the call"
    s = cuda_reclaim.stats()
    assert s["calls_cancelled"] == 1 and s["calls_outstanding"] == 0 and s["held_by_cuda"] == 1, s
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()  # CUDA hands it back after the close: counted, untouched
    s = cuda_reclaim.stats()
    assert s["leaked_after_close"] == 1 and s["held_by_cuda"] == 0, s
    late = cuda_reclaim.launch_host_func(stream, ran.append, "after close")
    assert late.cancelled(), "a launch after close is refused with a cancelled future"
    assert cuda_reclaim.stats()["attached_to_cuda"] == s["attached_to_cuda"], "nothing was launched"
    assert fake.fake_cuda_run_host_functions() == 0
    assert ran == ["queued before close"]


def a_call_that_closes():
    fake = fake_driver()
    stream = 0x8700
    ran = []

    def closes():
        ran.append("closes")
        cuda_reclaim.close()

    futures = [cuda_reclaim.launch_host_func(stream, closes)]
    futures += [cuda_reclaim.launch_host_func(stream, ran.append, i) for i in range(3)]
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert ran == ["closes"], ran
    assert all(f.cancelled() for f in futures[1:])
    assert cuda_reclaim.stats()["calls_outstanding"] == 0


def a_call_that_closes_from_a_drain_that_took_other_streams_calls(budget):
    # A close() from inside a drain cannot reach the calls that drain has taken and not reached yet: those
    # are cancelled too (whatever their stream) and never run after close() returns. A call still in the
    # queue runs in the close's own final drain. `budget`: the interrupted drain's max_items ("all": it
    # takes the other stream's call too; "1": it leaves it in the queue).
    fake = fake_driver()
    ran = []
    closing = cuda_reclaim.launch_host_func(0x8A00, cuda_reclaim.close)
    other = cuda_reclaim.launch_host_func(0x8B00, ran.append, "other stream")
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain(max_items=None if budget == "all" else int(budget))
    assert closing.done() and not closing.cancelled()
    if budget == "all":
        assert other.cancelled() and ran == [], ran
    else:
        assert other.result(timeout=0) is None and ran == ["other stream"], ran
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0 and cuda_reclaim.conserved(s), s
    assert s["calls_run"] + s["calls_cancelled"] == 2, s


def a_launch_racing_close_is_run_or_cancelled():
    # launch_host_func gives the GIL up between its "closed?" check and putting the call on the list that
    # close() cancels: a close() on another thread in between must not leave a call that never ends. (The
    # close lands in that window only now and then; whatever the interleaving, no call may stay pending.)
    fake = fake_driver()
    futures = []
    stop = threading.Event()
    launching = threading.Event()
    sys.setswitchinterval(1e-6)  # hand the GIL over often, so that the close lands in that window some time

    def launcher():
        while not stop.is_set():
            futures.append(cuda_reclaim.launch_host_func(0x8C00, int, 1))
            launching.set()

    thread = threading.Thread(target=launcher)
    thread.start()
    assert launching.wait(30), "the launcher never launched"  # the close lands among its launches
    cuda_reclaim.close()
    stop.set()
    thread.join()
    fake.fake_cuda_run_host_functions()  # CUDA hands back what was launched: after the close, leaked
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0, s
    assert all(f.done() for f in futures), sum(not f.done() for f in futures)


def a_fork_child_cancels_the_parents_calls():
    fake = fake_driver()
    stream = 0x8800
    fake.fake_cuda_stream_hold(stream, 1)
    ran = []
    future = cuda_reclaim.launch_host_func(stream, ran.append, "parent")
    pid = os.fork()
    if pid == 0:
        ok = future.cancelled() and cuda_reclaim.stats()["calls_outstanding"] == 0
        mine = cuda_reclaim.launch_host_func(0x8801, lambda: "child")
        fake.fake_cuda_run_host_functions()
        cuda_reclaim.drain()
        ok = ok and mine.result(timeout=0) == "child" and not ran
        os._exit(0 if ok else 7)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, status
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert future.result(timeout=0) is None and ran == ["parent"]


def exit_runs_what_cuda_handed_back():
    import atexit

    fake = fake_driver()
    ran_stream, held_stream = 0x8900, 0x8901
    cuda_reclaim.launch_host_func(ran_stream, print, "ran at exit", flush=True)
    fake.fake_cuda_run_host_functions()  # handed back; no drain before exit
    fake.fake_cuda_stream_hold(held_stream, 1)
    held = cuda_reclaim.launch_host_func(held_stream, print, "never runs", flush=True)

    def after_close():
        print("held future cancelled:", held.cancelled(), flush=True)

    # atexit runs its hooks last registered first: the package's hook, registered again after this one,
    # closes before it looks.
    atexit.unregister(cuda_reclaim._auto.close_at_exit)
    atexit.register(after_close)
    atexit.register(cuda_reclaim._auto.close_at_exit)


def a_future_callback_and_the_cuda_stream_protocol():
    fake = fake_driver()

    class Stream:
        def __cuda_stream__(self):
            return (0, 0x8A00)

    results = []
    first = cuda_reclaim.launch_host_func(Stream(), lambda: 1)
    first.add_done_callback(
        lambda f: results.append(cuda_reclaim.launch_host_func(Stream(), lambda: f.result() + 1))
    )
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert results[0].result(timeout=0) == 2


def finalizers_that_launch(ending, count):
    """Finalizers, run by the drain thread and by drains here, launch host calls and keep objects alive
    while the process ends as `ending` says: exit, close, fork or close-in-finalizer."""
    fake = fake_driver()
    fake.fake_cuda_start_threads(2)
    cuda_reclaim.set_auto_drain("thread")

    on_the_drain_thread = threading.Event()  # the drain thread is running finalizers

    class Launches:
        def __init__(self, i):
            self.i = i

        def __del__(self):
            if threading.current_thread() is not threading.main_thread():
                on_the_drain_thread.set()
            cuda_reclaim.launch_host_func(0x8B00 + self.i % 3, int, self.i)
            cuda_reclaim.keep_alive_until(0x8B00 + self.i % 3, P())
            if ending == "close-in-finalizer" and self.i == 500:
                cuda_reclaim.close()

    for i in range(int(count)):
        cuda_reclaim.defer_release(Launches(i))
        if i % 100 == 0:
            cuda_reclaim.drain()  # the main thread runs finalizers too
    if ending in ("close", "fork"):
        assert on_the_drain_thread.wait(30), "the drain thread ran none of the finalizers"
    scenario.close_or_fork(ending)
    print("done", flush=True)


if __name__ == "__main__":
    scenario.run(
        without_a_driver,
        runs_in_a_drain_into_its_future,
        exceptions_go_to_the_future,
        a_call_after_a_deallocator_that_leaves_an_exception_runs_clean,
        the_report_before_a_call_may_drain_again_or_close,
        stream_order_across_cuda_threads_and_drains,
        a_call_that_drains_again,
        a_cancelled_future_never_runs,
        after_close_nothing_runs,
        a_call_that_closes,
        a_call_that_closes_from_a_drain_that_took_other_streams_calls,
        a_launch_racing_close_is_run_or_cancelled,
        a_fork_child_cancels_the_parents_calls,
        exit_runs_what_cuda_handed_back,
        a_future_callback_and_the_cuda_stream_protocol,
        finalizers_that_launch,
    )
