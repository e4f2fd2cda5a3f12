"""Child of test_host_calls.py: a fork child cancels exactly the parent's outstanding calls, whatever the
done-callbacks of those calls do meanwhile. `python asyncfork_child_cancels.py NAME`."""

import os
import select
import signal
import sys

import scenario

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fake_cuda  # noqa: E402

import cuda_reclaim  # noqa: E402

# Bounds the wait for the fork child's report: a child stuck in os.fork() is killed and the scenario fails.
CHILD_LIMIT_SECONDS = 20


def fork_and_report(in_child):
    """Forks; the child runs `in_child()` and reports its return value (a string) or its exception. Returns
    the report, or fails when the child reports nothing within the limit (the child is then killed)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            message = str(in_child())
        except BaseException as error:  # reported to the parent, which fails the scenario
            message = f"child failed: {error!r}"
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], CHILD_LIMIT_SECONDS)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError(f"the fork child reported nothing in {CHILD_LIMIT_SECONDS} s (stuck in os.fork())")
    message = os.read(read_end, 10000).decode()
    os.waitpid(pid, 0)
    return message


def parents_call_runs_in_the_parent(fake, stream, future, ran):
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert future.result(timeout=0) is None and ran == ["parent"], ran
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0 and s["calls_cancelled"] == 0, s


def a_launch_by_a_done_callback_during_the_childs_cancellation_is_the_childs_own():
    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain("off")
    stream = 0xB100
    ran, launched = [], []
    # A call of the stream that CUDA handed back and nobody drained at the fork (abandoned in the child):
    # the stream's order in the child must not wait for it.
    queued = cuda_reclaim.launch_host_func(stream, ran.append, "queued")
    fake.fake_cuda_run_host_functions()
    fake.fake_cuda_stream_hold(stream, 1)
    future = cuda_reclaim.launch_host_func(stream, ran.append, "parent")

    def launch_when_cancelled(finished):
        if finished.cancelled():
            # On the parent's stream and on another one: both are the child's own launches.
            launched.append(cuda_reclaim.launch_host_func(stream, ran.append, "child, same stream"))
            launched.append(cuda_reclaim.launch_host_func(stream + 1, ran.append, "child, other stream"))

    future.add_done_callback(launch_when_cancelled)

    def in_child():
        assert future.cancelled() and queued.cancelled()  # both are the parent's
        assert [f.cancelled() for f in launched] == [False, False], "the child's own launches were cancelled"
        s = cuda_reclaim.stats()
        assert s["calls_outstanding"] == 2 and s["calls_cancelled"] == 2, s
        fake.fake_cuda_stream_hold(stream, 0)
        fake.fake_cuda_run_host_functions()
        cuda_reclaim.drain()
        assert [f.result(timeout=0) for f in launched] == [None, None]
        assert sorted(ran) == ["child, other stream", "child, same stream"], ran
        s = cuda_reclaim.stats()
        assert s["calls_outstanding"] == 0 and s["calls_run"] == 2 and s["calls_cancelled"] == 2, s
        return "child ok"

    report = fork_and_report(in_child)
    assert report == "child ok", report
    cuda_reclaim.drain()
    assert queued.result(timeout=0) is None and ran == ["queued"], ran
    ran.clear()
    parents_call_runs_in_the_parent(fake, stream, future, ran)
    print("ok", flush=True)


def a_done_callback_that_relaunches_when_cancelled_lets_the_fork_return():
    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain("off")
    stream = 0xB200
    fake.fake_cuda_stream_hold(stream, 1)
    ran, relaunched = [], []
    future = cuda_reclaim.launch_host_func(stream, ran.append, "parent")

    def relaunch_when_cancelled(finished):
        if finished.cancelled():
            again = cuda_reclaim.launch_host_func(stream, ran.append, "child")
            relaunched.append(again)
            again.add_done_callback(relaunch_when_cancelled)

    future.add_done_callback(relaunch_when_cancelled)

    def in_child():
        assert len(relaunched) == 1, f"{len(relaunched)} launches by the done-callback"
        s = cuda_reclaim.stats()
        assert s["calls_outstanding"] == 1 and s["calls_cancelled"] == 1, s
        fake.fake_cuda_stream_hold(stream, 0)
        fake.fake_cuda_run_host_functions()
        cuda_reclaim.drain()
        assert relaunched[0].result(timeout=0) is None and ran == ["child"], ran
        return "child ok"

    report = fork_and_report(in_child)
    assert report == "child ok", report
    parents_call_runs_in_the_parent(fake, stream, future, ran)
    print("ok", flush=True)


def a_fork_or_close_from_a_done_callback_during_the_childs_cancellation_cancels_the_rest_once():
    # The child's cancellation re-enters: a done-callback forks again (the grandchild cancels what was
    # left, and the calls the child launched meanwhile) or closes. Every call is counted once.
    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain("off")
    stream = 0xB300
    fake.fake_cuda_stream_hold(stream, 1)
    ran, reports = [], []
    futures = [cuda_reclaim.launch_host_func(stream, ran.append, i) for i in range(6)]

    def in_grandchild():
        s = cuda_reclaim.stats()
        assert all(f.cancelled() for f in futures), [f.cancelled() for f in futures]
        assert s["calls_outstanding"] == 0 and s["calls_cancelled"] == 6, s
        return "grandchild ok"

    def fork_again(finished):
        if finished.cancelled() and not reports:
            cuda_reclaim.launch_host_func(stream, ran.append, "child")  # the grandchild cancels it too
            reports.append(fork_and_report(in_grandchild))

    def close(finished):
        if finished.cancelled():
            cuda_reclaim.close()

    # The child cancels the newest launch first: futures[4] forks, then futures[1] closes.
    futures[4].add_done_callback(fork_again)
    futures[1].add_done_callback(close)

    def in_child():
        assert reports == ["grandchild ok"], reports
        assert all(f.cancelled() for f in futures)
        s = cuda_reclaim.stats()
        # The parent's six, and the child's own launch: in the grandchild by its fork, here by the close.
        assert s["calls_outstanding"] == 0 and s["calls_cancelled"] == 7 and s["calls_run"] == 0, s
        return "child ok"

    report = fork_and_report(in_child)
    assert report == "child ok", report
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert ran == list(range(6)), ran
    print("ok", flush=True)


if __name__ == "__main__":
    scenario.run(
        a_launch_by_a_done_callback_during_the_childs_cancellation_is_the_childs_own,
        a_done_callback_that_relaunches_when_cancelled_lets_the_fork_return,
        a_fork_or_close_from_a_done_callback_during_the_childs_cancellation_cancels_the_rest_once,
    )
