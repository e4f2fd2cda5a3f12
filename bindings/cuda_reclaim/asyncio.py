"""Drain the reclaim queue from an asyncio event loop, and await points in CUDA streams.

``install(loop)`` registers the wake-up fd with ``loop.add_reader``: the loop wakes only when work arrives (no
polling) and drains in bounded batches between its other callbacks; works with uvloop. Loops without ``add_reader``
(e.g. the Windows proactor) get a periodic timer instead.

``await handed_back()`` resumes once CUDA has handed back what was attached before it (``flush()`` also
drains). ``await stream_reached(stream)`` resumes once the stream has passed this point; ``await
run_when_reached(stream, fn, *args)`` returns ``fn(*args)``, run in a drain once it gets there. Both ride on
:func:`cuda_reclaim.launch_host_func`: CUDA's thread only pushes, a drain completes a
``concurrent.futures.Future``, and the loop learns of it through ``call_soon_threadsafe`` (from the drain
thread) or at once (from its own reader's drain). No polling, no thread per wait. Cancelling the await cancels
the call if it has not run (it then never runs); its references go when CUDA hands the call back, or at close.

Fork: in a fork child an epoll loop gets a poller of its own before its readers (the drain's, handed_back()'s) are
installed again; a uvloop loop sharing the parent's poller drains and looks on a timer (docs/callbacks.md).
"""

import asyncio as _asyncio
import os as _os
import select as _select
import selectors as _selectors
import sys as _sys
import threading as _threading
import weakref

from . import _auto
from . import _graph
from . import _reclaim
from ._asyncio_barrier import flush, handed_back

__all__ = ["DrainHandle", "flush", "handed_back", "install", "run_when_reached", "stream_reached"]

_installed = weakref.WeakKeyDictionary()  # loop -> DrainHandle (which holds its loop weakly: see below)
# Loops with an await of this module pending, and how many: when the automatic drain thread stops while
# they wait, their own reader must take over (see _mode_changed). Guarded by _awaiting_lock (re-entrant:
# a finalizer run on this thread while it is held may switch the mode).
_awaiting = weakref.WeakKeyDictionary()  # loop -> count
_awaiting_lock = _threading.RLock()
# Set in a fork child of this process: loops there may share their kernel poller with the parent's.
_forked = False
# Loops whose selector this process has given an epoll instance of its own (fork child only).
_own_poller_loops = weakref.WeakSet()
_inherited_pollers = None  # fork child: the epoll fds it shares with the parent (None: unknown)


def _check_drain_arguments(function, max_items, interval):
    _reclaim._checked_count(function, "max_items", max_items)
    if not _reclaim._checked_seconds(function, "interval", interval):  # None or 0 would spin or never tick
        raise ValueError(f"{function}(): interval must be > 0 seconds, not {interval!r}")


class DrainHandle:
    """What :func:`install` returns; ``cancel()`` stops draining from the loop."""

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
        self.drained += _reclaim.drain(self._max_items)

    def _tick(self):
        self._drain()
        loop = self._loop_ref()
        if not self._cancelled and loop is not None:
            self._timer = loop.call_later(self._interval, self._tick)

    def _start(self, loop):
        if self._max_items == 0:
            return  # drains nothing: a reader would find the fd readable for ever and spin
        if _forked and not _make_poller_own(loop) and _poller_may_be_the_parents(loop):
            self._start_timer(loop)  # see _follow_fork
            return
        try:
            loop.add_reader(_reclaim.fileno(), self._drain)
            self.mode = "reader"
        except NotImplementedError:
            self._start_timer(loop)

    def _start_timer(self, loop):
        self._timer = loop.call_later(self._interval, self._tick)
        self.mode = "timer"

    def _follow_fork(self, loop):
        """In a fork child: keep draining the child's queue from `loop`, whose reader the parent installed
        (the fd number stays; the child's own eventfd is behind it now)."""
        if self.mode != "reader" or self.cancelled:
            return
        if _make_poller_own(loop):
            return  # the reader's registration was re-made in the child's own poller
        # A poller this module cannot renew (uvloop's libuv epoll): its registration of the fd is the
        # parent's eventfd, and one made now would sit in the poller the parent waits on too, waking the
        # parent for the child's work. The parent's stays where it is (removing it here fails harmlessly:
        # the kernel keys it by the parent's file), and the child drains on a timer.
        try:
            loop.remove_reader(_reclaim.fileno())
        except (OSError, ValueError):
            pass
        self._start_timer(loop)

    def cancel(self):
        """Stop draining from the loop. Idempotent."""
        if self._cancelled:
            return
        self._cancelled = True
        loop = self._loop_ref()
        if self.mode == "reader" and loop is not None and not loop.is_closed():
            loop.remove_reader(_reclaim.fileno())
        if self._timer is not None:
            self._timer.cancel()
        if loop is not None and _installed.get(loop) is self:
            del _installed[loop]

    @property
    def cancelled(self):
        """True once :meth:`cancel` ran, or once its loop is closed or gone (it drains no more)."""
        loop = self._loop_ref()
        return self._cancelled or loop is None or loop.is_closed()


def install(loop=None, *, max_items=4096, interval=0.05):
    """Drain from ``loop`` (default: the running loop) whenever work is queued; return a handle.

    ``max_items`` bounds each drain so other callbacks keep running (the fd stays readable while work
    remains, so the loop comes back); None drains everything, 0 nothing (as :func:`cuda_reclaim.drain`:
    the handle then neither reads nor ticks).
    ``interval`` is the timer period in seconds (> 0) where add_reader is missing.
    Installing twice on one loop returns the existing handle. In a fork child, a loop made before the fork
    is first given a poller of its own, or drains on the timer where that cannot be done (see the module's
    docstring). Call it on the loop's thread; it never blocks.
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
    existing = _installed.get(loop)
    if existing is not None and not existing.cancelled:
        return existing
    handle = DrainHandle(loop, max_items, interval)
    handle._start(loop)
    _installed[loop] = handle
    return handle


def _make_poller_own(loop):
    """Fork child, on `loop`'s thread: make `loop`'s kernel poller this process's own, so that what the
    child registers there neither wakes the parent nor waits on the parent's files. True if the loop's
    readers now see this process's files only: an asyncio loop with an epoll selector gets a fresh epoll
    instance behind the same descriptor number (the parent keeps the old one) with every registration made
    again; poll and select selectors hold no kernel state. False for loops whose poller is out of reach.
    Once per loop per process; never blocks."""
    if loop in _own_poller_loops:
        return True
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, (_selectors.PollSelector, _selectors.SelectSelector)):
        return True
    if not isinstance(selector, _selectors.EpollSelector) or loop.is_closed():
        return False
    # After fork() both processes hold the same epoll instance, and epoll keys a registration by the open
    # file and the descriptor number: the parent's registration of the wake-up fd would wake the child's
    # loop for the parent's work, and the child's own one would wake the parent's loop for the child's
    # (which the parent's drain can never clear: a spin). With its own instance neither sees the other.
    try:
        fresh = _select.epoll()
    except OSError:  # out of descriptors: the caller drains on a timer instead
        return False
    try:
        _os.dup2(fresh.fileno(), selector.fileno(), inheritable=False)
    except OSError:
        return False
    finally:
        fresh.close()
    for key in list(selector.get_map().values()):
        try:
            # unregister() tolerates the fresh instance's ENOENT; register() adds it there.
            selector.unregister(key.fileobj)
            selector.register(key.fileobj, key.events, key.data)
        except (OSError, ValueError, KeyError):
            continue  # a file closed without being unregistered: the loop would drop it too
    _own_poller_loops.add(loop)
    return True


def _poller_may_be_the_parents(loop):
    """Fork child: whether `loop`'s kernel poller, which this module cannot renew, may be one the parent
    waits on too (uvloop's libuv epoll, made before the fork). Errs towards yes."""
    backend = getattr(loop, "_get_backend_id", None)  # uvloop: libuv's epoll descriptor
    if backend is None or _inherited_pollers is None:
        return True
    try:
        return backend() in _inherited_pollers
    except Exception:
        return True


def _epoll_descriptors():
    """The descriptor numbers of this process's epoll instances, or None where /proc cannot tell."""
    found = set()
    try:
        names = _os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        try:
            if _os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[eventpoll]":
                found.add(int(name))
        except (OSError, ValueError):
            continue  # the listing's own descriptor, closed by now
    return found


def _after_fork_in_child():
    """os.register_at_fork's hook in the child (the forking thread, the only one left)."""
    global _forked, _inherited_pollers
    _forked = True
    # Only uvloop's pollers need telling apart (see _poller_may_be_the_parents); without it, skip the scan.
    _inherited_pollers = _epoll_descriptors() if "uvloop" in _sys.modules else set()
    _own_poller_loops.clear()  # a grandchild's loops share their poller with this process again
    for loop, handle in list(_installed.items()):
        handle._follow_fork(loop)


_os.register_at_fork(after_in_child=_after_fork_in_child)


# --- awaiting stream points ---------------------------------------------------------------------------


def _reached():
    return None


def _copy_outcome(source, destination, function):
    """On the loop: give `destination` the outcome of `function`'s finished concurrent future `source`."""
    if destination.done():  # the await was cancelled meanwhile
        return
    if source.cancelled():  # by close() (or exit), unless the call was released without running
        why = "cuda_reclaim is closed: the call never runs" if _reclaim.is_closed() else "the call was cancelled"
        return destination.cancel(msg=f"{function}(): {why}")
    error = source.exception()
    if error is None:
        destination.set_result(source.result())
        return
    if isinstance(error, StopIteration):
        # An asyncio future refuses a StopIteration (before 3.13 set_exception raises TypeError on the loop
        # and the await is never completed): wrapped, as 3.13 does, on every version.
        wrapped = RuntimeError(f"the call raised {type(error).__name__}, which cannot be raised into a future")
        wrapped.__cause__ = error
        error = wrapped
    destination.set_exception(error)


class _CallWaiter(_asyncio.Future):
    """The asyncio future an await of this module waits on, for one launched call (a
    concurrent.futures.Future). Created and cancelled on its loop's thread; cancel() never blocks.

    cancel() cancels the call before it cancels itself, at once: asyncio tells a cancelled future's
    done-callbacks only on the loop's next iteration, and until then the drain thread may take the call and
    run it. A call that has started (or ended) cannot be cancelled: it finishes and its outcome is dropped.
    """

    def __init__(self, call, loop):
        super().__init__(loop=loop)
        self._call = call

    def cancel(self, msg=None):
        try:
            self._call.cancel()
        finally:
            # Even if the call's cancel was interrupted (a KeyboardInterrupt in its done-callbacks): whatever
            # the call's state, the await ends, and a call that was not cancelled runs at most once.
            cancelled = super().cancel(msg=msg)
        return cancelled


def _on_loop(future, loop, function):
    """A _CallWaiter of `loop` that follows the concurrent.futures.Future `future`.

    The outcome reaches the loop through call_soon_threadsafe from another thread (the drain thread), or
    call_soon when the drain runs on the loop's own thread (its reader): no wake-up write then. A loop that
    is closed by the time the call completes gets nothing (nobody awaits any more).
    """
    waiter = _CallWaiter(future, loop)
    loop_thread = _threading.get_ident()  # we are on the loop's thread: called from a coroutine

    def deliver(finished):
        try:
            if _threading.get_ident() == loop_thread:
                loop.call_soon(_copy_outcome, finished, waiter, function)
            else:
                loop.call_soon_threadsafe(_copy_outcome, finished, waiter, function)
        except RuntimeError:  # the loop is closed
            pass

    future.add_done_callback(deliver)
    return waiter


def _make_sure_something_drains(loop):
    # With the automatic drain thread, it runs the calls and wakes the loop. Without it ("gc" or "off"),
    # only the loop itself can be relied on: drain from its reader. Closed: nothing runs any more.
    if _auto.get_auto_drain() not in ("thread", "closed"):
        install(loop)


def _stop_awaiting(loop):
    with _awaiting_lock:
        left = _awaiting.get(loop, 1) - 1
        if left > 0:
            _awaiting[loop] = left
        else:
            _awaiting.pop(loop, None)


async def _await_call(loop, call, function):
    """Await `function`'s launched call `call` (a concurrent.futures.Future) on `loop`, with something draining
    until it completes: the loop counts as awaiting meanwhile, so that a switch away from the drain thread
    installs its reader. An exception before the await begins (a KeyboardInterrupt) cancels the call:
    nobody would await its outcome."""
    counted = False
    try:
        waiter = _on_loop(call, loop, function)
        with _awaiting_lock:
            _awaiting[loop] = _awaiting.get(loop, 0) + 1
            counted = True
        _make_sure_something_drains(loop)
    except BaseException:
        call.cancel()
        if counted:
            _stop_awaiting(loop)
        raise
    try:
        return await waiter
    finally:
        _stop_awaiting(loop)


def _install_if_still_awaiting(loop):
    """On `loop`'s thread, after the automatic drain left "thread": its awaits need its own reader now."""
    with _awaiting_lock:
        waiting = _awaiting.get(loop, 0) > 0
    if waiting and not loop.is_closed():
        _make_sure_something_drains(loop)


def _mode_changed(mode):
    """Called by cuda_reclaim._auto after every mode switch (any thread, possibly from a finalizer)."""
    if mode == "thread":
        return
    with _awaiting_lock:
        loops = list(_awaiting.keys())
    for loop in loops:
        try:
            loop.call_soon_threadsafe(_install_if_still_awaiting, loop)
        except RuntimeError:  # the loop is closed: nobody awaits there any more
            pass


_auto.add_mode_listener(_mode_changed)


async def stream_reached(stream):
    """Resume once ``stream`` has passed this point: every piece of work enqueued on it before is done.

    ``stream``: a cuda.core ``Stream``, a cuda.bindings ``CUstream``, an object with ``__cuda_stream__``,
    or an int. Costs one host function on the stream (which only pushes on CUDA's thread) and no thread
    or polling here. With the automatic drain off (or "gc"), the running loop's drain is installed
    (:func:`install`), since something must drain for the wait to end. Cancellation-safe. Raises
    :class:`cuda_reclaim.DriverError` as :func:`cuda_reclaim.launch_host_func` does; after
    :func:`cuda_reclaim.close` (or at exit) it raises ``asyncio.CancelledError`` whose message says so.
    """
    loop = _asyncio.get_running_loop()
    await _await_call(loop, _graph.launch("stream_reached", stream, _reached, (), None), "stream_reached")


async def run_when_reached(stream, fn, /, *args, **kwargs):
    """Return ``fn(*args, **kwargs)``, called once ``stream`` has passed this point.

    ``fn`` runs in a drain (the automatic drain thread, or this loop's reader drain), never on CUDA's
    thread, in stream order with the other calls of the stream; its result or exception comes back here.
    For code that must run on the loop's thread, ``await stream_reached(stream)`` and then call it.
    Cancelling the await before the call starts means it never runs; after close, as :func:`stream_reached`.
    """
    loop = _asyncio.get_running_loop()
    return await _await_call(loop, _graph.launch("run_when_reached", stream, fn, args, kwargs), "run_when_reached")
