"""cuda_reclaim.asyncio's hand-back barrier: ``await handed_back()`` and ``await flush()``.

A waiter takes a grace period of the queue's barrier (as :func:`cuda_reclaim.wait_handed_back` does) and
an asyncio future. Each loop with waiters has a reader on the barrier's eventfd, which the hand-back that
ends a grace period writes while listeners are registered: no timer, no thread. The eventfd is one per
process, so the loop whose reader empties it tells the other loops with waiters to look too.
"""

import asyncio as _asyncio
import os as _os
import threading as _threading
import weakref

from . import _reclaim

# loop -> list of [grace period, asyncio future]. Guarded by _lock; futures are completed outside it, on
# their loop's thread.
_waiters = weakref.WeakKeyDictionary()
_lock = _threading.Lock()


def _settle(loop):
    """On `loop`'s thread: complete the waiters whose grace period ended (True) or that the close ended
    (False), start the next grace period where one is due, and drop cancelled ones."""
    finished = []
    with _lock:
        waiting = _waiters.get(loop, [])
        closed = _reclaim.is_closed()
        for entry in list(waiting):
            target, future = entry
            if future.done():
                waiting.remove(entry)
            elif _reclaim._hand_back_advance(target):
                finished.append((future, True))
            elif closed:
                finished.append((future, False))
    for future, reached in finished:
        if not future.done():
            future.set_result(reached)


def _on_readable(loop):
    _reclaim._hand_back_consume()
    with _lock:
        loops = [other for other, waiting in _waiters.items() if waiting and other is not loop]
    _settle(loop)
    for other in loops:  # the eventfd is shared: a loop whose reader did not get to it first looks too
        try:
            other.call_soon_threadsafe(_settle, other)
        except RuntimeError:  # closed: nobody awaits there any more
            pass


def _register(loop, entry):
    with _lock:
        waiting = _waiters.setdefault(loop, [])
        first = not waiting
        waiting.append(entry)
    if first:
        # Listen before the first look (_settle): an end() after the look then writes the fd.
        _reclaim._hand_back_listen(True)
        try:
            loop.add_reader(_reclaim._hand_back_listener_fd(), _on_readable, loop)
        except BaseException:
            _unregister(loop, entry)
            raise


def _unregister(loop, entry):
    with _lock:
        waiting = _waiters.get(loop, [])
        if entry in waiting:
            waiting.remove(entry)
        last = not waiting
        if last:
            _waiters.pop(loop, None)
    if last:
        _reclaim._hand_back_listen(False)
        if not loop.is_closed():
            loop.remove_reader(_reclaim._hand_back_listener_fd())


async def handed_back():
    """Resume once CUDA has handed back everything attached before this call: True (as
    :func:`cuda_reclaim.wait_handed_back`, without blocking the loop). False once the queue is closed
    (:func:`cuda_reclaim.close`, exit), also while waiting.

    The loop wakes through a reader on the barrier's eventfd, written by the hand-back that ends the wait:
    no polling timer, no thread. Bound it with ``asyncio.wait_for``; cancelling the await is safe (the
    grace period simply ends unobserved). Loops without ``add_reader`` (the Windows proactor) are refused
    with NotImplementedError.
    """
    loop = _asyncio.get_running_loop()
    if _reclaim.is_closed():
        return False
    entry = [_reclaim._hand_back_request(), loop.create_future()]
    _register(loop, entry)
    try:
        _settle(loop)  # it may be over already (nothing was held)
        return await entry[1]
    finally:
        _unregister(loop, entry)


async def flush():
    """``await handed_back()``, then :func:`cuda_reclaim.drain` everything queued on the loop's thread
    (finalizers and host calls run here); return how many that drain released. As
    :func:`cuda_reclaim.flush`, without blocking the loop."""
    await handed_back()
    return _reclaim.drain(None)


def _after_fork_in_child():
    # The barrier starts afresh in the child (no tickets, no listener): what the parent's loops waited for
    # is over here. Restore one listener per loop still waiting, and have the loops look again (the forking
    # thread is the only one: call_soon is safe where it runs a loop).
    with _lock:
        loops = [loop for loop, waiting in _waiters.items() if waiting]
    for loop in loops:
        _reclaim._hand_back_listen(True)
        if not loop.is_closed():
            loop.call_soon(_settle, loop)


_os.register_at_fork(after_in_child=_after_fork_in_child)
