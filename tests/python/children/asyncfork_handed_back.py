"""Child of test_asyncio.py: `await cuda_reclaim.asyncio.handed_back()` in a fork child: on an event loop made
before the fork (a wait pending there at the fork, or none), and on one made in the child.
`python asyncfork_handed_back.py NAME MODE LOOP`; MODE is the automatic drain's mode (thread or off), LOOP the
kind of loop: an asyncio loop with the epoll, poll or select selector, or uvloop."""

import asyncio
import os
import select
import selectors
import signal
import sys
import threading

import scenario

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fake_cuda  # noqa: E402

import cuda_reclaim  # noqa: E402
import cuda_reclaim.asyncio as reclaim_asyncio  # noqa: E402
from cuda_reclaim import _reclaim  # noqa: E402

# Bounds every wait, so that a loop that is never woken fails the scenario instead of hanging it.
WAIT_LIMIT_SECONDS = 10


class P:
    """A payload to attach."""


def new_loop(kind):
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    selector = {"epoll": selectors.EpollSelector, "poll": selectors.PollSelector, "select": selectors.SelectSelector}
    return asyncio.SelectorEventLoop(selector[kind]())


def registrations_of(epoll_fd, fd):
    """How many registrations of descriptor number `fd` this process's epoll instance `epoll_fd` holds (one
    per open file behind that number that was registered)."""
    with open(f"/proc/self/fdinfo/{epoll_fd}") as info:
        return sum(1 for line in info if line.split()[:2] == ["tfd:", str(fd)])


def listener_reader_registered(loop):
    """Whether `loop` has a reader for the barrier's listener eventfd (uvloop's poller cannot be looked at: no)."""
    selector = getattr(loop, "_selector", None)
    return selector is not None and _reclaim._hand_back_listener_fd() in selector.get_map()


def hand_back_from_cuda_thread(graph):
    """Destroys `graph` on a thread of its own (as CUDA's thread would): only the barrier's eventfd (or a
    timer) can wake the loop."""
    cuda = threading.Thread(target=FAKE.fake_cuda_graph_destroy, args=(graph,))
    cuda.start()
    return cuda


async def childs_waits(loop, new, graph, while_waiting=None):
    """In the fork child, on a loop made there: the new wait for the child's `graph`, and one that the child's
    close() ends; `while_waiting()` is called while the new one waits. Returns a report ("ok" or what went
    wrong)."""
    await asyncio.sleep(0)  # the new wait's task has made its request
    if new.done():
        return "the new wait resumed while the child's graph was held"
    if while_waiting is not None:
        while_waiting()
    cuda = hand_back_from_cuda_thread(graph)
    try:
        reached = await asyncio.wait_for(new, WAIT_LIMIT_SECONDS)
    except asyncio.TimeoutError:
        return "the new wait never resumed after the child's graph was handed back"
    finally:
        cuda.join()
    if reached is not True:
        return f"the new wait resumed with {reached!r}"
    if await asyncio.wait_for(reclaim_asyncio.handed_back(), WAIT_LIMIT_SECONDS) is not True:
        return "a wait with nothing held did not resume with True"
    cuda_reclaim.keep_alive(FAKE.fake_cuda_graph_create(), P())  # held for good: only the close ends the wait
    closing = asyncio.ensure_future(reclaim_asyncio.handed_back())
    await asyncio.sleep(0)  # the task's first step: its wait is registered
    if closing.done():
        return "the wait for a graph held for good resumed"
    closer = threading.Thread(target=cuda_reclaim.close)
    closer.start()
    try:
        closed = await asyncio.wait_for(closing, WAIT_LIMIT_SECONDS)
    except asyncio.TimeoutError:
        return "the wait never resumed after close()"
    finally:
        closer.join()
    if closed is not False:
        return f"the wait ended by close() resumed with {closed!r}"
    if await reclaim_asyncio.handed_back() is not False:
        return "a wait after close() did not return False"
    if listener_reader_registered(loop):
        return "a reader for the barrier's eventfd is left registered"
    return "ok"


def the_parents_loop_in_the_child(loop, pending, messages):
    """In the fork child, on the loop made before the fork: the wait pending at the fork (None: none) ends
    cancelled once the loop runs again, and a new wait is refused. Returns "ok" or what went wrong."""
    if pending is not None:
        loop.run_until_complete(asyncio.sleep(0))  # one step of the parent's loop: the task resumes
        if not pending.cancelled():
            return f"the wait pending at the fork did not end cancelled: {pending}"
        if not messages or not messages[0].startswith("handed_back(): the event loop was made before os.fork()"):
            return f"the pending wait's CancelledError does not say why: {messages}"
    try:
        loop.run_until_complete(asyncio.wait_for(reclaim_asyncio.handed_back(), WAIT_LIMIT_SECONDS))
    except RuntimeError as error:
        if not str(error).startswith("handed_back(): this event loop was made before os.fork()"):
            return f"a new wait on the parent's loop: {error!r}"
    else:
        return "a new wait on the parent's loop was not refused"
    return "ok"


def report_from_child(read_end, pid):
    ready, _, _ = select.select([read_end], [], [], 3 * WAIT_LIMIT_SECONDS)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the fork child reported nothing")
    return os.read(read_end, 1000).decode()


def a_loop_made_before_a_fork_ends_its_waits_in_the_child(mode, kind, at_fork):
    """AT_FORK: pending (a wait of the parent's is pending at the fork) or idle (the loop waited before, and
    waits for nothing at the fork). The child waits on a loop of its own meanwhile."""
    cuda_reclaim.set_auto_drain(mode)
    loop = new_loop(kind)
    graph = FAKE.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    messages = []
    if at_fork == "pending":
        pending = loop.create_task(scenario.recording_cancellation(reclaim_asyncio.handed_back(), messages))
        # The task's first step: its wait is registered, its reader added. The loop stops with it pending
        # (asyncio forgets the running loop in a fork child: the fork is made between two runs).
        loop.run_until_complete(asyncio.sleep(0))
        assert not pending.done() and (kind == "uvloop" or listener_reader_registered(loop))
    else:
        assert loop.run_until_complete(reclaim_asyncio.handed_back(since=cuda_reclaim.hand_back_mark())) is True
        assert not listener_reader_registered(loop)
        pending = None
    to_parent_r, to_parent_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            message = the_parents_loop_in_the_child(loop, pending, messages)
            if message == "ok":
                own = new_loop(kind)
                childs = FAKE.fake_cuda_graph_create()
                cuda_reclaim.keep_alive(childs, P())
                new = own.create_task(reclaim_asyncio.handed_back())

                def let_the_parent_look():
                    os.write(to_parent_w, b"w")
                    os.read(to_child_r, 1)

                message = own.run_until_complete(childs_waits(own, new, childs, let_the_parent_look))
                own.close()
        except BaseException as error:  # reported to the parent, which fails the scenario
            message = f"child failed: {error!r}"
        os.write(to_parent_w, message.encode())
        os._exit(0)
    os.close(to_parent_w)
    os.close(to_child_r)
    waiting = report_from_child(to_parent_r, pid)
    shared = None
    if waiting == "w":
        # While the child's own loop waits on the child's eventfd, the poller of the loop made before the fork
        # (the parent's and the child's) holds the parent's registration of the number (if its wait is
        # pending) only: the child neither removed it nor added one.
        listener = _reclaim._hand_back_listener_fd()
        shared = registrations_of(loop._selector.fileno(), listener) if kind == "epoll" else "n/a"
        os.write(to_child_w, b"x")
        child = report_from_child(to_parent_r, pid)
    else:
        child = waiting
    _, status = os.waitpid(pid, 0)

    async def parents_wait():
        # The parent's wait goes on (or begins), woken by its own eventfd through its own reader.
        waiting = pending if pending is not None else asyncio.ensure_future(reclaim_asyncio.handed_back())
        await asyncio.sleep(0)  # the task's first step: its wait is registered
        assert not waiting.done()
        cuda = hand_back_from_cuda_thread(graph)
        try:
            return await asyncio.wait_for(waiting, WAIT_LIMIT_SECONDS)
        finally:
            cuda.join()

    parent = loop.run_until_complete(parents_wait())
    left = listener_reader_registered(loop)
    loop.close()
    print(f"child {child}", flush=True)
    print(f"parent_registrations {shared}", flush=True)
    print(f"parent {parent}", flush=True)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert not left, "the parent's reader for the barrier's eventfd is left registered"


def a_loop_made_in_a_fork_child_resumes_its_waits(mode, kind):
    cuda_reclaim.set_auto_drain(mode)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            loop = new_loop(kind)

            async def main():
                childs = FAKE.fake_cuda_graph_create()
                cuda_reclaim.keep_alive(childs, P())
                new = asyncio.ensure_future(reclaim_asyncio.handed_back())
                await asyncio.sleep(0)  # the task's first step: its wait is registered
                return await childs_waits(loop, new, childs)

            message = loop.run_until_complete(main())
            loop.close()
        except BaseException as error:  # reported to the parent, which fails the scenario
            message = f"child failed: {error!r}"
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    child = report_from_child(read_end, pid)
    _, status = os.waitpid(pid, 0)
    print(f"child {child}", flush=True)
    assert os.waitstatus_to_exitcode(status) == 0, status


FAKE = fake_cuda.load()

if __name__ == "__main__":
    scenario.run(
        a_loop_made_before_a_fork_ends_its_waits_in_the_child,
        a_loop_made_in_a_fork_child_resumes_its_waits,
    )
