"""Drain the reclaim queue from an asyncio event loop.

``install(loop)`` registers the wake-up fd with ``loop.add_reader``: the loop wakes only when work
arrives (no polling) and drains in bounded batches between its other callbacks. Loops without
``add_reader`` (e.g. the Windows proactor) get a periodic timer instead. Works with uvloop.
"""

import asyncio as _asyncio
import weakref

from . import _reclaim

__all__ = ["DrainHandle", "install"]

_installed = weakref.WeakKeyDictionary()  # loop -> DrainHandle


class DrainHandle:
    """What :func:`install` returns; ``cancel()`` stops draining from the loop."""

    def __init__(self, loop, max_items, interval):
        self._loop = loop
        self._max_items = max_items
        self._interval = interval
        self._timer = None
        self._cancelled = False
        self.mode = None  # "reader" or "timer"
        self.drained = 0  # references released from this loop

    def _drain(self):
        self.drained += _reclaim.drain(self._max_items)

    def _tick(self):
        self._drain()
        if not self._cancelled:
            self._timer = self._loop.call_later(self._interval, self._tick)

    def _start(self):
        try:
            self._loop.add_reader(_reclaim.fileno(), self._drain)
            self.mode = "reader"
        except NotImplementedError:
            self._timer = self._loop.call_later(self._interval, self._tick)
            self.mode = "timer"

    def cancel(self):
        """Stop draining from the loop. Idempotent."""
        if self._cancelled:
            return
        self._cancelled = True
        if self.mode == "reader" and not self._loop.is_closed():
            self._loop.remove_reader(_reclaim.fileno())
        if self._timer is not None:
            self._timer.cancel()
        if _installed.get(self._loop) is self:
            del _installed[self._loop]

    @property
    def cancelled(self):
        return self._cancelled


def install(loop=None, *, max_items=4096, interval=0.05):
    """Drain from ``loop`` (default: the running loop) whenever work is queued; return a handle.

    ``max_items`` bounds each drain so other callbacks keep running (the fd stays readable while work
    remains, so the loop comes back). ``interval`` is the timer period where add_reader is missing.
    Installing twice on one loop returns the existing handle.
    """
    if loop is None:
        try:
            loop = _asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "cuda_reclaim.asyncio.install() needs a loop: call it from a coroutine, or pass loop="
            ) from None
    if max_items is not None and (not isinstance(max_items, int) or max_items <= 0):
        raise ValueError(f"max_items must be a positive int or None, not {max_items!r}")
    if not interval > 0:
        raise ValueError(f"interval must be > 0 seconds, not {interval!r}")
    existing = _installed.get(loop)
    if existing is not None and not existing.cancelled:
        return existing
    handle = DrainHandle(loop, max_items, interval)
    handle._start()
    _installed[loop] = handle
    return handle
