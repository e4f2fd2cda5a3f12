"""cuda_reclaim.asyncio: an idle loop is woken by the fd alone and drains; timer fallback; uvloop."""

import asyncio
import weakref

import pytest

import cuda_reclaim
import cuda_reclaim.asyncio as reclaim_asyncio

_native_producers = pytest.importorskip("_native_producers")


class Payload:
    pass


async def _idle_until_released(refs, limit=30.0):
    # Polls every 50 ms: for tests where polling does not matter (timer fallback, cancel).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while any(r() is not None for r in refs) and loop.time() < deadline:
        await asyncio.sleep(0.05)


class Announced:
    """Resolves `done` from its finalizer once `count` instances were released (on the loop's thread,
    since the loop's reader is what drains)."""

    def __init__(self, state):
        self.state = state

    def __del__(self):
        state = self.state
        state["released"] += 1
        if state["released"] == state["count"] and not state["done"].done():
            state["done"].set_result(None)


def _run_idle_loop_scenario(loop_factory):
    async def main():
        handle = reclaim_asyncio.install()
        assert handle.mode == "reader"
        state = {"released": 0, "count": 500, "done": asyncio.get_running_loop().create_future()}
        objs = [Announced(state) for _ in range(500)]
        refs = [weakref.ref(o) for o in objs]
        _native_producers.hand_over_detached(objs, 2, 200)
        del objs
        # The loop is idle: nothing is scheduled but this wait's 30 s timeout, so only the wake-up
        # fd becoming readable can run the drain that resolves the future.
        await asyncio.wait_for(state["done"], 30)
        released = handle.drained
        handle.cancel()
        return refs, released

    loop = loop_factory()
    try:
        refs, released = loop.run_until_complete(main())
    finally:
        loop.close()
    assert all(r() is None for r in refs)
    assert released == 500, "the loop's reader, not another drain, released everything"


def test_idle_loop_is_woken_by_the_fd_and_drains(drained):
    _run_idle_loop_scenario(asyncio.new_event_loop)


def test_uvloop_is_woken_by_the_fd_and_drains(drained):
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed for this Python")
    _run_idle_loop_scenario(uvloop.new_event_loop)


class NoReaderLoop(asyncio.SelectorEventLoop):
    def add_reader(self, fd, callback, *args):
        raise NotImplementedError


def test_loop_without_add_reader_falls_back_to_a_timer(drained):
    async def main():
        handle = reclaim_asyncio.install(interval=0.01)
        assert handle.mode == "timer"
        obj = Payload()
        ref = weakref.ref(obj)
        cuda_reclaim.defer_release(obj)
        del obj
        await _idle_until_released([ref])
        handle.cancel()
        return ref, handle.drained

    loop = NoReaderLoop()
    try:
        ref, released = loop.run_until_complete(main())
    finally:
        loop.close()
    assert ref() is None and released == 1


def test_cancel_stops_draining_and_install_is_idempotent(drained):
    async def main():
        first = reclaim_asyncio.install()
        assert reclaim_asyncio.install() is first
        first.cancel()
        first.cancel()
        assert first.cancelled
        cuda_reclaim.defer_release(Payload())
        await asyncio.sleep(0.1)
        return first.drained

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == 0
    finally:
        loop.close()
    assert cuda_reclaim.pending() == 1


def test_install_with_max_items_zero_drains_nothing_and_never_spins(drained):
    async def main():
        handle = reclaim_asyncio.install(max_items=0)
        cuda_reclaim.defer_release(object())
        for _ in range(3):
            await asyncio.sleep(0)
        assert handle.mode is None and handle.drained == 0 and cuda_reclaim.pending() == 1
        assert not asyncio.get_running_loop().remove_reader(cuda_reclaim.fileno()), "no reader to spin"
        handle.cancel()

    asyncio.run(main())
    assert cuda_reclaim.drain() == 1


def test_install_needs_a_loop_and_valid_arguments(drained):
    with pytest.raises(RuntimeError, match="needs a loop"):
        reclaim_asyncio.install()
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match=r"install\(\): max_items must be >= 0"):
            reclaim_asyncio.install(loop, max_items=-1)
        with pytest.raises(ValueError, match=r"install\(\): interval must be > 0"):
            reclaim_asyncio.install(loop, interval=0)
        with pytest.raises(TypeError, match=r"install\(\): loop must be an asyncio event loop"):
            reclaim_asyncio.install("x")
    finally:
        loop.close()


# A fork child of a process whose event loop was used for handed_back(), with the automatic drain's thread or
# without it, on asyncio loops with each selector ("epoll", whose kernel poller the child shares with the parent;
# "poll" and "select" hold no kernel state) and on uvloop. Each scenario forks inside a child interpreter, which
# reports the fork child's outcome; waits there are bounded, and the interpreter's run too.
FORK_LOOPS = ["epoll", "poll", "select", "uvloop"]


def _needs(kind):
    if kind == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is not installed for this Python")


@pytest.mark.parametrize("at_fork", ["pending", "idle"])
@pytest.mark.parametrize("kind", FORK_LOOPS)
@pytest.mark.parametrize("mode", ["thread", "off"])
def test_in_a_fork_child_the_waits_on_a_loop_made_before_the_fork_end_and_a_loop_made_there_waits(mode, kind, at_fork):
    # The parent's wait pending at the fork ends cancelled in the child, a new one there raises RuntimeError, and
    # a loop made in the child waits for the child's attachments. The parent's poller, looked at while the
    # child's own loop waits, holds the parent's registration of the eventfd's number (while its own wait is
    # pending) and none of the child's; the parent's wait resumes with True.
    import fake_cuda

    _needs(kind)
    result = fake_cuda.run_script(
        "asyncfork_handed_back.py", "a_loop_made_before_a_fork_ends_its_waits_in_the_child", mode, kind, at_fork,
        timeout=90, PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines.get("child") == "ok", result.stdout + result.stderr
    assert lines.get("parent") == "True", result.stdout + result.stderr
    expected = "1" if at_fork == "pending" else "0"
    assert lines.get("parent_registrations") == (expected if kind == "epoll" else "n/a"), result.stdout + result.stderr


@pytest.mark.parametrize("kind", FORK_LOOPS)
@pytest.mark.parametrize("mode", ["thread", "off"])
def test_in_a_fork_child_handed_back_resumes_on_a_loop_made_in_the_child(mode, kind):
    import fake_cuda

    _needs(kind)
    result = fake_cuda.run_script(
        "asyncfork_handed_back.py", "a_loop_made_in_a_fork_child_resumes_its_waits", mode, kind,
        timeout=90, PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    assert "child ok" in result.stdout.splitlines(), result.stdout + result.stderr
