"""cuda_reclaim.asyncio's awaits of a stream point: ``stream_reached()`` and ``run_when_reached()``.

Each await launches one call (:func:`cuda_reclaim.launch_host_func`, a ``concurrent.futures.Future``) and waits on
a ``_CallWaiter`` of its loop, which the call's done-callback completes: through ``call_soon_threadsafe`` from
another thread (the drain thread), through ``call_soon`` from the loop's own reader drain. While an await is
pending and the automatic drain is not a thread, the loop's reader drains (:func:`install`).

A fork child cancels the awaits pending on loops made before the fork (the parent's calls are cancelled there
too) and refuses new ones on such loops with RuntimeError (_asyncio_drain.check_loop).
"""

import asyncio as _asyncio
import os as _os
import threading as _threading
import weakref

from . import _auto
from . import _graph
from . import _reclaim
from ._asyncio_drain import check_loop, ended_by_fork, install

# loop -> the _CallWaiters pending there: when the automatic drain thread stops while they wait, the loop's own
# reader must take over (see _mode_changed); in a fork child they are cancelled. Guarded by _awaiting_lock
# (re-entrant: a finalizer run on this thread while it is held may switch the mode).
_awaiting: "weakref.WeakKeyDictionary[_asyncio.AbstractEventLoop, set[_CallWaiter]]" = weakref.WeakKeyDictionary()
_awaiting_lock = _threading.RLock()


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

    def __init__(self, call, loop, function):
        super().__init__(loop=loop)
        self._call = call
        self.function = function

    def cancel(self, msg=None):
        try:
            self._call.cancel()
        finally:
            # Even if the call's cancel was interrupted (a KeyboardInterrupt in its done-callbacks): whatever
            # the call's state, the await ends, and a call that was not cancelled runs at most once.
            cancelled = super().cancel(msg=msg)
        return cancelled

    def cancel_in_fork_child(self):
        """In a fork child, for a loop made before the fork: the await ends cancelled. The call is the parent's
        (the child has cancelled it already); the loop is only told to resume the task."""
        try:
            super().cancel(msg=ended_by_fork(self.function))
        except RuntimeError:  # the loop is closed, or ran on a thread of the parent's (it never runs here)
            pass


def _on_loop(future, loop, function):
    """A _CallWaiter of `loop` that follows the concurrent.futures.Future `future`.

    The outcome reaches the loop through call_soon_threadsafe from another thread (the drain thread), or
    call_soon when the drain runs on the loop's own thread (its reader): no wake-up write then. A loop that
    is closed by the time the call completes gets nothing (nobody awaits any more), and neither does one in a
    fork child, where the waiter is cancelled (_after_fork_in_child) and the loop is the parent's too.
    """
    waiter = _CallWaiter(future, loop, function)
    loop_thread = _threading.get_ident()  # we are on the loop's thread: called from a coroutine
    pid = _os.getpid()

    def deliver(finished):
        if _os.getpid() != pid:
            return
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
    # With the automatic drain thread, it runs the calls and wakes the loop. Without it ("off"),
    # only the loop itself can be relied on: drain from its reader. Closed: nothing runs any more.
    if _auto.get_auto_drain() not in ("thread", "closed"):
        install(loop)


def _stop_awaiting(loop, waiter):
    with _awaiting_lock:
        waiters = _awaiting.get(loop)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del _awaiting[loop]


async def _await_call(loop, call, function):
    """Await `function`'s launched call `call` (a concurrent.futures.Future) on `loop`, with something draining
    until it completes: the waiter counts in _awaiting meanwhile, so that a switch away from the drain thread
    installs the loop's reader. An exception before the await begins (a KeyboardInterrupt) cancels the call:
    nobody would await its outcome."""
    waiter = None
    try:
        waiter = _on_loop(call, loop, function)
        with _awaiting_lock:
            _awaiting.setdefault(loop, set()).add(waiter)
        _make_sure_something_drains(loop)
    except BaseException:
        call.cancel()
        if waiter is not None:
            _stop_awaiting(loop, waiter)
        raise
    try:
        return await waiter
    finally:
        _stop_awaiting(loop, waiter)


def _install_if_still_awaiting(loop):
    """On `loop`'s thread, after the automatic drain left "thread": its awaits need its own reader now."""
    with _awaiting_lock:
        waiting = bool(_awaiting.get(loop))
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


_auto.add_mode_subscriber(_mode_changed)


def _after_fork_in_child():
    # Every loop with an await pending was made before the fork. Another parent thread may have held the lock at
    # the fork: the child's is new.
    global _awaiting_lock
    _awaiting_lock = _threading.RLock()
    waiters = [waiter for pending in _awaiting.values() for waiter in pending]
    _awaiting.clear()
    for waiter in waiters:
        waiter.cancel_in_fork_child()


_os.register_at_fork(after_in_child=_after_fork_in_child)


async def stream_reached(stream):
    """Resume once ``stream`` has passed this point: every piece of work enqueued on it before is done.

    ``stream``: a cuda.core ``Stream``, a cuda.bindings ``CUstream``, an object with ``__cuda_stream__``,
    or an int. Costs one host function on the stream (which only pushes on CUDA's thread) and no thread
    or polling here. With the automatic drain off, the running loop's drain is installed
    (:func:`install`), since something must drain for the wait to end. Cancellation-safe. Raises
    :class:`cuda_reclaim.DriverError` as :func:`cuda_reclaim.launch_host_func` does; after
    :func:`cuda_reclaim.close` (or at exit) it raises ``asyncio.CancelledError`` whose message says so.
    In a fork child, on a loop made before the fork: an await pending at the fork raises
    ``asyncio.CancelledError`` whose message says so, and a new one RuntimeError.
    """
    loop = _asyncio.get_running_loop()
    check_loop("stream_reached", loop)
    await _await_call(loop, _graph.launch("stream_reached", stream, _reached, (), None), "stream_reached")


async def run_when_reached(stream, fn, /, *args, **kwargs):
    """Return ``fn(*args, **kwargs)``, called once ``stream`` has passed this point.

    ``fn`` runs in a drain (the automatic drain thread, or this loop's reader drain), never on CUDA's
    thread, in stream order with the other calls of the stream; its result or exception comes back here.
    For code that must run on the loop's thread, ``await stream_reached(stream)`` and then call it.
    Cancelling the await before the call starts means it never runs; after close and in a fork child, as
    :func:`stream_reached`.
    """
    loop = _asyncio.get_running_loop()
    check_loop("run_when_reached", loop)
    return await _await_call(loop, _graph.launch("run_when_reached", stream, fn, args, kwargs), "run_when_reached")
