"""How the scenario programs of children/ run: `python children/FILE.py NAME [ARG...]` calls the scenario
function NAME of FILE with the remaining arguments (as strings).

It also holds the one poll with a deadline of the suite, `wait_until` (and `holds_within` for a bool), for the
programs of children/ (`import scenario`) and for the test modules (`from children.scenario import ...`)."""

import contextlib
import sys
import time

POLL_PACE = 0.001  # seconds between two polls of a condition


def holds_within(predicate, timeout=30.0):
    """True once predicate() is true, False when `timeout` seconds pass first. Polls predicate() on the
    calling thread, every POLL_PACE seconds (a condition, never a duration): for a caller that goes on
    either way, or reports the failure its own way. Any thread may call it; it blocks, and allocates only
    what predicate() does."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_PACE)  # the pace of the suite's one poll with a deadline
    return True


def wait_until(predicate, what=None, timeout=30.0):
    """Returns once predicate() is true; raises AssertionError naming `what` (what the caller waits for; the
    predicate's name where it is None) when `timeout` seconds pass first. Blocks as holds_within does."""
    if not holds_within(predicate, timeout):
        if what is None:
            what = getattr(predicate, "__qualname__", repr(predicate))
        raise AssertionError(f"wait_until: timed out after {timeout} s waiting until {what}")


def frame_names(thread_ident):
    """The function names on the stack of the thread `thread_ident` now (empty once it has ended)."""
    names = set()
    frame = sys._current_frames().get(thread_ident)
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return names


def run(*scenarios):
    """Runs the scenario that sys.argv[1] names, among `scenarios` (functions), with sys.argv[2:]."""
    by_name = {scenario.__name__: scenario for scenario in scenarios}
    if len(sys.argv) < 2 or sys.argv[1] not in by_name:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(by_name)}}} [ARG...]")
    by_name[sys.argv[1]](*sys.argv[2:])


@contextlib.contextmanager
def auto_drain_off():
    """The automatic drain off inside the block, as it was after it. Hand an object over inside the block
    and drop your own references there, so that the queue holds the only one: a drain thread quick enough
    would otherwise release the queue's reference before the caller lets go of its own, and the finalizer
    would run on the caller's thread. Entering stops a running drain thread (the exit starts another)."""
    import cuda_reclaim

    previous = cuda_reclaim.set_auto_drain("off")
    try:
        yield
    finally:
        cuda_reclaim.set_auto_drain(previous)


async def recording_cancellation(awaitable, messages):
    """Await `awaitable`; the message of a CancelledError raised at the await goes to `messages` (a task's
    result() keeps it on 3.11 and later only)."""
    import asyncio  # here: most children never use asyncio

    try:
        return await awaitable
    except asyncio.CancelledError as error:
        messages.append(str(error))
        raise


def close_or_fork(ending):
    """``"close"``: cuda_reclaim.close(); ``"fork"``: a fork whose child exits at once, waited for; anything
    else: nothing (the process goes on to its exit)."""
    import os

    import cuda_reclaim

    if ending == "close":
        cuda_reclaim.close()
    elif ending == "fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
