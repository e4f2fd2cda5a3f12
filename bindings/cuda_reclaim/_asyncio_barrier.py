"""cuda_reclaim.asyncio's hand-back barrier: ``await handed_back()`` and ``await flush()``.

A waiter takes the epochs to wait for from the queue's barrier (as :func:`cuda_reclaim.wait_handed_back`
does) and an asyncio future. Each loop with waiters has a reader on the barrier's eventfd, which the
hand-back that may end a wait writes while listeners are registered: no timer, no thread. The eventfd is one per
process, so the loop whose reader empties it tells the other loops with waiters to look too.

Fork: the child's eventfd is a new one behind the same descriptor number, and a loop made before the fork shares
its kernel poller with the parent, whose registration of that number names the parent's eventfd. Before such a
loop's reader watches the number in the child, the loop gets a poller of its own (cuda_reclaim.asyncio's
``_make_poller_own``) and the reader is removed and added again; a loop whose poller cannot be renewed (uvloop's)
looks on a timer instead, and registers nothing in the poller the parent waits on.
"""

import asyncio as _asyncio
import os as _os
import threading as _threading
import weakref

from . import _reclaim

# loop -> list of [(since, until) epochs, asyncio future]. Guarded by _lock; futures are completed outside it, on
# their loop's thread.
_waiters: "weakref.WeakKeyDictionary[_asyncio.AbstractEventLoop, list[list[object]]]" = weakref.WeakKeyDictionary()
_lock = _threading.Lock()
# Loops whose reader is added (or timer scheduled: _timers) and whose listener is registered with the barrier (one
# each). Guarded by _lock.
_listening: "weakref.WeakSet[_asyncio.AbstractEventLoop]" = weakref.WeakSet()
# Loops of _listening that look on a timer instead of a reader (fork child, a poller shared with the parent that
# cannot be renewed): loop -> its asyncio.TimerHandle. Guarded by _lock; scheduled on the loop's thread only.
_timers: "weakref.WeakKeyDictionary[_asyncio.AbstractEventLoop, _asyncio.TimerHandle]" = weakref.WeakKeyDictionary()
# The timer's period, in seconds.
_TIMER_SECONDS = 0.05


def _settle(loop):
    """On `loop`'s thread: complete the waiters whose epochs were handed back (True) or that the close
    ended (False), and drop cancelled ones."""
    finished = []
    with _lock:
        waiting = _waiters.get(loop, [])
        closed = _reclaim._hand_back_closed()
        for entry in list(waiting):
            (since, until), future = entry
            if future.done():
                waiting.remove(entry)
            elif _reclaim._hand_back_reached(since, until):
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
        # A loop closed with a wait pending (never cancelled) waits for nothing any more: forget it.
        closed = [other for other in loops if other.is_closed()]
        for other in closed:
            _waiters.pop(other, None)
            loops.remove(other)
            if other in _listening:
                _listening.discard(other)
                _reclaim._hand_back_listen(False)
    _settle(loop)
    for other in loops:  # the eventfd is shared: a loop whose reader did not get to it first looks too
        try:
            other.call_soon_threadsafe(_settle, other)
        except RuntimeError:  # closed: nobody awaits there any more
            pass


def _reader_is_own(loop):
    """On `loop`'s thread: True if a reader that `loop` adds watches this process's files only and wakes no
    other process's loop. Outside a fork child, always; in a fork child once cuda_reclaim.asyncio has given
    the loop a poller of its own (a loop made before the fork shares its kernel poller with the parent) or
    the loop's poller is not one the parent waits on. False: a poller shared with the parent that cannot be
    renewed. Never blocks."""
    from . import asyncio as reclaim_asyncio  # the module that imports this one and exports handed_back

    if not reclaim_asyncio._forked:
        return True
    return reclaim_asyncio._make_poller_own(loop) or not reclaim_asyncio._poller_may_be_the_parents(loop)


def _tick(loop):
    """A timer loop's look (see _timers): settle, and look again while it listens."""
    _settle(loop)
    with _lock:
        if loop in _timers and not loop.is_closed():
            _timers[loop] = loop.call_later(_TIMER_SECONDS, _tick, loop)


def _wake_on_listener(loop):
    """On `loop`'s thread, for a loop of _listening: its reader on the listener fd, or its timer where a
    reader is not the loop's own (see _reader_is_own)."""
    if _reader_is_own(loop):
        loop.add_reader(_reclaim._hand_back_listener_fd(), _on_readable, loop)
        return
    with _lock:
        _timers[loop] = loop.call_later(_TIMER_SECONDS, _tick, loop)


def _follow_fork(loop):
    """In a fork child, on `loop`'s thread, for a loop that listened at the fork: its reader's registration
    is inherited and names the parent's eventfd (see the module's docstring). The reader goes (a removal from
    a poller shared with the parent fails harmlessly: the kernel keys the parent's registration by the
    parent's eventfd) and comes back in the loop's own poller, or the loop looks on a timer."""
    with _lock:
        listening = loop in _listening and loop not in _timers
    if not listening or loop.is_closed():
        return
    loop.remove_reader(_reclaim._hand_back_listener_fd())
    _wake_on_listener(loop)


def _register(loop, entry):
    with _lock:
        _waiters.setdefault(loop, []).append(entry)
        start = loop not in _listening
        if start:
            _listening.add(loop)
    if start:
        # Listen before the first look (_settle): an end() after the look then writes the fd.
        _reclaim._hand_back_listen(True)
        _wake_on_listener(loop)


def _unregister(loop, entry):
    """Idempotent: the entry goes, and with the loop's last entry its reader and listener."""
    with _lock:
        waiting = _waiters.get(loop)
        if waiting is not None and entry in waiting:
            waiting.remove(entry)
        if not waiting:
            _waiters.pop(loop, None)
        stop = not waiting and loop in _listening
        timer = None
        if stop:
            _listening.discard(loop)
            timer = _timers.pop(loop, None)
    if stop:
        _reclaim._hand_back_listen(False)
        if timer is not None:
            timer.cancel()
        elif not loop.is_closed():
            loop.remove_reader(_reclaim._hand_back_listener_fd())


async def handed_back(*, since=None):
    """Resume once CUDA has handed back everything attached before this call (from the mark ``since`` of
    :func:`cuda_reclaim.hand_back_mark` on; ``None``: all): True, as :func:`cuda_reclaim.wait_handed_back`
    without blocking the loop. False once the queue is closed (:func:`cuda_reclaim.close`, exit), also
    while waiting.

    The loop wakes through a reader on the barrier's eventfd, written by the hand-back that ends the wait:
    no polling timer, no thread (in a fork child, a loop made before the fork whose poller cannot be made
    the child's own, as uvloop's, looks every 50 ms instead). Bound it with ``asyncio.wait_for``; cancelling
    the await is safe. Loops without ``add_reader`` (the Windows proactor) are refused with
    NotImplementedError.
    """
    loop = _asyncio.get_running_loop()
    if _reclaim._hand_back_closed():
        return False
    entry = [_reclaim._hand_back_request(since), loop.create_future()]
    try:
        _register(loop, entry)
        _settle(loop)  # it may be over already (nothing was held)
        return await entry[1]
    finally:
        _unregister(loop, entry)


async def flush(*, since=None):
    """``await handed_back(since=since)``, then :func:`cuda_reclaim.drain` everything queued on the loop's thread
    (finalizers and host calls run here); return how many that drain released. As
    :func:`cuda_reclaim.flush`, without blocking the loop."""
    await handed_back(since=_reclaim._checked_since("flush", since))
    return _reclaim.drain(None)


def _after_fork_in_child():
    # The barrier starts afresh in the child (no tickets, no listener, a new eventfd behind the listener fd's
    # number): what the parent's loops waited for is over here. Restore one listener per loop still waiting,
    # have each such loop watch the child's eventfd (_follow_fork, on the loop's thread, after every fork hook
    # has run) and look again (the forking thread is the only one: call_soon is safe where it runs a loop).
    # Another parent thread may have held the lock at the fork: the child's is new. A timer of the parent's
    # is the loop's own, scheduled on it: it goes on.
    global _lock
    _lock = _threading.Lock()
    with _lock:
        listening = list(_listening)
        loops = [loop for loop, waiting in _waiters.items() if waiting]
    for _ in listening:
        _reclaim._hand_back_listen(True)
    for loop in loops:
        if not loop.is_closed():
            loop.call_soon(_follow_fork, loop)
            loop.call_soon(_settle, loop)


_os.register_at_fork(after_in_child=_after_fork_in_child)
