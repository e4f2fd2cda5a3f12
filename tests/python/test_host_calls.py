"""launch_host_func against the fake libcuda: the call runs in a drain (never on CUDA's thread) into its
Future, in stream order, with exceptions, cancellation, close, fork, exit and finalizers that launch more.
Each scenario runs in a child interpreter under a timeout (fake_cuda.run)."""

import pytest

import cuda_reclaim
import fake_cuda
from exit_report import find_reports, last_report


def test_launch_host_func_checks_its_arguments():
    with pytest.raises(TypeError, match="needs a callable"):
        cuda_reclaim.launch_host_func(0, "print")
    with pytest.raises(TypeError, match=r"launch_host_func\(\) expects a stream"):
        cuda_reclaim.launch_host_func(object(), print)
    with pytest.raises(ValueError, match="handle"):
        cuda_reclaim.launch_host_func(-1, print)


def test_importing_the_package_imports_neither_concurrent_futures_nor_logging():
    # logging's fork hook takes a lock before every fork; registered after the package's own fork hook
    # (which may wait for a drain thread that is forking too), it would run first and could deadlock.
    from conftest import run_child

    result = run_child(
        """
        import sys, cuda_reclaim
        assert "logging" not in sys.modules and "concurrent.futures" not in sys.modules, sorted(sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr


def test_without_a_driver_nothing_is_launched_and_nothing_kept():
    from conftest import run_child

    result = run_child(
        """
        import sys, cuda_reclaim
        fn, arg = (lambda x: x), object()
        base = sys.getrefcount(fn), sys.getrefcount(arg)
        try:
            cuda_reclaim.launch_host_func(0, fn, arg)
        except cuda_reclaim.DriverError as error:
            print("DriverError:", error)
        assert (sys.getrefcount(fn), sys.getrefcount(arg)) == base
        assert cuda_reclaim.stats()["calls_outstanding"] == 0
        """,
        env={"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"},
    )
    assert result.returncode == 0, result.stderr
    assert "DriverError: the CUDA driver library /nonexistent/libcuda.so.1" in result.stdout


def test_the_call_runs_in_a_drain_into_its_future_never_on_cudas_thread():
    fake_cuda.run(
        """
ran_on = []
def fn(a, b, *, c):
    ran_on.append(threading.get_ident())
    return a + b + c
future = cuda_reclaim.launch_host_func(0x8100, fn, 1, 2, c=3)
assert not future.done() and cuda_reclaim.pending() == 0
assert fake.fake_cuda_run_host_functions() == 1
cuda_thread = _reclaim._source_stats()["last_host_function_thread"]
assert cuda_thread not in (0, threading.get_ident())
assert not future.done() and not ran_on, "CUDA's thread only pushed"
assert cuda_reclaim.pending() == 1
assert cuda_reclaim.drain() == 1
assert future.result(timeout=0) == 6
assert ran_on == [threading.get_ident()], "ran here, in the drain"
s = cuda_reclaim.stats()
assert s["host_calls"] == 1 and s["calls_run"] == 1 and s["calls_outstanding"] == 0, s
assert s["direct_pushes"] == 0 and s["held_by_cuda"] == 0, s
"""
    )


def test_exceptions_go_to_the_future_with_their_traceback():
    fake_cuda.run(
        """
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
"""
    )


def test_calls_of_one_stream_run_in_stream_order_whichever_cuda_thread_and_drain_runs_them():
    # Four CUDA threads take turns on three streams (so consecutive host functions of one stream push
    # through different producer slots); the automatic drain thread and small budgeted drains on the main
    # thread take the calls concurrently. Per stream, the calls must run in launch order.
    fake_cuda.run(
        """
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
print("calls that arrived before their turn:", _reclaim._call_stats()["calls_parked"])
"""
    )


def test_a_call_that_drains_again_runs_the_later_calls_of_its_stream_after_it_returns():
    fake_cuda.run(
        """
stream = 0x8400
order = []
def first():
    order.append("first starts")
    fake.fake_cuda_run_host_functions()        # the stream reaches the next two calls meanwhile
    assert cuda_reclaim.drain() == 2, "dequeued here, but they must wait for this call"
    order.append("first ends")
futures = [cuda_reclaim.launch_host_func(stream, first)]
fake.fake_cuda_run_host_functions()
futures += [cuda_reclaim.launch_host_func(stream, order.append, name) for name in ("second", "third")]
assert cuda_reclaim.drain() == 1
for future in futures:
    future.result(timeout=0)
assert order == ["first starts", "first ends", "second", "third"], order
assert _reclaim._call_stats()["calls_parked"] == 2
"""
    )


def test_a_cancelled_future_never_runs_and_its_references_go_when_cuda_hands_the_call_back():
    fake_cuda.run(
        """
stream = 0x8500
fake.fake_cuda_stream_hold(stream, 1)
arg = P(); ref = weakref.ref(arg)
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
"""
    )


def test_after_close_nothing_runs_futures_are_cancelled_and_references_released():
    fake_cuda.run(
        """
stream = 0x8600
ran = []
fired_first = cuda_reclaim.launch_host_func(stream, ran.append, "queued before close")
fake.fake_cuda_run_host_functions()            # pushed, not drained yet
fake.fake_cuda_stream_hold(stream, 1)
arg = P(); ref = weakref.ref(arg)
held = cuda_reclaim.launch_host_func(stream, ran.append, arg)
del arg
cuda_reclaim.close()
assert fired_first.result(timeout=0) is None and ran == ["queued before close"], "the final drain ran it"
assert held.cancelled(), "CUDA never handed it back before the close"
assert ref() is None, "its references were released at close, though CUDA still points to the call"
s = cuda_reclaim.stats()
assert s["calls_cancelled"] == 1 and s["calls_outstanding"] == 0 and s["held_by_cuda"] == 1, s
fake.fake_cuda_stream_hold(stream, 0)
fake.fake_cuda_run_host_functions()            # CUDA hands it back after the close: counted, untouched
s = cuda_reclaim.stats()
assert s["leaked_after_close"] == 1 and s["held_by_cuda"] == 0, s
late = cuda_reclaim.launch_host_func(stream, ran.append, "after close")
assert late.cancelled(), "a launch after close is refused with a cancelled future"
assert cuda_reclaim.stats()["attached_to_cuda"] == s["attached_to_cuda"], "nothing was launched"
assert fake.fake_cuda_run_host_functions() == 0
assert ran == ["queued before close"]
"""
    )


def test_a_call_that_closes_cancels_the_calls_that_would_run_after_it():
    fake_cuda.run(
        """
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
"""
    )


def test_a_fork_child_cancels_the_parents_calls_and_launches_its_own():
    fake_cuda.run(
        """
import os
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
"""
    )


def test_exit_runs_what_cuda_handed_back_and_cancels_what_it_still_holds():
    result = fake_cuda.run(
        """
import atexit
ran_stream, held_stream = 0x8900, 0x8901
cuda_reclaim.launch_host_func(ran_stream, print, "ran at exit", flush=True)
fake.fake_cuda_run_host_functions()            # handed back; no drain before exit
fake.fake_cuda_stream_hold(held_stream, 1)
held = cuda_reclaim.launch_host_func(held_stream, print, "never runs", flush=True)
def after_close():
    print("held future cancelled:", held.cancelled(), flush=True)
atexit.unregister(cuda_reclaim._auto.close_at_exit)
atexit.register(after_close)
atexit.register(cuda_reclaim._auto.close_at_exit)
""",
        CUDA_RECLAIM_REPORT="1",
    )
    assert "ran at exit" in result.stdout and "never runs" not in result.stdout, result.stdout
    assert "held future cancelled: True" in result.stdout
    report = last_report(result.stderr)
    assert report["held_by_cuda"] == 1 and report["conserved"] == "yes", result.stderr


def test_a_future_callback_and_the_cuda_stream_protocol_work_together():
    fake_cuda.run(
        """
class Stream:
    def __cuda_stream__(self):
        return (0, 0x8A00)
results = []
first = cuda_reclaim.launch_host_func(Stream(), lambda: 1)
first.add_done_callback(lambda f: results.append(cuda_reclaim.launch_host_func(Stream(), lambda: f.result() + 1)))
fake.fake_cuda_run_host_functions(); cuda_reclaim.drain()
fake.fake_cuda_run_host_functions(); cuda_reclaim.drain()
assert results[0].result(timeout=0) == 2
"""
    )


_LAUNCHES_IN_DEL = """
fake.fake_cuda_start_threads(2)
cuda_reclaim.set_auto_drain("thread")
class Launches:
    def __init__(self, i): self.i = i
    def __del__(self):
        cuda_reclaim.launch_host_func(0x8B00 + self.i % 3, int, self.i)
        cuda_reclaim.keep_alive_until(0x8B00 + self.i % 3, P())
        {extra}
for i in range({count}):
    cuda_reclaim.defer_release(Launches(i))
    if i % 100 == 0:
        cuda_reclaim.drain()                    # the main thread runs finalizers too
{ending}
print("done", flush=True)
"""


@pytest.mark.parametrize(
    "extra, count, ending",
    [
        pytest.param("", 3000, "", id="exit"),
        pytest.param("", 3000, "time.sleep(0.02); cuda_reclaim.close()", id="close"),
        pytest.param(
            "",
            1000,
            "time.sleep(0.02)\nimport os\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)",
            id="fork",
        ),
        pytest.param("if self.i == 500: cuda_reclaim.close()", 1000, "", id="close-in-finalizer"),
    ],
)
def test_finalizers_that_launch_host_calls_are_safe_through_close_exit_and_fork(extra, count, ending):
    code = _LAUNCHES_IN_DEL.format(extra=extra, count=count, ending=ending)
    result = fake_cuda.run(code, CUDA_RECLAIM_REPORT="1")
    assert result.stdout.strip().splitlines()[-1] == "done", result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    for report in find_reports(result.stderr):
        assert report["conserved"] == "yes", result.stderr
        assert report["attached_to_cuda"] == report["handed_back_by_cuda"] + report["held_by_cuda"], result.stderr
