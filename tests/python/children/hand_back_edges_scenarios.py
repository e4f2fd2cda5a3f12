"""Child of test_hand_back_waits_end.py, run against the fake driver (fake_cuda.run_script): one scenario per run,
named by the first argument. Each one pins an edge of the hand-back barrier: a wait that ends at exit, in a fork
child, inside a drain, or under concurrent attachments and hand-backs; a node handle that pickles; a cycle
through an attachment that the collector frees."""

import asyncio
import copy
import gc
import os
import pickle
import random
import sys
import threading
import weakref

from fake_driver_child import P, cuda_reclaim, fake, wait_until

import cuda_reclaim.asyncio
import scenario
from cuda_reclaim import _asyncio_barrier, _reclaim


def loops_listening():
    """How many event loops have an asyncio waiter registered with the barrier now."""
    with _asyncio_barrier._lock:
        return len(_asyncio_barrier._listening)


def an_asyncio_waiter_in_a_non_daemon_thread_does_not_hold_the_exit():
    """The exit hook shuts the barrier (the queue is still open then): an asyncio wait in a non-daemon thread
    ends with False, and the exit goes on."""
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())  # never handed back

    class Worker(threading.Thread):  # not a daemon: Python joins it at exit
        def run(self):
            print("asyncio waiter returned", asyncio.run(cuda_reclaim.asyncio.handed_back()), flush=True)

    Worker().start()
    wait_until(lambda: loops_listening() == 1)  # the waiter awaits: its loop listens on the barrier
    print("exiting", flush=True)


def an_asyncio_await_after_the_barrier_was_shut_ends_at_once():
    """An await that starts after the barrier was shut (the queue still open) ends at once."""
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    _reclaim._hand_back_shut()  # what threading's exit hook does (cuda_reclaim/_hand_back.py)
    assert cuda_reclaim.wait_handed_back() is False  # the thread form sees the shut

    async def main():
        return await asyncio.wait_for(cuda_reclaim.asyncio.handed_back(), 3)

    try:
        print("returned", asyncio.run(main()))
    except asyncio.TimeoutError:
        raise SystemExit("asyncio.handed_back() ignored the barrier's shut and waited until the timeout")


def an_executor_worker_waiting_does_not_hold_the_exit():
    """threading runs its exit hooks last-registered first; concurrent.futures registers its join of the workers
    when first imported, after the package here: the barrier's hook must still run first."""
    print("concurrent.futures.thread imported before:", "concurrent.futures.thread" in sys.modules, flush=True)
    from concurrent.futures import ThreadPoolExecutor  # the usual place: after the package was imported

    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())  # never handed back
    executor = ThreadPoolExecutor(1)
    future = executor.submit(cuda_reclaim.wait_handed_back)
    wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] >= 1)
    future.add_done_callback(lambda f: print("executor waiter returned", f.result(), flush=True))
    print("exiting", flush=True)


def a_fork_while_another_thread_holds_the_asyncio_lock_does_not_hang_the_child():
    """The child gets a fresh lock: another thread of the parent may have held it at the fork."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with _asyncio_barrier._lock:  # as a loop thread inside _complete_waiters() would, for a moment
            held.set()
            release.wait()

    threading.Thread(target=holder, daemon=True).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0)  # the child never gets here if the at-fork hook blocks first
    release.set()
    try:
        wait_until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, timeout=5)
    except AssertionError:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise SystemExit("the fork child hung in cuda_reclaim._asyncio_barrier._after_fork_in_child")
    print("ok")


def a_parents_ticket_ended_in_a_fork_child_leaves_its_barrier_counting():
    """A payload attached in the parent carries its ticket; if its hand-back runs in the child (the fake driver
    lets it), the child's emptied epoch counts stay at zero instead of wrapping."""
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    pid = os.fork()
    if pid == 0:
        fake.fake_cuda_graph_destroy(graph)  # the parent's attachment handed back here
        s = _reclaim._hand_back_stats()
        print("child stats after the parent's hand-back:", s, flush=True)
        other = fake.fake_cuda_graph_create()
        cuda_reclaim.keep_alive(other, P())
        waiter_ok = cuda_reclaim.wait_handed_back(2)
        print("child wait_handed_back with one of its own held:", waiter_ok, flush=True)
        fake.fake_cuda_graph_destroy(other)
        after = cuda_reclaim.wait_handed_back(2)
        print("child wait_handed_back after its own hand-back:", after, flush=True)
        ok = s["held"] == 0 and waiter_ok is False and after is True
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's barrier is broken"
    print("ok")


def a_finalizer_that_a_drain_runs_never_waits_for_itself():
    """What a finalizer waits for may be queued behind it in the same drain: inside a drain, waits only look."""
    g1, g2 = fake.fake_cuda_graph_create(), fake.fake_cuda_graph_create()
    results = []

    class Flushes:
        def __del__(self):
            # Inside the drain: what it waits for (g2) is destroyed by an item queued behind it, so it must not
            # block; it says the wait is not over.
            results.append((cuda_reclaim.wait_handed_back(None), cuda_reclaim.flush(None)))

    class GraphWrapper:  # e.g. a cuda.core Graph whose release is deferred to a drain
        def __del__(self):
            fake.fake_cuda_graph_destroy(g2)

    cuda_reclaim.keep_alive(g1, Flushes())
    attachment = cuda_reclaim.keep_alive(g2, P())
    fake.fake_cuda_graph_destroy(g1)  # queued first: the Attachment holding Flushes
    cuda_reclaim.defer_release(GraphWrapper())  # queued behind it
    cuda_reclaim.drain()
    assert results == [(False, 0)], results  # the wait looked; the outer drain had taken the wrapper already
    assert attachment.done() and cuda_reclaim.wait_handed_back(5) is True
    print("ok")


def a_node_handle_pickles_and_copies_as_its_int():
    graph = fake.fake_cuda_graph_create()
    node = cuda_reclaim.add_host_node(graph, print)
    again = pickle.loads(pickle.dumps(node))
    assert again == node and type(again) is cuda_reclaim.NodeHandle
    assert copy.copy(node) == node and copy.deepcopy(node) == node
    print("ok")


def a_cycle_through_an_attachment_is_collected_once_cuda_let_go():
    """`obj.attachment = keep_alive(graph, obj)` is a cycle: collected once CUDA let go and a drain released it."""
    graph = fake.fake_cuda_graph_create()

    class Buffer:
        pass

    buffer = Buffer()
    buffer.attachment = cuda_reclaim.keep_alive(graph, buffer)  # "keep me alive until CUDA is done; let me wait"
    dead = weakref.ref(buffer)
    del buffer
    fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.flush(5) == 1
    gc.collect()
    gc.collect()
    assert dead() is None, "the Buffer <-> Attachment cycle was not collected"
    print("ok")


def two_uvloop_loops_both_resume():
    """Two uvloop loops in two threads, both waiting: the one eventfd wakes both."""
    try:
        import uvloop
    except ImportError:
        print("no uvloop")
        return
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    results = []

    def run_loop():
        async def main():
            results.append(await asyncio.wait_for(cuda_reclaim.asyncio.handed_back(), 10))

        uvloop.run(main())

    threads = [threading.Thread(target=run_loop) for _ in range(2)]
    for t in threads:
        t.start()
    wait_until(lambda: loops_listening() == 2)  # both loops wait on the barrier
    fake.fake_cuda_graph_destroy(graph)
    for t in threads:
        t.join(20)
    assert results == [True, True], results
    print("ok")


def every_kind_of_waiter_against_concurrent_hand_backs_loses_no_wake_up(rounds):
    """Waiters of every kind against concurrent attachments and hand-backs, until each waiter ended `rounds`
    waits: none is lost."""
    rounds = int(rounds)
    stop = threading.Event()
    errors = []
    done = {"waiter": 0, "cell_waiter": 0, "loop_waiter": 0}
    counting = threading.Lock()

    def count(kind):
        with counting:
            done[kind] += 1

    def churn(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            graphs = [fake.fake_cuda_graph_create() for _ in range(rng.randint(1, 4))]
            attachments = [cuda_reclaim.keep_alive(g, P()) for g in graphs]
            rng.shuffle(graphs)
            for g in graphs:
                fake.fake_cuda_graph_destroy(g)
            for a in attachments:
                if not a.done():
                    errors.append("attachment not done after its graph was destroyed")

    def waiter():
        while not stop.is_set():
            if cuda_reclaim.wait_handed_back(10) is not True:
                errors.append("wait_handed_back timed out: lost wake-up")
            count("waiter")

    def cell_waiter():
        while not stop.is_set():
            g = fake.fake_cuda_graph_create()
            a = cuda_reclaim.keep_alive(g, P())
            t = threading.Thread(target=fake.fake_cuda_graph_destroy, args=(g,))
            t.start()
            if a.wait(10) is not True:
                errors.append("Attachment.wait timed out: lost wake-up")
            t.join()
            count("cell_waiter")

    def loop_waiter():
        async def main():
            while not stop.is_set():
                if await asyncio.wait_for(cuda_reclaim.asyncio.handed_back(), 10) is not True:
                    errors.append("asyncio.handed_back returned False")
                count("loop_waiter")

        asyncio.run(main())

    def drainer():
        while not stop.wait(0.001):  # the pace of the drains beside the waits
            cuda_reclaim.drain()

    threads = [
        threading.Thread(target=f, args=a)
        for f, a in [(churn, (1,)), (churn, (2,)), (waiter, ()), (waiter, ()), (cell_waiter, ()),
                     (loop_waiter, ()), (drainer, ())]
    ]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: errors or min(done.values()) >= rounds, timeout=60)
    finally:
        stop.set()  # the threads end, also when the rounds were not reached
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    assert not errors, errors[:5]
    s = _reclaim._hand_back_stats()
    assert s["held"] == 0, s
    print("ok", s)


if __name__ == "__main__":
    scenario.run(
        an_asyncio_waiter_in_a_non_daemon_thread_does_not_hold_the_exit,
        an_asyncio_await_after_the_barrier_was_shut_ends_at_once,
        an_executor_worker_waiting_does_not_hold_the_exit,
        a_fork_while_another_thread_holds_the_asyncio_lock_does_not_hang_the_child,
        a_parents_ticket_ended_in_a_fork_child_leaves_its_barrier_counting,
        a_finalizer_that_a_drain_runs_never_waits_for_itself,
        a_node_handle_pickles_and_copies_as_its_int,
        a_cycle_through_an_attachment_is_collected_once_cuda_let_go,
        two_uvloop_loops_both_resume,
        every_kind_of_waiter_against_concurrent_hand_backs_loses_no_wake_up,
    )
