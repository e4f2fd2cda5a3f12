"""Child of test_ordered_host_calls.py: one scenario per run, named by the first argument, against the fake
libcuda (tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names, with one persistent CUDA thread (as
CUDA runs a context's host functions: one at a time, each stream's in order)."""

import os
import sys
import threading
import weakref

import cuda_reclaim
from cuda_reclaim import _reclaim

import scenario

TIMEOUT_MS = 60_000  # a fake stream synchronize that passes this failed: the gate never opened


class Callable:
    """A function object that a weak reference can watch (a lambda's count moves with the interpreter's own
    borrowed loads on 3.14+, so a test reads whether a reference is kept, not a count)."""

    def __call__(self):
        return None


def fake_driver(mode="thread"):
    """The fake driver's controls (fake_cuda.py, one directory up), one CUDA thread, the automatic drain in
    `mode`."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import fake_cuda

    fake = fake_cuda.load()
    fake.fake_cuda_start_threads(1)
    cuda_reclaim.set_auto_drain(mode)
    return fake


def synchronize(fake, stream):
    assert fake.fake_cuda_stream_synchronize(stream, TIMEOUT_MS) == 0, f"stream {stream:#x} never got free"


def handed_back(since=None):
    """Waits (no polling) until CUDA's thread has run every host function launched so far (since the mark
    `since`) up to its push: an ordered call's host function then waits on its gate."""
    assert cuda_reclaim.wait_handed_back(TIMEOUT_MS / 1000, since=since), "CUDA's thread never got there"


def synchronize_sees_fn_and_later_work_waits():
    # After the stream's synchronize, fn has run; while fn runs, CUDA's thread has run nothing after it
    # (a later host function of the same stream, or of another stream); an unordered call launched after
    # it runs after it.
    fake = fake_driver()
    stream, other = 0xA100, 0xA101
    effects = []

    def fn(x):
        # CUDA's one thread is inside this call's host function: nothing queued after it, on this stream
        # or another, has run.
        effects.append(("fn", x, fake.fake_cuda_items_run()))
        return x * 2

    fake.fake_cuda_stream_hold(stream, 1)
    fake.fake_cuda_stream_hold(other, 1)
    ordered = cuda_reclaim.launch_host_func_ordered(stream, fn, 21)
    later = cuda_reclaim.launch_host_func(stream, effects.append, "later")
    elsewhere = cuda_reclaim.launch_host_func(other, effects.append, "elsewhere")
    before = fake.fake_cuda_items_run()
    fake.fake_cuda_stream_hold(stream, 0)
    synchronize(fake, stream)
    assert ordered.done() and ordered.result(timeout=0) == 42, ordered
    assert effects[0] == ("fn", 21, before), (effects, before)
    fake.fake_cuda_stream_hold(other, 0)
    synchronize(fake, other)
    later.result(timeout=60)
    elsewhere.result(timeout=60)
    assert effects.index("later") > 0, effects
    s = cuda_reclaim.stats()
    assert s["calls_run"] == 3 and s["calls_outstanding"] == 0, s


def other_streams_wait_behind_a_closed_gate():
    # While an ordered call waits for its drain, CUDA's one thread runs no host function of another stream.
    fake = fake_driver()
    stream, other = 0xA110, 0xA111
    release = threading.Event()
    seen = []

    def fn():
        release.wait(60)
        return "released"

    ordered = cuda_reclaim.launch_host_func_ordered(stream, fn)
    handed_back()  # its host function waits on the gate; the drain thread runs fn, which waits for us
    elsewhere = cuda_reclaim.launch_host_func(other, seen.append, "elsewhere")
    assert fake.fake_cuda_stream_synchronize(other, 0) == 1, "another stream's host function ran"
    assert not elsewhere.done() and not ordered.done()
    release.set()
    synchronize(fake, other)
    assert ordered.result(timeout=0) == "released"
    assert elsewhere.result(timeout=60) is None and seen == ["elsewhere"]


def many_ordered_calls_keep_stream_order():
    fake = fake_driver()
    streams = [0xA200, 0xA201, 0xA202]
    seen = {stream: [] for stream in streams}
    futures = []
    for i in range(60):
        stream = streams[i % 3]
        launch = cuda_reclaim.launch_host_func_ordered if i % 2 else cuda_reclaim.launch_host_func
        futures.append(launch(stream, seen[stream].append, i))
    for stream in streams:
        synchronize(fake, stream)
    for future in futures:
        future.result(timeout=60)
    for stream in streams:
        assert seen[stream] == sorted(seen[stream]) and len(seen[stream]) == 20, seen[stream]


def fn_raises():
    fake = fake_driver()
    stream = 0xA300

    def fails():
        raise LookupError("from the ordered call")

    future = cuda_reclaim.launch_host_func_ordered(stream, fails)
    synchronize(fake, stream)
    error = future.exception(timeout=0)
    assert isinstance(error, LookupError) and error.__traceback__ is not None, repr(error)
    assert cuda_reclaim.stats()["calls_run"] == 1


def cancelled_through_its_future():
    fake = fake_driver()
    stream = 0xA400
    ran = []
    fake.fake_cuda_stream_hold(stream, 1)
    future = cuda_reclaim.launch_host_func_ordered(stream, ran.append, "never")
    assert future.cancel()
    fake.fake_cuda_stream_hold(stream, 0)
    synchronize(fake, stream)
    assert not ran
    s = cuda_reclaim.stats()
    assert s["calls_cancelled"] == 1 and s["calls_run"] == 0 and s["calls_outstanding"] == 0, s


def refused_without_a_drain(mode):
    fake_driver(mode)
    fn = Callable()
    kept = weakref.ref(fn)
    try:
        cuda_reclaim.launch_host_func_ordered(0xA500, fn)
    except RuntimeError as error:
        assert str(error).startswith("launch_host_func_ordered(): the automatic drain is"), error
        assert f'"{mode}"' in str(error), error
    else:
        raise AssertionError("not refused")
    del fn
    assert kept() is None, "a refused launch kept a reference to fn"
    s = cuda_reclaim.stats()
    assert s["host_calls"] == 0 and s["calls_outstanding"] == 0, s


def an_event_loop_drain_runs_it():
    import asyncio

    import cuda_reclaim.asyncio as reclaim_asyncio

    fake = fake_driver("off")
    stream = 0xA600

    async def main():
        handle = reclaim_asyncio.install()
        future = cuda_reclaim.launch_host_func_ordered(stream, lambda: "ran")
        # Waiting for the stream on the loop's own thread would deadlock: another thread waits.
        await asyncio.get_running_loop().run_in_executor(None, synchronize, fake, stream)
        assert future.result(timeout=0) == "ran"
        handle.cancel()
        try:
            cuda_reclaim.launch_host_func_ordered(stream, print)
        except RuntimeError:
            return
        raise AssertionError("not refused once the loop's drain is cancelled")

    asyncio.run(main())


def launched_from_inside_a_drain():
    fake = fake_driver()
    first, second = 0xA700, 0xA701
    inner = []

    def outer():
        inner.append(cuda_reclaim.launch_host_func_ordered(second, lambda: "inner ran"))
        return "outer ran"

    future = cuda_reclaim.launch_host_func_ordered(first, outer)
    synchronize(fake, first)
    assert future.result(timeout=0) == "outer ran"
    synchronize(fake, second)
    assert inner[0].result(timeout=0) == "inner ran"


def close_opens_the_gate_of_a_call_a_drain_took():
    # One explicit drain takes a call that closes and an ordered call of another stream, whose host
    # function waits: the close cancels it, and CUDA's thread gets free.
    fake = fake_driver()
    closing, waiting = 0xA800, 0xA801
    ran = []
    fake.fake_cuda_stream_hold(closing, 1)
    fake.fake_cuda_stream_hold(waiting, 1)
    first = cuda_reclaim.launch_host_func(closing, cuda_reclaim.close)
    gated = cuda_reclaim.launch_host_func_ordered(waiting, ran.append, "never")
    cuda_reclaim.set_auto_drain("off")  # the call stays queued for the drain below
    fake.fake_cuda_stream_hold(closing, 0)
    synchronize(fake, closing)
    fake.fake_cuda_stream_hold(waiting, 0)
    handed_back()  # the ordered call's host function waits on its gate
    assert cuda_reclaim.pending() == 2
    assert fake.fake_cuda_stream_synchronize(waiting, 0) == 1, "the gate was open before any drain"
    cuda_reclaim.drain()
    synchronize(fake, waiting)
    assert first.done() and gated.cancelled() and not ran
    s = cuda_reclaim.stats()
    assert s["calls_cancelled"] == 1 and s["calls_outstanding"] == 0, s


def close_runs_a_waiting_call_and_later_pushes_do_not_wait():
    fake = fake_driver()
    queued, held = 0xA900, 0xA901
    ran = []
    fake.fake_cuda_stream_hold(queued, 1)
    fake.fake_cuda_stream_hold(held, 1)
    never = cuda_reclaim.launch_host_func_ordered(held, ran.append, "never")
    mark = cuda_reclaim.hand_back_mark()  # the wait below is for the queued call only
    waiting = cuda_reclaim.launch_host_func_ordered(queued, ran.append, "at close")
    cuda_reclaim.set_auto_drain("off")
    fake.fake_cuda_stream_hold(queued, 0)
    handed_back(mark)
    cuda_reclaim.close()  # its final drain runs the waiting call; the held one is cancelled
    synchronize(fake, queued)
    assert waiting.result(timeout=0) is None and ran == ["at close"], ran
    assert never.cancelled()
    fake.fake_cuda_stream_hold(held, 0)  # its host function finds the queue closed: it does not wait
    synchronize(fake, held)
    after = cuda_reclaim.launch_host_func_ordered(held, ran.append, "after close")
    assert after.cancelled()
    synchronize(fake, held)
    assert ran == ["at close"], ran
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0 and s["leaked_after_close"] == 1, s


def exit_with_a_call_waiting(how):
    # The process exits while CUDA's thread waits on a gate: the exit's close runs or cancels the call.
    fake = fake_driver()
    stream = 0xAA00
    fake.fake_cuda_stream_hold(stream, 1)
    future = cuda_reclaim.launch_host_func_ordered(stream, print, "ran at exit", flush=True)
    cuda_reclaim.set_auto_drain("off")
    fake.fake_cuda_stream_hold(stream, 0)
    handed_back()
    if how == "cancelled":
        future.cancel()
    print("exiting", flush=True)


def a_fork_child_cancels_the_parents_waiting_call():
    fake = fake_driver()
    stream = 0xAB00
    ran = []
    fake.fake_cuda_stream_hold(stream, 1)
    future = cuda_reclaim.launch_host_func_ordered(stream, ran.append, "parent")
    cuda_reclaim.set_auto_drain("off")
    fake.fake_cuda_stream_hold(stream, 0)
    handed_back()  # the parent's CUDA thread waits on the gate
    pid = os.fork()
    if pid == 0:
        s = cuda_reclaim.stats()
        ok = future.cancelled() and s["calls_outstanding"] == 0 and not ran
        cuda_reclaim.drain()  # the parent's queued call is not the child's to run
        ok = ok and not ran and cuda_reclaim.stats()["calls_run"] == 0
        os._exit(0 if ok else 7)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert fake.fake_cuda_stream_synchronize(stream, 0) == 1, "the child opened the parent's gate"
    cuda_reclaim.drain()
    synchronize(fake, stream)
    assert future.result(timeout=0) is None and ran == ["parent"]


def a_busy_main_thread_does_not_hold_the_gate():
    # The main thread runs bytecode that never blocks while another thread waits for the stream: the drain
    # thread (stepping aside as it does for every call) runs fn, and the gate opens without the main thread.
    fake = fake_driver()
    stream = 0xAE00
    ran = []
    fake.fake_cuda_stream_hold(stream, 1)
    future = cuda_reclaim.launch_host_func_ordered(stream, ran.append, "ran")
    synchronized = threading.Event()

    def waiter():
        synchronize(fake, stream)
        synchronized.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    fake.fake_cuda_stream_hold(stream, 0)
    while not synchronized.is_set():  # pure Python: nothing here releases the GIL on purpose
        pass
    thread.join()
    assert future.result(timeout=0) is None and ran == ["ran"], ran


def an_ordered_host_node_holds_each_firing_until_a_call_ran(how):
    # Two launches of an executable graph with one ordered host node: after the stream's synchronize, fn has
    # run (once per firing; an exception goes to sys.unraisablehook and opens the gate too), and while it ran
    # CUDA's one thread had run nothing queued after the firing.
    fake = fake_driver()
    stream = 0xB000
    seen = []
    raised = []
    sys.unraisablehook = lambda unraisable: raised.append(unraisable.exc_value)

    def fn(tag):
        seen.append((tag, fake.fake_cuda_items_run()))
        if how == "raises":
            raise LookupError("from the node")

    graph = fake.fake_cuda_graph_create()
    node = cuda_reclaim.add_host_node_ordered(graph, fn, "node")
    assert isinstance(node, cuda_reclaim.NodeHandle)
    executable = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_stream_hold(stream, 1)
    fake.fake_cuda_graph_launch(executable, stream)
    later = cuda_reclaim.launch_host_func(stream, seen.append, "later")
    fake.fake_cuda_graph_launch(executable, stream)
    before = fake.fake_cuda_items_run()
    fake.fake_cuda_stream_hold(stream, 0)
    synchronize(fake, stream)
    assert [tag for tag, _ in seen[:1]] == ["node"], seen
    assert seen[0][1] == before, (seen, before)  # nothing after the first firing had run while fn ran
    later.result(timeout=60)
    assert sum(1 for item in seen if isinstance(item, tuple)) == 2, seen
    assert seen.index("later") > 0, seen
    assert len(raised) == (2 if how == "raises" else 0), raised
    s = cuda_reclaim.stats()
    assert s["calls_run"] == 3 and s["host_node_calls"] == 2, s


def an_ordered_host_node_refused_without_a_drain(mode):
    fake = fake_driver(mode)
    graph = fake.fake_cuda_graph_create()
    try:
        cuda_reclaim.add_host_node_ordered(graph, print)
    except RuntimeError as error:
        assert str(error).startswith(f'add_host_node_ordered(): the automatic drain is "{mode}"'), error
    else:
        raise AssertionError("not refused")
    assert fake.fake_cuda_graph_host_node_count(graph) == 0


def an_ordered_host_node_after_close_does_not_wait():
    fake = fake_driver()
    stream = 0xB200
    seen = []
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node_ordered(graph, seen.append, "before close")
    executable = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_stream_hold(stream, 1)
    fake.fake_cuda_graph_launch(executable, stream)
    cuda_reclaim.close()
    fake.fake_cuda_stream_hold(stream, 0)  # the firing finds the queue closed: it waits for nothing
    synchronize(fake, stream)
    late = cuda_reclaim.add_host_node_ordered(graph, seen.append, "after close")  # not refused: closed
    assert isinstance(late, cuda_reclaim.NodeHandle)
    fake.fake_cuda_graph_launch(fake.fake_cuda_graph_instantiate(graph), stream)
    synchronize(fake, stream)
    assert seen == [], seen
    assert cuda_reclaim.stats()["leaked_after_close"] == 3


def a_close_with_a_firing_in_flight_frees_cudas_thread():
    # A drain runs a call that closes while an ordered node's firing is on its way: whether the firing
    # pushed before the close (the close cancels it or its final drain runs it) or after (leaked: it waits for
    # nothing), CUDA's thread gets free and the call runs at most once.
    fake = fake_driver()
    closing, firing = 0xB300, 0xB301
    seen = []
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node_ordered(graph, seen.append, "at most once")
    executable = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_stream_hold(closing, 1)
    mark = cuda_reclaim.hand_back_mark()
    first = cuda_reclaim.launch_host_func(closing, cuda_reclaim.close)
    cuda_reclaim.set_auto_drain("off")
    fake.fake_cuda_stream_hold(closing, 0)
    handed_back(mark)
    fake.fake_cuda_graph_launch(executable, firing)
    cuda_reclaim.drain()
    synchronize(fake, firing)
    assert first.done() and seen in ([], ["at most once"]), seen
    assert cuda_reclaim.stats()["calls_outstanding"] == 0


def a_waiting_firing_at_close_and_in_a_fork_child(ending):
    # An ordered node's firing waits on its gate ("close": the close's final drain runs its call; "fork": the
    # child leaves the parent's gate alone and exits, then the parent's drain runs the call).
    fake = fake_driver()
    stream = 0xB400
    seen = []
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node_ordered(graph, seen.append, "ran")
    executable = fake.fake_cuda_graph_instantiate(graph)
    cuda_reclaim.set_auto_drain("off")
    assert cuda_reclaim.pending() == 0
    fake.fake_cuda_graph_launch(executable, stream)
    assert cuda_reclaim.drain(max_items=0, timeout=60) == 0  # returns once the firing pushed: it waits now
    assert cuda_reclaim.pending() == 1
    if ending == "fork":
        pid = os.fork()
        if pid == 0:
            cuda_reclaim.drain()
            os._exit(0 if not seen and cuda_reclaim.stats()["calls_run"] == 0 else 7)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert fake.fake_cuda_stream_synchronize(stream, 0) == 1, "the gate opened without a call"
        cuda_reclaim.drain()
    else:
        cuda_reclaim.close()
    synchronize(fake, stream)
    assert seen == ["ran"], seen


class ExitsWhenReleased:
    """Released by the fork child's drain after the call that forked returned there: the child's end."""

    def __del__(self):
        os._exit(0 if cuda_reclaim.stats()["calls_outstanding"] == 0 else 7)


def a_fork_from_fn_leaves_the_gate_to_the_parent():
    # fn forks on the drain thread: in the child, fn returns into that drain, whose gate is the parent's
    # (forgotten there: the child's drain goes on and ends the child); in the parent, the gate opens when
    # fn returns.
    fake = fake_driver()
    stream = 0xAF00
    children = []

    def forks():
        pid = os.fork()
        if pid == 0:
            cuda_reclaim.defer_release(ExitsWhenReleased())
            return "child"
        children.append(pid)
        return "parent"

    future = cuda_reclaim.launch_host_func_ordered(stream, forks)
    synchronize(fake, stream)
    assert future.result(timeout=0) == "parent"
    _, status = os.waitpid(children[0], 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def a_prepared_call(ordered):
    # The pair of _prepare_host_call, launched through the driver by hand (as an integration does).
    fake = fake_driver()
    stream = 0xAC00
    ordered = ordered == "ordered"
    from cuda_reclaim import _ordered_calls

    host_fn, user_data, future = _ordered_calls.prepare_host_call("add_callback", stream, lambda x: x + 1, (1,), None,
                                                          ordered=ordered)
    assert cuda_reclaim.stats()["calls_outstanding"] == 1
    assert fake.fake_cuda_launch_host_func(stream, host_fn, user_data) == 0
    synchronize(fake, stream)
    if ordered:
        assert future.done()
    assert future.result(timeout=60) == 2
    assert cuda_reclaim.stats()["calls_outstanding"] == 0


def a_prepared_call_withdrawn():
    fake_driver()
    fn = Callable()
    kept = weakref.ref(fn)
    _, user_data, future = _reclaim._prepare_host_call(0xAD00, fn, (), None, True)
    del fn
    assert kept() is not None, "the prepared pair holds no reference to fn"
    _reclaim._withdraw_host_call(user_data)
    assert future.cancelled() and kept() is None, "a withdrawn pair kept a reference to fn"
    fn = Callable()
    kept = weakref.ref(fn)
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0 and s["calls_cancelled"] == 1, s
    try:
        _reclaim._withdraw_host_call(user_data)
    except ValueError as error:
        assert "_withdraw_host_call()" in str(error), error
    else:
        raise AssertionError("withdrawn twice")
    cuda_reclaim.set_auto_drain("off")
    from cuda_reclaim import _ordered_calls

    try:
        _ordered_calls.prepare_host_call("add_callback", 0xAD00, fn, (), None, ordered=True)
    except RuntimeError as error:
        assert str(error).startswith("add_callback(): the automatic drain is"), error
    else:
        raise AssertionError("an ordered pair prepared with no drain")
    cuda_reclaim.close()
    host_fn, user_data, future = _reclaim._prepare_host_call(0xAD00, fn, (), None, True)
    assert (host_fn, user_data) == (0, 0) and future.cancelled()
    del fn
    assert kept() is None, "a pair prepared after close kept a reference to fn"


def a_stale_or_unknown_pair_is_refused():
    # withdraw() finds a pair among the live ones and reads no memory that user data names: a pair withdrawn
    # already, one whose memory went to a new pair, one that ran, and numbers that name nothing are refused.
    fake = fake_driver()
    stream = 0xAE00
    mask = (1 << 48) - 1
    _, stale, _ = _reclaim._prepare_host_call(stream, print, (), None, False)
    _reclaim._withdraw_host_call(stale)
    for _ in range(100):  # the new pair takes the stale one's memory (the allocator reuses it first)
        host_fn, user_data, future = _reclaim._prepare_host_call(stream, lambda: "new", (), None, False)
        if user_data & mask == stale & mask:
            break
        _reclaim._withdraw_host_call(user_data)
    else:
        raise AssertionError("no new pair took the stale pair's memory")
    assert user_data != stale, "a new pair at the same address has another generation"
    for bogus in (stale, 1, 12345, 2**40, user_data + 8, user_data ^ (1 << 60)):
        try:
            _reclaim._withdraw_host_call(bogus)
        except ValueError as error:
            assert str(error).startswith("_withdraw_host_call(): user_data is not a live prepared pair's"), error
        else:
            raise AssertionError(f"{bogus:#x} withdrawn")
    assert not future.done(), "the new pair was cancelled through a stale one"
    assert fake.fake_cuda_launch_host_func(stream, host_fn, user_data) == 0
    synchronize(fake, stream)
    cuda_reclaim.drain()  # the private pair starts no drain thread
    assert future.result(timeout=0) == "new"
    try:
        _reclaim._withdraw_host_call(user_data)
    except ValueError as error:
        assert "not a live prepared pair's" in str(error), error
    else:
        raise AssertionError("a pair that ran was withdrawn")


def a_pair_cuda_fired_is_not_withdrawn():
    # Once CUDA ran the host function the call is the queue's: withdraw refuses, a second firing does
    # nothing, and a drain runs the call once.
    fake = fake_driver("off")
    stream = 0xAE10
    host_fn, user_data, future = _reclaim._prepare_host_call(stream, lambda: "ran", (), None, False)
    assert fake.fake_cuda_launch_host_func(stream, host_fn, user_data) == 0
    assert fake.fake_cuda_launch_host_func(stream, host_fn, user_data) == 0  # a user error: does nothing
    synchronize(fake, stream)
    try:
        _reclaim._withdraw_host_call(user_data)
    except ValueError as error:
        assert str(error).startswith("_withdraw_host_call(): CUDA ran the pair's host function"), error
    else:
        raise AssertionError("a fired pair was withdrawn")
    cuda_reclaim.drain()
    assert future.result(timeout=0) == "ran"
    s = cuda_reclaim.stats()
    assert s["host_calls"] == 1 and s["calls_run"] == 1 and s["calls_outstanding"] == 0, s


def _holds():
    s = cuda_reclaim.stats()
    return s["attached_to_cuda"], s["handed_back_by_cuda"], s["held_by_cuda"]


def a_prepared_pair_is_counted_until_handed_back(ordered):
    # A pair counts as attached and held from its preparation (with a hand-back ticket that
    # wait_handed_back waits for) until its host function's push or its withdrawal hands it back.
    fake = fake_driver()
    stream = 0xAE20
    ordered = ordered == "ordered"
    fake.fake_cuda_stream_hold(stream, 1)
    host_fn, user_data, future = _reclaim._prepare_host_call(stream, lambda: "ran", (), None, ordered)
    assert _holds() == (1, 0, 1), _holds()
    assert fake.fake_cuda_launch_host_func(stream, host_fn, user_data) == 0
    assert not cuda_reclaim.wait_handed_back(0), "the launched pair is not handed back yet"
    fake.fake_cuda_stream_hold(stream, 0)
    handed_back()
    cuda_reclaim.drain()  # the private pair starts no drain thread
    synchronize(fake, stream)
    assert future.result(timeout=0) == "ran"
    assert _holds() == (1, 1, 0), _holds()
    _, withdrawn, _ = _reclaim._prepare_host_call(stream, print, (), None, ordered)
    mark = cuda_reclaim.hand_back_mark()
    _, left, left_future = _reclaim._prepare_host_call(stream, print, (), None, ordered)
    assert _holds() == (3, 1, 2), _holds()
    _reclaim._withdraw_host_call(withdrawn)
    assert _holds() == (3, 2, 1), _holds()
    assert not cuda_reclaim.wait_handed_back(0, since=mark), "a pair neither launched nor withdrawn is held"
    assert cuda_reclaim.conserved()
    cuda_reclaim.close()
    assert left_future.cancelled()
    assert _holds() == (3, 2, 1), "a pair unfired at close stays held (CUDA may have it)"
    _reclaim._withdraw_host_call(left)  # handed back by its owner after close
    assert _holds() == (3, 3, 0), _holds()
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0 and s["calls_cancelled"] == 2, s


def refused_when_the_drain_thread_cannot_start():
    # The automatic drain is "thread" but its thread cannot start (as under a pids limit): the launch tries
    # to start it first, and refuses the call once it could not.
    import warnings

    from cuda_reclaim import _auto

    def refuse(self):
        raise RuntimeError("can't start new thread")

    _auto._DrainThread.start = refuse
    _auto._NativeDrainThread.start = refuse
    fake = fake_driver()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cuda_reclaim.launch_host_func_ordered(0xAE30, print)
        except RuntimeError as error:
            assert str(error).startswith('launch_host_func_ordered(): the automatic drain is "off"'), error
        else:
            raise AssertionError("an ordered call accepted with no drain thread")
    assert any("drain thread could not start" in str(warning.message) for warning in caught), caught
    s = cuda_reclaim.stats()
    assert s["host_calls"] == 0 and s["calls_outstanding"] == 0, s
    assert fake.fake_cuda_stream_synchronize(0xAE30, TIMEOUT_MS) == 0


def an_event_loop_that_does_not_run_is_no_drain():
    # An installed drain counts only while its loop runs: made and installed but not run, or closed, it is
    # refused; running, it is accepted.
    import asyncio

    import cuda_reclaim.asyncio as reclaim_asyncio

    fake = fake_driver("off")
    stream = 0xAE40

    def refused():
        try:
            cuda_reclaim.launch_host_func_ordered(stream, print)
        except RuntimeError as error:
            assert str(error).startswith('launch_host_func_ordered(): the automatic drain is "off"'), error
        else:
            raise AssertionError("accepted with no running event loop")

    loop = asyncio.new_event_loop()
    reclaim_asyncio.install(loop)
    refused()

    async def main():
        future = cuda_reclaim.launch_host_func_ordered(stream, lambda: "ran")
        await loop.run_in_executor(None, synchronize, fake, stream)
        return future.result(timeout=0)

    assert loop.run_until_complete(main()) == "ran"
    refused()
    loop.close()
    refused()


def a_fork_child_ends_the_future_of_a_call_another_thread_runs(ordered):
    # fork() while the drain thread is inside fn: in the child no thread will finish that call (it ran in
    # the parent), so its future ends with a RuntimeError that says so; the parent gets the result.
    fake = fake_driver()
    stream = 0xAE50
    launch = cuda_reclaim.launch_host_func_ordered if ordered == "ordered" else cuda_reclaim.launch_host_func
    started, release = threading.Event(), threading.Event()

    def fn():
        started.set()
        release.wait(60)
        return "done"

    future = launch(stream, fn)
    assert started.wait(60), "the drain never ran fn"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            error = future.exception(timeout=60)
            if isinstance(error, RuntimeError) and str(error).startswith("os.fork(): the host call was running"):
                code = 0
            else:
                print("child: the future ended with", repr(error), flush=True)
        finally:
            os._exit(code)
    release.set()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert future.result(timeout=60) == "done"
    synchronize(fake, stream)



def launched_from_a_finalizer_that_a_drain_runs():
    # A finalizer that the drain thread runs launches an ordered call: its host function waits on its gate
    # until a later drain runs it; the drain that ran the finalizer is not held up by it.
    fake = fake_driver()
    stream = 0xA7A0
    launched = []
    finalized = threading.Event()

    class Launches:
        def __del__(self):
            launched.append(cuda_reclaim.launch_host_func_ordered(stream, lambda: "ran"))
            finalized.set()

    cuda_reclaim.defer_release(Launches())
    assert finalized.wait(60), "no drain ran the finalizer"
    synchronize(fake, stream)
    assert launched[0].result(timeout=0) == "ran"
    s = cuda_reclaim.stats()
    assert s["calls_run"] == 1 and s["calls_outstanding"] == 0, s


def a_done_callback_launches_the_next_ordered_call():
    # Each call's done-callback (run by the drain after the outcome, before the gate opens) launches the next
    # ordered call on the same stream: its host function queues behind the closed gate and runs after it.
    fake = fake_driver()
    stream = 0xA7B0
    ran = []
    futures = []

    def launch(number):
        future = cuda_reclaim.launch_host_func_ordered(stream, ran.append, number)
        futures.append(future)
        if number < 4:
            future.add_done_callback(lambda _: launch(number + 1))

    launch(0)
    for number in range(5):
        synchronize(fake, stream)  # the next call is launched by the time this one's gate opened
        assert len(futures) >= number + 1, futures
    for future in futures:
        assert future.result(timeout=60) is None
    assert ran == [0, 1, 2, 3, 4], ran


def fn_raises_keyboard_interrupt(form):
    # A KeyboardInterrupt raised by fn is fn's outcome: the future's exception (a host node: sys.unraisablehook);
    # the gate opens, the drain goes on, and later calls run.
    fake = fake_driver()
    stream = 0xA7C0
    raised = []
    sys.unraisablehook = lambda unraisable: raised.append(unraisable.exc_value)

    def interrupted():
        raise KeyboardInterrupt("from the ordered call")

    if form == "call":
        future = cuda_reclaim.launch_host_func_ordered(stream, interrupted)
    else:
        graph = fake.fake_cuda_graph_create()
        cuda_reclaim.add_host_node_ordered(graph, interrupted)
        fake.fake_cuda_graph_launch(fake.fake_cuda_graph_instantiate(graph), stream)
    later = cuda_reclaim.launch_host_func_ordered(stream, lambda: "later ran")
    synchronize(fake, stream)
    if form == "call":
        assert isinstance(future.exception(timeout=0), KeyboardInterrupt), future
    else:
        assert len(raised) == 1 and isinstance(raised[0], KeyboardInterrupt), raised
    assert later.result(timeout=0) == "later ran"


if __name__ == "__main__":
    scenario.run(
        synchronize_sees_fn_and_later_work_waits,
        other_streams_wait_behind_a_closed_gate,
        many_ordered_calls_keep_stream_order,
        fn_raises,
        cancelled_through_its_future,
        refused_without_a_drain,
        an_event_loop_drain_runs_it,
        launched_from_inside_a_drain,
        close_opens_the_gate_of_a_call_a_drain_took,
        close_runs_a_waiting_call_and_later_pushes_do_not_wait,
        exit_with_a_call_waiting,
        a_fork_child_cancels_the_parents_waiting_call,
        a_busy_main_thread_does_not_hold_the_gate,
        an_ordered_host_node_holds_each_firing_until_a_call_ran,
        an_ordered_host_node_refused_without_a_drain,
        an_ordered_host_node_after_close_does_not_wait,
        a_close_with_a_firing_in_flight_frees_cudas_thread,
        a_waiting_firing_at_close_and_in_a_fork_child,
        a_fork_from_fn_leaves_the_gate_to_the_parent,
        a_prepared_call,
        a_prepared_call_withdrawn,
        a_stale_or_unknown_pair_is_refused,
        a_pair_cuda_fired_is_not_withdrawn,
        a_prepared_pair_is_counted_until_handed_back,
        refused_when_the_drain_thread_cannot_start,
        an_event_loop_that_does_not_run_is_no_drain,
        a_fork_child_ends_the_future_of_a_call_another_thread_runs,
        launched_from_a_finalizer_that_a_drain_runs,
        a_done_callback_launches_the_next_ordered_call,
        fn_raises_keyboard_interrupt,
    )
