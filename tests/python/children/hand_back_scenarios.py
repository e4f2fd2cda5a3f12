"""Child of test_hand_back.py: one scenario per run, named by the first argument, against the fake libcuda
(tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names."""

import asyncio
import atexit
import ctypes
import os
import signal
import threading
import weakref

import pytest

from cuda_reclaim import _reclaim
from fake_driver_child import P, cuda_reclaim, fake, wait_until

import scenario


class Waiter(threading.Thread):
    """A daemon thread that calls `wait` and keeps what it returned in `result`; `started` once it runs."""

    def __init__(self, wait):
        super().__init__(daemon=True)
        self.wait, self.result, self.started = wait, None, threading.Event()

    def run(self):
        self.started.set()
        self.result = self.wait()


def sleeping(count=1):
    """Whether `count` waiters are inside their futex waits (what matters is only that they have not returned)."""
    return _reclaim._hand_back_stats()["sleepers"] >= count


def nothing_held_means_reached_at_once_and_timeouts_are_checked():
    assert cuda_reclaim.wait_handed_back() is True
    assert cuda_reclaim.wait_handed_back(0) is True
    assert cuda_reclaim.flush() == 0
    for bad, error in ((-1, ValueError), (float("nan"), ValueError), (True, TypeError), ("1", TypeError)):
        with pytest.raises(error, match=r"^wait_handed_back\(\)"):
            cuda_reclaim.wait_handed_back(bad)
        with pytest.raises(error, match=r"^flush\(\)"):
            cuda_reclaim.flush(bad)
    print("ok")


def waits_for_what_was_attached_before_in_any_order_and_not_for_later_attachments():
    first, second, later = (fake.fake_cuda_graph_create() for _ in range(3))
    a, b = P(), P()
    dead_a, dead_b = weakref.ref(a), weakref.ref(b)
    cuda_reclaim.keep_alive(first, a)
    cuda_reclaim.keep_alive(second, b)
    del a, b
    assert cuda_reclaim.stats()["held_by_cuda"] == 2
    waiter = Waiter(cuda_reclaim.wait_handed_back)
    waiter.start()
    waiter.started.wait()
    wait_until(sleeping)
    cuda_reclaim.keep_alive(later, P())  # attached during the wait: must not delay it
    fake.fake_cuda_graph_destroy(second)  # handed back out of order
    waiter.join(0.2)
    assert waiter.is_alive(), "one attachment from before the wait is still held"
    fake.fake_cuda_graph_destroy(first)
    waiter.join(30)
    assert not waiter.is_alive() and waiter.result is True, waiter.result
    assert cuda_reclaim.stats()["held_by_cuda"] == 1, "the later attachment is still held"
    assert dead_a() is not None, "handed back, not yet released: that is the drain's job"
    assert cuda_reclaim.flush(timeout=0.05) == 2, "flush waits (for the later one: it times out) then drains"
    assert dead_a() is None and dead_b() is None
    fake.fake_cuda_graph_destroy(later)
    assert cuda_reclaim.flush() == 1
    assert _reclaim._hand_back_stats()["held"] == 0
    print("ok")


def a_wait_in_progress_does_not_make_a_later_wait_cover_later_attachments():
    first, second, later = (fake.fake_cuda_graph_create() for _ in range(3))
    cuda_reclaim.keep_alive(first, P())
    early = Waiter(cuda_reclaim.wait_handed_back)  # waits for `first`
    early.start()
    wait_until(sleeping)
    cuda_reclaim.keep_alive(second, P())
    late = Waiter(cuda_reclaim.wait_handed_back)  # waits for `first` and `second`
    late.start()
    wait_until(lambda: sleeping(2))
    cuda_reclaim.keep_alive(later, P())  # after both waits began: delays neither
    fake.fake_cuda_graph_destroy(second)
    fake.fake_cuda_graph_destroy(first)
    early.join(30)
    late.join(30)
    assert early.result is True and late.result is True, (early.result, late.result)
    assert cuda_reclaim.stats()["held_by_cuda"] == 1
    fake.fake_cuda_graph_destroy(later)
    print("ok")


def since_a_mark_waits_only_for_what_was_attached_after_it():
    session = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(session, P())  # held for good, as a session fixture's graph
    mark = cuda_reclaim.hand_back_mark()
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    assert cuda_reclaim.wait_handed_back(0.05, since=mark) is False
    fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.wait_handed_back(since=mark) is True, "the session's graph is not waited for"
    assert cuda_reclaim.flush(since=mark) == 1
    assert cuda_reclaim.wait_handed_back(0.05) is False, "without a mark: everything, the session's too"
    # Marks only grow; a mark from the future or of the wrong type is refused, naming the function.
    assert cuda_reclaim.hand_back_mark() > mark
    with pytest.raises(ValueError, match=r"^wait_handed_back\(\): since must be a mark"):
        cuda_reclaim.wait_handed_back(0, since=10**12)
    with pytest.raises(TypeError, match=r"^flush\(\): since must be a mark"):
        cuda_reclaim.flush(0, since="x")
    with pytest.raises(ValueError, match=r"^flush\(\): since must be a mark"):
        cuda_reclaim.flush(0, since=-1)
    with pytest.raises(ValueError, match=r"^flush\(\): since must be a mark"):
        asyncio.run(cuda_reclaim.asyncio.flush(since=10**12))
    with pytest.raises(TypeError, match=r"^handed_back\(\): since must be a mark"):
        asyncio.run(cuda_reclaim.asyncio.handed_back(since=1.5))
    with pytest.raises(TypeError):
        cuda_reclaim.wait_handed_back(0, mark)  # keyword only
    print("ok")


def nine_epochs_held_at_once_each_keep_a_slot_and_every_wait_still_ends():
    graphs = []
    for _ in range(9):
        graph = fake.fake_cuda_graph_create()
        cuda_reclaim.keep_alive(graph, P())
        graphs.append((graph, cuda_reclaim.hand_back_mark()))
    assert _reclaim._hand_back_stats()["shared_counts"] == 0, _reclaim._hand_back_stats()
    assert cuda_reclaim.wait_handed_back(0.01, since=graphs[4][1]) is False, "graphs 5.. came after it"
    assert cuda_reclaim.wait_handed_back(0.01, since=graphs[8][1]) is True, "nothing came after the last mark"
    assert cuda_reclaim.wait_handed_back(0.01) is False
    for graph, _ in graphs[5:]:
        fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.wait_handed_back(5, since=graphs[4][1]) is True, "graphs 0..4 came before the mark"
    for graph, _ in graphs[:5]:
        fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.wait_handed_back(5) is True
    assert cuda_reclaim.flush() == 9 and _reclaim._hand_back_stats()["held"] == 0
    print("ok")


def host_calls_and_host_nodes_are_waited_for_and_flush_runs_them():
    stream = 0x7300
    fake.fake_cuda_stream_hold(stream, 1)
    future = cuda_reclaim.launch_host_func(stream, lambda: "ran")
    until = cuda_reclaim.keep_alive_until(stream, P())
    graph = fake.fake_cuda_graph_create()
    node = cuda_reclaim.add_host_node(graph, print)
    assert not node.done() and not until.done()
    assert cuda_reclaim.wait_handed_back(0.05) is False
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()
    assert until.done() and until.wait(0) is True
    assert cuda_reclaim.wait_handed_back(0.05) is False, "the node's graph still holds its function"
    assert node.wait(0.05) is False
    fake.fake_cuda_graph_destroy(graph)
    assert node.wait() is True and node.done()
    assert cuda_reclaim.wait_handed_back() is True
    assert not future.done(), "handed back is not run"
    assert cuda_reclaim.flush() >= 2
    assert future.result(timeout=0) == "ran"
    with pytest.raises(ValueError, match=r"^NodeHandle.wait\(\): this handle was made from an int"):
        cuda_reclaim.NodeHandle(5).wait()
    with pytest.raises(AttributeError):
        node.x = 1
    print("ok")


def an_attachment_handle_waits_for_its_own_hand_back_alone():
    graph_a, graph_b = fake.fake_cuda_graph_create(), fake.fake_cuda_graph_create()
    a = cuda_reclaim.keep_alive(graph_a, P())
    b = cuda_reclaim.keep_alive(graph_b, P(), P())
    assert isinstance(a, cuda_reclaim.Attachment) and "held by CUDA" in repr(a), repr(a)
    waiter = Waiter(a.wait)
    waiter.start()
    waiter.started.wait()
    fake.fake_cuda_graph_destroy(graph_b)
    assert b.done() and b.wait(0) is True
    waiter.join(0.2)
    assert waiter.is_alive() and not a.done()
    fake.fake_cuda_graph_destroy(graph_a)
    waiter.join(30)
    assert waiter.result is True and a.done() and "handed back" in repr(a)
    assert cuda_reclaim.pending() == 2, "both queued once done() says so"
    with pytest.raises(TypeError):
        cuda_reclaim.Attachment()
    with pytest.raises(ValueError, match=r"^Attachment.wait\(\)"):
        a.wait(-1)
    print("ok")


def close_while_waiting_and_after_returns_false_at_once():
    graph = fake.fake_cuda_graph_create()
    attachment = cuda_reclaim.keep_alive(graph, P())
    waiters = [Waiter(cuda_reclaim.wait_handed_back), Waiter(attachment.wait)]
    for waiter in waiters:
        waiter.start()
        waiter.started.wait()
    wait_until(sleeping)
    cuda_reclaim.close()
    for waiter in waiters:
        waiter.join(30)
        assert not waiter.is_alive() and waiter.result is False, waiter.result
    assert cuda_reclaim.wait_handed_back() is False and attachment.wait() is False
    assert cuda_reclaim.flush() == 0
    fake.fake_cuda_graph_destroy(graph)  # after the close: leaked on purpose, and the handle says so
    assert attachment.done()
    print("ok")


def exit_while_a_thread_waits_does_not_hang():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    waiter = Waiter(cuda_reclaim.wait_handed_back)
    waiter.start()
    waiter.started.wait()
    wait_until(sleeping)
    # A thread that is not a daemon: Python joins it before the atexit hooks run, so the barrier is shut
    # first (threading's own exit hook) and the waiter returns False instead of holding the exit for ever.
    class Reporter(threading.Thread):
        def run(self):
            print("non-daemon waiter returned", cuda_reclaim.wait_handed_back(), flush=True)
    reporter = Reporter()
    reporter.start()
    atexit.register(lambda: print("daemon waiter returned", waiter.join(30) or waiter.result, flush=True))
    print("exiting", flush=True)


def a_finalizer_that_a_drain_runs_may_wait_and_flush():
    graph = fake.fake_cuda_graph_create()
    results = []
    class Flushes:
        def __del__(self):
            results.append((cuda_reclaim.wait_handed_back(5), cuda_reclaim.flush(5)))
    cuda_reclaim.keep_alive(graph, Flushes())
    fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.drain() == 1
    assert results == [(True, 0)], results
    print("ok")


def a_waiting_thread_sleeps_without_polling():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    tid = []
    def wait():
        tid.append(threading.get_native_id())
        return cuda_reclaim.wait_handed_back()
    waiter = Waiter(wait)
    waiter.start()
    waiter.started.wait()
    wait_until(sleeping)
    def status(field):
        with open(f"/proc/self/task/{tid[0]}/status") as lines:
            return next(line for line in lines if line.startswith(field + ":")).split()[1]
    wait_until(lambda: status("State") == "S")  # asleep in its futex wait (its GIL released before it)
    before = int(status("voluntary_ctxt_switches"))
    waiter.join(0.2)  # a window in which a polling thread would switch out about 200 times
    assert waiter.is_alive(), "nothing was handed back: the wait goes on"
    grown = int(status("voluntary_ctxt_switches")) - before
    assert grown <= 2, f"the waiting thread switched out {grown} times while nothing was handed back"
    fake.fake_cuda_graph_destroy(graph)
    waiter.join(30)
    assert waiter.result is True
    print("ok")


def a_signal_interrupts_the_wait_with_its_exception():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    def interrupt_once_asleep():
        wait_until(sleeping)
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: to the process
    threading.Thread(target=interrupt_once_asleep).start()
    try:
        cuda_reclaim.wait_handed_back()
    except KeyboardInterrupt:
        print("interrupted")
    else:
        raise AssertionError("not interrupted")
    fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.wait_handed_back() is True, "the barrier still works after an interrupted wait"


def a_fork_child_does_not_wait_for_the_parents_attachments():
    graph = fake.fake_cuda_graph_create()
    attachment = cuda_reclaim.keep_alive(graph, P())
    pid = os.fork()
    if pid == 0:
        ok = cuda_reclaim.wait_handed_back(5) is True and cuda_reclaim.flush(5) == 0
        # The parent's attachment is handed back in the parent only: its wait ends at once here.
        ok = ok and attachment.wait() is False and not attachment.done()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cuda_reclaim.wait_handed_back(0.05) is False, "the parent still waits for its own"
    fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.wait_handed_back() is True
    print("ok")


def asyncio_handed_back_wakes_through_the_loop_reader():
    async def main():
        graph = fake.fake_cuda_graph_create()
        cuda_reclaim.keep_alive(graph, P())
        writes = _reclaim._hand_back_stats()["listener_writes"]
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(cuda_reclaim.asyncio.handed_back())
        await asyncio.sleep(0.05)
        assert not task.done()
        threading.Thread(target=fake.fake_cuda_graph_destroy, args=(graph,)).start()  # CUDA's thread
        assert await asyncio.wait_for(task, 30) is True
        after = _reclaim._hand_back_stats()
        assert after["listener_writes"] == writes + 1, ("one eventfd write woke the loop", writes, after)
        assert await cuda_reclaim.asyncio.flush() == 1
        # since=: a graph held for good before the mark is not waited for.
        session, mine = fake.fake_cuda_graph_create(), fake.fake_cuda_graph_create()
        cuda_reclaim.keep_alive(session, P())
        mark = cuda_reclaim.hand_back_mark()
        cuda_reclaim.keep_alive(mine, P())
        task = asyncio.ensure_future(cuda_reclaim.asyncio.handed_back(since=mark))
        await asyncio.sleep(0.01)
        assert not task.done()
        threading.Thread(target=fake.fake_cuda_graph_destroy, args=(mine,)).start()
        assert await asyncio.wait_for(task, 30) is True
        assert await cuda_reclaim.asyncio.flush(since=mark) == 1
        # Cancelled awaits leave nothing registered; a close ends the rest with False.
        other = fake.fake_cuda_graph_create()
        cuda_reclaim.keep_alive(other, P())
        cancelled = asyncio.ensure_future(cuda_reclaim.asyncio.handed_back())
        await asyncio.sleep(0.01)
        cancelled.cancel()
        pending = asyncio.ensure_future(cuda_reclaim.asyncio.handed_back())
        await asyncio.sleep(0.01)
        loop.call_soon(cuda_reclaim.close)
        assert await asyncio.wait_for(pending, 30) is False
        assert await cuda_reclaim.asyncio.handed_back() is False
    asyncio.run(main())
    print("ok")


def the_c_api_counts_other_extensions_attachments():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = get(_reclaim._C_API, b"cuda_reclaim._reclaim._C_API")
    pointers = (ctypes.c_void_p * 12).from_address(table + 8)
    begin = ctypes.CFUNCTYPE(ctypes.c_int)(pointers[9])
    end = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32))(pointers[10])
    wait = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_double)(pointers[11])
    ticket = begin()
    assert ticket in (0, 1), ticket
    assert wait(0.05) == 0 and cuda_reclaim.wait_handed_back(0.05) is False
    done = ctypes.c_uint32(0)
    end(ticket, ctypes.byref(done))
    assert done.value == 1
    assert wait(-1.0) == 1 and cuda_reclaim.wait_handed_back() is True
    print("ok")


def the_c_api_wait_after_close_is_zero_with_nothing_held():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = get(_reclaim._C_API, b"cuda_reclaim._reclaim._C_API")
    pointers = (ctypes.c_void_p * 12).from_address(table + 8)
    wait = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_double)(pointers[11])
    assert _reclaim._hand_back_stats()["held"] == 0
    assert wait(0.0) == 1 and cuda_reclaim.wait_handed_back(0) is True, "open, nothing held"
    cuda_reclaim.close()
    assert _reclaim._hand_back_stats()["held"] == 0
    assert cuda_reclaim.wait_handed_back(0) is False
    assert wait(0.0) == 0, "closed: 0, though nothing is held"
    assert wait(-1.0) == 0, "closed, no limit: 0 at once"
    print("ok")



if __name__ == "__main__":
    scenario.run(
        nothing_held_means_reached_at_once_and_timeouts_are_checked,
        waits_for_what_was_attached_before_in_any_order_and_not_for_later_attachments,
        a_wait_in_progress_does_not_make_a_later_wait_cover_later_attachments,
        since_a_mark_waits_only_for_what_was_attached_after_it,
        nine_epochs_held_at_once_each_keep_a_slot_and_every_wait_still_ends,
        host_calls_and_host_nodes_are_waited_for_and_flush_runs_them,
        an_attachment_handle_waits_for_its_own_hand_back_alone,
        close_while_waiting_and_after_returns_false_at_once,
        exit_while_a_thread_waits_does_not_hang,
        a_finalizer_that_a_drain_runs_may_wait_and_flush,
        a_waiting_thread_sleeps_without_polling,
        a_signal_interrupts_the_wait_with_its_exception,
        a_fork_child_does_not_wait_for_the_parents_attachments,
        asyncio_handed_back_wakes_through_the_loop_reader,
        the_c_api_counts_other_extensions_attachments,
        the_c_api_wait_after_close_is_zero_with_nothing_held,
    )
