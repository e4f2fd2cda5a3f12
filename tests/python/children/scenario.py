"""How the scenario programs of children/ run: `python children/FILE.py NAME [ARG...]` calls the scenario
function NAME of FILE with the remaining arguments (as strings)."""

import contextlib
import sys


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
