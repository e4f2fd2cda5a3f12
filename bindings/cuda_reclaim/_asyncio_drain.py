"""cuda_reclaim.asyncio's drain from an event loop: ``install()`` and ``DrainHandle`` (the loop's reader, or a
timer where ``add_reader`` is missing), and the rule that keeps a loop made before a fork out of the fork child.

A fork child cancels the handles of the loops made before the fork without touching those loops (their state
and their kernel poller are the parent's too); a reader of such a handle that fires in the child, where the
program runs the parent's loop anyway, takes itself off the loop and drains nothing.
"""

import asyncio as _asyncio
import os as _os
import weakref

from . import _reclaim

# loop -> its DrainHandle (which holds its loop weakly: see DrainHandle).
_installed: "weakref.WeakKeyDictionary[_asyncio.AbstractEventLoop, DrainHandle]" = weakref.WeakKeyDictionary()
# loop -> the id of the process where this package first used it (install, an await), or that forked while it ran
# on the forking thread. An entry that names another process marks a loop made before a fork of this one.
_loop_pids: "weakref.WeakKeyDictionary[_asyncio.AbstractEventLoop, int]" = weakref.WeakKeyDictionary()


def check_loop(function, loop):
    """Note `loop` as this process's, or raise RuntimeError naming `function` if it was made before a fork of
    this process (see _loop_pids). Any thread; never blocks."""
    pid = _os.getpid()
    first = _loop_pids.setdefault(loop, pid)
    if first != pid:
        raise RuntimeError(
            f"{function}(): this event loop was made before os.fork() (in process {first}); asyncio does not "
            "support a parent's loop in a fork child: make a new loop in the child (asyncio.run() does)"
        )


def ended_by_fork(function):
    """The message of the CancelledError that ends `function`'s await pending at a fork, in the fork child."""
    return f"{function}(): the event loop was made before os.fork(); its awaits end in the fork child (make a new loop)"


def _check_drain_arguments(function, max_items, interval):
    _reclaim._checked_count(function, "max_items", max_items)
    if not _reclaim._checked_seconds(function, "interval", interval):  # None or 0 would spin or never tick
        raise ValueError(f"{function}(): interval must be > 0 seconds, not {interval!r}")


class DrainHandle:
    """What :func:`install` returns; ``cancel()`` stops draining from the loop. In a fork child, the handle of a
    loop made before the fork is cancelled."""

    def __init__(self, loop, max_items, interval):
        _check_drain_arguments("DrainHandle", max_items, interval)
        # Weakly: the handle is the value of _installed, whose key is the loop, and a value that held its
        # key would keep every loop ever installed on alive for good (asyncio.run() in a loop, say).
        self._loop_ref = weakref.ref(loop)
        self._max_items = max_items
        self._interval = interval
        self._timer = None
        self._cancelled = False
        self.mode = None  # "reader" or "timer"; None while it drains nothing (max_items=0)
        self.drained = 0  # references released from this loop

    def _drain(self):
        if self._cancelled:  # a reader that fires after cancel(): in a fork child, the parent's loop
            self._remove_reader()
            return
        self.drained += _reclaim.drain(self._max_items)

    def _tick(self):
        loop = self._loop_ref()
        if self._cancelled or loop is None:
            return
        self.drained += _reclaim.drain(self._max_items)
        self._timer = loop.call_later(self._interval, self._tick)

    def _start(self, loop):
        if self._max_items == 0:
            return  # drains nothing: a reader would find the fd readable for ever and spin
        try:
            loop.add_reader(_reclaim.fileno(), self._drain)
            self.mode = "reader"
        except NotImplementedError:
            self._timer = loop.call_later(self._interval, self._tick)
            self.mode = "timer"

    def _remove_reader(self):
        loop = self._loop_ref()
        if self.mode == "reader" and loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(_reclaim.fileno())
            except (OSError, ValueError):  # a poller that refuses (uvloop's, for a parent's registration)
                pass

    def cancel(self):
        """Stop draining from the loop. Idempotent."""
        if self._cancelled:
            return
        self._cancelled = True
        self._remove_reader()
        if self._timer is not None:
            self._timer.cancel()
        loop = self._loop_ref()
        if loop is not None and _installed.get(loop) is self:
            del _installed[loop]

    @property
    def cancelled(self):
        """True once :meth:`cancel` ran, once its loop is closed or gone (it drains no more), and in a fork child
        for a loop made before the fork."""
        loop = self._loop_ref()
        return self._cancelled or loop is None or loop.is_closed()


def install(loop=None, *, max_items=4096, interval=0.05):
    """Drain from ``loop`` (default: the running loop) whenever work is queued; return a handle.

    ``max_items`` bounds each drain so other callbacks keep running (the fd stays readable while work
    remains, so the loop comes back); None drains everything, 0 nothing (as :func:`cuda_reclaim.drain`:
    the handle then neither reads nor ticks).
    ``interval`` is the timer period in seconds (> 0) where add_reader is missing.
    Installing twice on one loop returns the existing handle. Call it on the loop's thread; it never blocks.
    In a fork child, a loop made in the child drains as in a new process; a loop made before the fork is
    refused with RuntimeError (its handle from before the fork is cancelled).
    """
    if loop is None:
        try:
            loop = _asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "cuda_reclaim.asyncio.install() needs a loop: call it from a coroutine, or pass loop="
            ) from None
    elif not isinstance(loop, _asyncio.AbstractEventLoop):
        raise TypeError(f"install(): loop must be an asyncio event loop or None, not {type(loop).__name__}")
    _check_drain_arguments("install", max_items, interval)
    check_loop("install", loop)
    existing = _installed.get(loop)
    if existing is not None and not existing.cancelled:
        return existing
    handle = DrainHandle(loop, max_items, interval)
    handle._start(loop)
    _installed[loop] = handle
    return handle


def _before_fork():
    # A loop running on the forking thread is made before the fork, whether or not this package used it yet.
    try:
        loop = _asyncio.get_running_loop()
    except RuntimeError:
        return
    _loop_pids.setdefault(loop, _os.getpid())


def _after_fork_in_child():
    # Every installed loop was made before the fork: its handle is cancelled, and the loop is left as it is.
    for handle in list(_installed.values()):
        handle._cancelled = True
    _installed.clear()


_os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
