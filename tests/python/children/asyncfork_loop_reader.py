"""Child of test_asyncio_streams.py: an event loop made before a fork (with a drain installed and an await
pending at the fork, or running on the forking thread), and a loop made in the fork child.
`python asyncfork_loop_reader.py NAME LOOP [MODE]`; LOOP is asyncio or uvloop, MODE the automatic drain's mode
(off: the loops' own readers are what drains; thread)."""

import asyncio
import os
import select
import signal
import sys
import threading
import time

import scenario

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fake_cuda  # noqa: E402

import cuda_reclaim  # noqa: E402
import cuda_reclaim.asyncio as reclaim_asyncio  # noqa: E402
from cuda_reclaim import _asyncio_drain  # noqa: E402

# Bounds every wait, so that a loop that is never woken fails the scenario instead of hanging it.
WAIT_LIMIT_SECONDS = 10
# How long the parent's loop idles while the child's wake-up fd is readable and not drained.
IDLE_SECONDS = 0.5
# The stream of the await pending at the fork: held until the parent releases it after the child's report.
HELD_STREAM = 0xA200


def new_loop(kind):
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class CountingSelects:
    """Wraps an asyncio loop's selector.select, counting the times the loop polled."""

    def __init__(self, selector):
        self._select = selector.select
        self.selects = 0

    def __call__(self, timeout=None):
        self.selects += 1
        return self._select(timeout)


class CountingDrains:
    """Stands in for the extension module inside cuda_reclaim's asyncio drain, counting the loop's reader drains."""

    def __init__(self, module):
        self._module = module
        self.drains = 0

    def drain(self, *args):
        self.drains += 1
        return self._module.drain(*args)

    def __getattr__(self, name):
        return getattr(self._module, name)


def run_host_functions_elsewhere(fake):
    """Runs the fake CUDA's runnable host functions on a thread of its own (not the loop's: only the queue's
    wake-up fd, or the drain thread, may wake the loop); returns the thread."""
    cuda = threading.Thread(target=fake.fake_cuda_run_host_functions)
    cuda.start()
    return cuda


async def await_a_call_woken_by_the_fd_only(fake, value):
    task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(0xA100, int, value))
    await asyncio.sleep(0.01)
    cuda = run_host_functions_elsewhere(fake)
    try:
        return await asyncio.wait_for(task, WAIT_LIMIT_SECONDS)
    finally:
        cuda.join()  # the process forks single-threaded


def refused(loop, function, make_awaitable):
    """What a new wait (or install: `make_awaitable` None) of `function` on the parent's `loop` gives in the
    child: "refused" for the RuntimeError that names `function`, else what it gave."""
    try:
        if make_awaitable is None:
            reclaim_asyncio.install(loop)
        else:
            loop.run_until_complete(asyncio.wait_for(make_awaitable(), WAIT_LIMIT_SECONDS))
    except RuntimeError as error:
        if str(error).startswith(f"{function}(): this event loop was made before os.fork()"):
            return "refused"
        return f"{function}: {error!r}"
    return f"{function}: not refused"


def in_the_child(fake, loop, handle, pending, messages, kind, let_the_parent_idle):
    """The fork child's checks; returns "ok" or what went wrong."""
    if not handle.cancelled:
        return "the drain handle of the loop made before the fork is not cancelled"
    # The pending await ends cancelled once the parent's loop runs again (here, for one step).
    loop.run_until_complete(asyncio.sleep(0))
    if not pending.cancelled():
        return f"the await pending at the fork did not end cancelled: {pending}"
    if not messages or not messages[0].startswith("stream_reached(): the event loop was made before os.fork()"):
        return f"the pending await's CancelledError does not say why: {messages}"
    for function, make_awaitable in (
        ("install", None),
        ("stream_reached", lambda: reclaim_asyncio.stream_reached(0xA100)),
        ("run_when_reached", lambda: reclaim_asyncio.run_when_reached(0xA100, int, 1)),
        ("handed_back", reclaim_asyncio.handed_back),
        ("flush", reclaim_asyncio.flush),
    ):
        outcome = refused(loop, function, make_awaitable)
        if outcome != "refused":
            return outcome
    # Work that nothing in the child drains yet: the child's wake-up fd stays readable meanwhile (without a
    # drain thread), which must neither wake nor spin the parent's loop.
    cuda_reclaim.defer_release(object())
    let_the_parent_idle()
    own = new_loop(kind)
    try:
        if cuda_reclaim.get_auto_drain() != "thread" and reclaim_asyncio.install(own).mode != "reader":
            return "install() on a loop made in the child does not drain from a reader"
        outcome = own.run_until_complete(await_a_call_woken_by_the_fd_only(fake, 2))
        if outcome != 2:
            return f"the loop made in the child resumed with {outcome!r}"
        if cuda_reclaim.stats()["pending"] != 0:
            return "the child's queue was not drained"
    finally:
        own.close()
    return "ok"


def a_loop_made_before_a_fork_is_left_to_the_parent(kind, mode):
    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain(mode)
    loop = new_loop(kind)
    handle = reclaim_asyncio.install(loop)
    assert handle.mode == "reader"
    assert loop.run_until_complete(await_a_call_woken_by_the_fd_only(fake, 1)) == 1
    fake.fake_cuda_stream_hold(HELD_STREAM, 1)
    messages = []
    pending = loop.create_task(scenario.recording_cancellation(reclaim_asyncio.stream_reached(HELD_STREAM), messages))
    loop.run_until_complete(asyncio.sleep(0))  # the task's first step: its call is launched
    assert not pending.done()

    to_parent_r, to_parent_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        idled = []

        def let_the_parent_idle():
            os.write(to_parent_w, b"p")
            os.read(to_child_r, 1)  # the parent has idled meanwhile
            idled.append(True)

        try:
            message = in_the_child(fake, loop, handle, pending, messages, kind, let_the_parent_idle)
        except BaseException as error:  # reported to the parent, which fails the scenario
            message = f"child failed: {error!r}"
        if not idled:
            os.write(to_parent_w, b"p")  # the parent waits for this byte first
        os.write(to_parent_w, f"child {message}".encode())
        os._exit(0)

    os.close(to_parent_w)
    os.close(to_child_r)
    counting = CountingDrains(_asyncio_drain._reclaim)
    _asyncio_drain._reclaim = counting
    selector = getattr(loop, "_selector", None)  # asyncio's; uvloop's poller is not reachable
    polls = None
    if selector is not None:
        polls = selector.select = CountingSelects(selector)
    try:
        ready, _, _ = select.select([to_parent_r], [], [], 3 * WAIT_LIMIT_SECONDS)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        assert ready and os.read(to_parent_r, 1) == b"p", "the fork child reported nothing"

        async def idle():
            await asyncio.sleep(IDLE_SECONDS)

        cpu_before = time.process_time()
        loop.run_until_complete(idle())
        idle_cpu = time.process_time() - cpu_before
        idle_drains = counting.drains
        idle_polls = polls.selects if polls is not None else 0
        try:
            os.write(to_child_w, b"go")
        except BrokenPipeError:  # the child failed before it idled, and has exited: its report follows
            pass
        child = os.read(to_parent_r, 1000).decode()
        _, status = os.waitpid(pid, 0)
        # The parent's loop goes on: its pending await resumes once its stream gets there, and a new one too.
        fake.fake_cuda_stream_hold(HELD_STREAM, 0)
        cuda = run_host_functions_elsewhere(fake)
        try:
            loop.run_until_complete(asyncio.wait_for(pending, WAIT_LIMIT_SECONDS))
        finally:
            cuda.join()
        parent = loop.run_until_complete(await_a_call_woken_by_the_fd_only(fake, 3))
    finally:
        _asyncio_drain._reclaim = counting._module
    handle.cancel()
    loop.close()
    # Nothing was queued in the parent while it idled: its reader had nothing to wake for, and its loop
    # polled about once for its sleep. A loop woken by the child's readable fd would drain, or poll, again
    # and again, and spend the idle time on the CPU (the only sign of it that uvloop shows).
    print(f"idle_drains={idle_drains} idle_polls={idle_polls}", flush=True)
    print(f"idle_cpu_share={idle_cpu / IDLE_SECONDS:.3f}", flush=True)
    print(child, flush=True)
    print(f"parent {parent}", flush=True)
    assert os.waitstatus_to_exitcode(status) == 0, status


def a_loop_running_on_the_forking_thread_is_the_parents_in_the_child(kind):
    """A fork made from a coroutine of a loop that cuda_reclaim never used: in the child, install() on that
    loop is refused, and install() on a loop made in the child drains from its reader."""
    loop = new_loop(kind)
    read_end, write_end = os.pipe()

    async def fork_from_a_coroutine():
        return os.fork()

    pid = loop.run_until_complete(fork_from_a_coroutine())
    if pid == 0:
        try:
            message = refused(loop, "install", None)
            if message == "refused":
                own = new_loop(kind)
                try:
                    mode = reclaim_asyncio.install(own).mode
                finally:
                    own.close()
                message = "ok" if mode == "reader" else f"install() on a loop made in the child: mode {mode!r}"
        except BaseException as error:  # reported to the parent, which fails the scenario
            message = f"child failed: {error!r}"
        os.write(write_end, f"child {message}".encode())
        os._exit(0)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], WAIT_LIMIT_SECONDS)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    child = os.read(read_end, 1000).decode() if ready else "child reported nothing"
    _, status = os.waitpid(pid, 0)
    loop.close()
    print(child, flush=True)
    assert os.waitstatus_to_exitcode(status) == 0, status


if __name__ == "__main__":
    scenario.run(
        a_loop_made_before_a_fork_is_left_to_the_parent,
        a_loop_running_on_the_forking_thread_is_the_parents_in_the_child,
    )
