"""cuda_reclaim.asyncio's hand-back barrier: ``await handed_back()`` and ``await flush()``.

A waiter takes the epochs to wait for from the queue's barrier (as :func:`cuda_reclaim.wait_handed_back`
does) and an asyncio future. Each loop with waiters has a reader on the barrier's eventfd, which the
hand-back that may end a wait writes while listeners are registered: no timer, no thread. The eventfd is one per
process, so the loop whose reader empties it tells the other loops with waiters to look too.

Fork: the child's barrier starts afresh, and every loop with waiters was made before the fork. Their waits end
cancelled in the child, and the child keeps no listener for them; their loops are left as they are (their kernel
poller is the parent's too), and a reader of theirs that fires in the child takes itself off the loop. A new wait
on such a loop raises RuntimeError (_asyncio_drain.check_loop).
"""

import asyncio as _asyncio
import os as _os
import threading as _threading
import weakref

from . import _reclaim
from ._asyncio_drain import check_loop, ended_by_fork

# loop -> list of [(since, until) epochs, asyncio future, the function awaited]. Guarded by _lock; futures are
# completed outside it, on their loop's thread.
_waiters: "weakref.WeakKeyDictionary[_asyncio.AbstractEventLoop, list[list[object]]]" = weakref.WeakKeyDictionary()
_lock = _threading.Lock()
# Loops whose reader is added and whose listener is registered with the barrier (one each). Guarded by _lock.
_listening: "weakref.WeakSet[_asyncio.AbstractEventLoop]" = weakref.WeakSet()


def _complete_waiters(loop):
    """On `loop`'s thread: complete the waiters whose epochs were handed back (True) or that the shut
    ended (False), and drop cancelled ones."""
    finished = []
    with _lock:
        waiting = _waiters.get(loop, [])
        shut = _reclaim._hand_back_is_shut()
        for entry in list(waiting):
            (since, until), future, _ = entry
            if future.done():
                waiting.remove(entry)
            elif _reclaim._hand_back_reached(since, until):
                finished.append((future, True))
            elif shut:
                finished.append((future, False))
    for future, reached in finished:
        if not future.done():
            future.set_result(reached)


def _on_readable(loop):
    with _lock:
        if loop not in _listening:  # a reader that outlived its listener: in a fork child, the parent's loop
            stale = True
        else:
            stale = False
            loops = [other for other, waiting in _waiters.items() if waiting and other is not loop]
            # A loop closed with a wait pending (never cancelled) waits for nothing any more: forget it.
            closed = [other for other in loops if other.is_closed()]
            for other in closed:
                _waiters.pop(other, None)
                loops.remove(other)
                if other in _listening:
                    _listening.discard(other)
                    _reclaim._hand_back_listen(False)
    if stale:
        _remove_reader(loop)
        return
    _reclaim._hand_back_consume()
    _complete_waiters(loop)
    for other in loops:  # the eventfd is shared: a loop whose reader did not get to it first looks too
        try:
            other.call_soon_threadsafe(_complete_waiters, other)
        except RuntimeError:  # closed: nobody awaits there any more
            pass


def _remove_reader(loop):
    if not loop.is_closed():
        try:
            loop.remove_reader(_reclaim._hand_back_listener_fd())
        except (OSError, ValueError):  # a poller that refuses (uvloop's, for a parent's registration)
            pass


def _register(loop, entry):
    with _lock:
        _waiters.setdefault(loop, []).append(entry)
        start = loop not in _listening
        if start:
            _listening.add(loop)
    if start:
        # Listen before the first look (_complete_waiters): an end() after the look then writes the fd.
        _reclaim._hand_back_listen(True)
        loop.add_reader(_reclaim._hand_back_listener_fd(), _on_readable, loop)


def _unregister(loop, entry):
    """Idempotent: the entry goes, and with the loop's last entry its reader and listener."""
    with _lock:
        waiting = _waiters.get(loop)
        if waiting is not None and entry in waiting:
            waiting.remove(entry)
        if not waiting:
            _waiters.pop(loop, None)
        stop = not waiting and loop in _listening
        if stop:
            _listening.discard(loop)
    if stop:
        _reclaim._hand_back_listen(False)
        _remove_reader(loop)


async def _wait(function, since):
    loop = _asyncio.get_running_loop()
    check_loop(function, loop)
    if _reclaim._hand_back_is_shut():
        return False
    entry = [_reclaim._hand_back_request(since), loop.create_future(), function]
    try:
        _register(loop, entry)
        _complete_waiters(loop)  # it may be over already (nothing was held)
        return await entry[1]
    finally:
        _unregister(loop, entry)


async def handed_back(*, since=None):
    """Resume once CUDA has handed back everything attached before this call (from the mark ``since`` of
    :func:`cuda_reclaim.hand_back_mark` on; ``None``: all): True, as :func:`cuda_reclaim.wait_handed_back`
    without blocking the loop. False once the queue is closed (:func:`cuda_reclaim.close`, exit), also
    while waiting.

    The loop wakes through a reader on the barrier's eventfd, written by the hand-back that ends the wait:
    no polling timer, no thread. Bound it with ``asyncio.wait_for``; cancelling the await is safe. Loops
    without ``add_reader`` (the Windows proactor) are refused with NotImplementedError. In a fork child, on a
    loop made before the fork: a wait pending at the fork raises ``asyncio.CancelledError`` whose message says
    so, and a new one RuntimeError; a loop made in the child waits as in a new process.
    """
    return await _wait("handed_back", since)


async def flush(*, since=None):
    """``await handed_back(since=since)``, then :func:`cuda_reclaim.drain` everything queued on the loop's thread
    (finalizers and host calls run here); return how many that drain released. As
    :func:`cuda_reclaim.flush`, without blocking the loop; in a fork child, as :func:`handed_back`."""
    await _wait("flush", _reclaim._checked_since("flush", since))
    return _reclaim.drain(None)


def _after_fork_in_child():
    # The barrier starts afresh in the child (no tickets, no listener, a new eventfd behind the listener fd's
    # number), and every loop with waiters is the parent's: their waits end cancelled (the forking thread is the
    # only one, so the loop is told to resume their tasks where it could run at all). Another parent thread may
    # have held the lock at the fork: the child's is new.
    global _lock
    _lock = _threading.Lock()
    entries = [entry for waiting in _waiters.values() for entry in waiting]
    _waiters.clear()
    _listening.clear()
    for _, future, function in entries:
        try:
            future.cancel(msg=ended_by_fork(function))
        except RuntimeError:  # the loop is closed, or ran on a thread of the parent's (it never runs here)
            pass


_os.register_at_fork(after_in_child=_after_fork_in_child)
