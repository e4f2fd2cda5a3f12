"""Child of test_asyncio_streams.py: an event loop made before a fork, used on both sides of it.
`python asyncfork_loop_reader.py NAME LOOP MODE WHEN`; LOOP is asyncio or uvloop, MODE the automatic
drain's mode (off or gc: the loop's own reader is what drains), WHEN whether the loop's reader was
installed before the fork or first in the child."""

import asyncio
import os
import sys
import threading
import time

import scenario

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fake_cuda  # noqa: E402

import cuda_reclaim  # noqa: E402
import cuda_reclaim.asyncio as reclaim_asyncio  # noqa: E402

# Bounds every wait, so that a loop that is never woken fails the scenario instead of hanging it.
WAIT_LIMIT_SECONDS = 10
# How long the parent's loop idles while the child's wake-up fd is readable and not drained.
IDLE_SECONDS = 0.5


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
    """Stands in for the extension module inside cuda_reclaim.asyncio, counting the loop's reader drains."""

    def __init__(self, module):
        self._module = module
        self.drains = 0

    def drain(self, *args):
        self.drains += 1
        return self._module.drain(*args)

    def __getattr__(self, name):
        return getattr(self._module, name)


def a_loop_made_before_a_fork_is_woken_by_each_sides_work(kind, mode, when):
    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain(mode)
    loop = new_loop(kind)

    async def await_a_call_woken_by_the_fd_only(value):
        task = asyncio.ensure_future(reclaim_asyncio.run_when_reached(0xA100, int, value))
        await asyncio.sleep(0.01)
        cuda = threading.Thread(target=fake.fake_cuda_run_host_functions)
        cuda.start()  # not on the loop's thread: only the queue's wake-up fd may wake the loop
        try:
            return await asyncio.wait_for(task, WAIT_LIMIT_SECONDS)
        finally:
            cuda.join()  # the process forks single-threaded

    if when == "before":
        # The parent installs the loop's reader (the automatic drain is not a thread) and uses it once.
        assert loop.run_until_complete(await_a_call_woken_by_the_fd_only(1)) == 1
        assert reclaim_asyncio._installed[loop].mode == "reader"
    else:
        assert loop.run_until_complete(asyncio.sleep(0)) is None
        assert loop not in reclaim_asyncio._installed

    to_parent_r, to_parent_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(to_parent_r)
            os.close(to_child_w)
            if when == "after":
                reclaim_asyncio.install(loop)
                loop.run_until_complete(asyncio.sleep(0))  # libuv registers its readers as its loop runs
            # Work the child's loop does not drain yet: the child's wake-up fd stays readable meanwhile,
            # which must neither wake nor spin the parent's loop.
            cuda_reclaim.defer_release(object())
            os.write(to_parent_w, b"p")
            os.read(to_child_r, 1)  # the parent has idled meanwhile
            outcome = loop.run_until_complete(
                asyncio.wait_for(await_a_call_woken_by_the_fd_only(2), WAIT_LIMIT_SECONDS)
            )
            message = f"child {outcome}"
        except BaseException as error:  # reported to the parent, which fails the scenario
            message = f"child failed: {error!r}"
        os.write(to_parent_w, message.encode())
        os._exit(0)

    os.close(to_parent_w)
    os.close(to_child_r)
    counting = CountingDrains(reclaim_asyncio._reclaim)
    reclaim_asyncio._reclaim = counting
    selector = getattr(loop, "_selector", None)  # asyncio's; uvloop's poller is not reachable
    polls = None
    if selector is not None:
        polls = selector.select = CountingSelects(selector)
    try:
        assert os.read(to_parent_r, 1) == b"p"

        async def idle():
            await asyncio.sleep(IDLE_SECONDS)

        cpu_before = time.process_time()
        loop.run_until_complete(idle())
        idle_cpu = time.process_time() - cpu_before
        idle_drains = counting.drains
        idle_polls = polls.selects if polls is not None else 0
        os.write(to_child_w, b"go")
        child = os.read(to_parent_r, 1000).decode()
        _, status = os.waitpid(pid, 0)
        # The parent's loop still serves its own awaits through the same reader.
        parent = loop.run_until_complete(await_a_call_woken_by_the_fd_only(3))
    finally:
        reclaim_asyncio._reclaim = counting._module
    loop.close()
    # Nothing was queued in the parent while it idled: its reader had nothing to wake for, and its loop
    # polled about once for its sleep. A loop woken by the child's readable fd would drain, or poll, again
    # and again, and spend the idle time on the CPU (the only sign of it that uvloop shows).
    print(f"idle_drains={idle_drains} idle_polls={idle_polls}", flush=True)
    print(f"idle_cpu_share={idle_cpu / IDLE_SECONDS:.3f}", flush=True)
    print(child, flush=True)
    print(f"parent {parent}", flush=True)
    assert os.WEXITSTATUS(status) == 0, status


if __name__ == "__main__":
    scenario.run(a_loop_made_before_a_fork_is_woken_by_each_sides_work)
