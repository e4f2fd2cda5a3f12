"""Stream-ordered host calls (docs/callbacks.md, "Stream order"): :func:`launch_host_func_ordered` and
:func:`add_host_node_ordered`, whose host functions hold CUDA's thread until a drain has run the call, the
check that some drain will run it, and the preparation of one such call for an integration that hands CUDA
the host function itself."""

import sys

from . import _auto
from . import _graph
from . import _reclaim


def launch_host_func_ordered(stream, fn, /, *args, **kwargs):
    """As :func:`launch_host_func`, in stream order: the stream's later work, and every wait for the stream
    (``stream.synchronize()``, an event recorded after it), sees what ``fn`` did. Returns a
    ``concurrent.futures.Future``.

    CUDA's thread runs the host function, which hands the call to the reclaim queue and then waits — no
    Python, no GIL, no polling: a futex wait — until a drain has run ``fn`` (also when ``fn`` raises: its
    exception goes to the future) or the call was cancelled (through its future, when a drain reaches it;
    by :func:`cuda_reclaim.close` or the exit, which cancel what has not run). A launch after close returns
    an already-cancelled future and its host function, if CUDA runs it, does not wait.

    What it costs: CUDA runs the host functions of a context on one thread. While the call waits for its
    drain, every other host function of that context — other streams' too, CUDA's own, those of
    :func:`launch_host_func` and :func:`keep_alive_until` — waits behind it, for as long as the drain takes
    to get there and ``fn`` takes to run.

    Rules (each a deadlock otherwise):

    - A drain must run the call: with the automatic drain ``"off"``, or ``"thread"`` whose thread cannot
      start (the launch tries to start it first; a RuntimeWarning says why it could not), it raises
      RuntimeError, unless an event loop's drain (:func:`cuda_reclaim.asyncio.install`) is installed, not
      cancelled, and its loop is running (not closed). After :func:`cuda_reclaim.close` nothing is refused:
      the future comes back cancelled.
    - A drain that stops before the stream reaches the call leaves the gate closed until a
      :func:`cuda_reclaim.drain` or :func:`cuda_reclaim.close`: the automatic drain switched ``"off"``
      later, or an event loop that was the only drain and stops, closes (``asyncio.run()`` returning) or
      has its drain cancelled. The exit's close comes only after ``threading`` has joined
      every non-daemon thread: a non-daemon thread that waits for the stream then holds the exit for good.
    - ``fn``, the future's done-callbacks (they run before the stream goes on), and anything else a drain
      runs (finalizers, other calls) must not wait for GPU work queued after an ordered call that has not
      run yet, on any stream of the context (``synchronize()``, an event's): the drain it waits in may be
      the one that has to run that call. Launching more calls, ordered ones too, from ``fn`` is fine. This
      is not detected (the wait is CUDA's).
    - A wait for the stream on an event loop's thread whose loop is the only drain deadlocks the same way:
      wait from another thread, or ``await`` :func:`cuda_reclaim.asyncio.stream_reached`.
    - The waiting thread must release the GIL while it waits (cuda.core, CuPy, numba-cuda and
      cuda.bindings do), so that the drain can run ``fn``.

    ``stream``, errors, capture, close and exit as :func:`launch_host_func`. Safe from a finalizer, on any
    thread, subject to the rules above.
    """
    if not callable(fn):  # the arguments' errors first, whatever the drain
        raise TypeError(f"launch_host_func_ordered(): fn must be callable, not {type(fn).__name__}")
    handle = _graph.stream_handle(stream, "launch_host_func_ordered")
    check_a_drain_runs("launch_host_func_ordered")
    future = _graph.launch("launch_host_func_ordered", handle, fn, args, kwargs, ordered=True)
    if future.cancelled() and _reclaim.is_closed():
        _graph.warn_after_close("launch_host_func_ordered", "the call never runs: its future is cancelled")
    return future


def add_host_node_ordered(graph, fn, /, *args, dependencies=(), **kwargs):
    """As :func:`add_host_node`, in stream order: each firing holds its stream (CUDA's thread waits on a
    futex gate on its stack, no Python) until a call of ``fn`` that began after the firing has returned in a
    drain, so the graph's later nodes and every wait for the launch see what ``fn`` did. Returns the
    :class:`NodeHandle`.

    The node's calls are all ``fn(*args, **kwargs)``: when firings of several launches wait at once, the
    drain takes every gate waiting when it begins a call and opens them when it returns (an exception goes to
    ``sys.unraisablehook`` and opens them too), so a firing may go on after a call of another firing's entry
    (one that began after it fired); its own entry still runs. A firing whose entry is cancelled (after
    :func:`cuda_reclaim.close`, or taken by a drain that a close interrupted) goes on without a call; a
    firing the queue does not keep (after close; rejected when out of memory) waits for nothing and lets
    every firing of the node that waits then go on. At an exit that runs no call any more, every gate opens;
    in a fork child the parent's gates are left alone.

    Cost and rules as :func:`launch_host_func_ordered`: while a firing waits, every host function of the
    context waits behind it; with the automatic drain ``"off"`` and no event-loop drain it
    raises RuntimeError (after close nothing is refused); ``fn`` and anything a drain runs must not wait for
    GPU work queued behind a firing that waits. ``graph``, ``dependencies``, errors and close as
    :func:`add_host_node`.
    """
    handle = _graph.add_node(
        "add_host_node_ordered", graph, fn, args, dependencies, kwargs, ordered=True,
        check=lambda: check_a_drain_runs("add_host_node_ordered"),  # the arguments' errors first
    )
    if _reclaim.is_closed():
        _graph.warn_after_close("add_host_node_ordered", _graph.NODE_AFTER_CLOSE)
    return handle


def check_a_drain_runs(function):
    """Raise RuntimeError naming the public `function` unless a drain will run an ordered call: the automatic
    drain thread, started here if it is not running yet (one that cannot start is no drain), or a running
    event loop's drain (nothing is refused once closed: the call is cancelled then)."""
    if _reclaim.is_closed():
        return
    _auto.note_handover()  # starts the drain thread now: a start that fails makes the mode "off"
    mode = _auto.get_auto_drain()
    if mode == "off" and not _event_loop_drains():
        raise RuntimeError(
            f'{function}(): the automatic drain is "{mode}" and no running event loop drains '
            "(cuda_reclaim.asyncio.install()): nothing would run the call, and CUDA's thread would wait "
            'for it; set_auto_drain("thread"), install an event-loop drain, or use launch_host_func()'
        )


def prepare_host_call(function, stream, fn, args, kwargs, *, ordered):
    """For an integration (the public `function` it implements, named in errors) that hands CUDA the host
    function itself: ``(host_fn, user_data, future)`` of ``_reclaim._prepare_host_call`` (its docstring is the
    contract: enqueue the pair once on ``stream``, or hand it back with ``_reclaim._withdraw_host_call``),
    after the checks of :func:`launch_host_func` (and, with `ordered`, of :func:`launch_host_func_ordered`:
    RuntimeError when no drain would run it). Starts the automatic drain, lazily. After close: ``(0, 0, a
    cancelled future)``, with the ResourceWarning of a launch after close."""
    if not callable(fn):
        raise TypeError(f"{function}(): fn must be callable, not {type(fn).__name__}")
    handle = _graph.stream_handle(stream, function)
    if ordered:
        check_a_drain_runs(function)
    host_fn, user_data, future = _reclaim._prepare_host_call(handle, fn, tuple(args), kwargs or None, ordered)
    if user_data:
        _auto.note_handover()
    elif _reclaim.is_closed():
        _graph.warn_after_close(function, "the call never runs: its future is cancelled")
    return host_fn, user_data, future


def _event_loop_drains():
    """True while an event-loop drain of cuda_reclaim.asyncio is installed and drains: not cancelled, its loop
    running (not closed, not stopped, not yet run), max_items not 0. Only an imported cuda_reclaim.asyncio can
    have one; its table of installed drains lives in the module that defines install()."""
    for name in ("cuda_reclaim._asyncio_drain", "cuda_reclaim.asyncio"):
        installed = getattr(sys.modules.get(name), "_installed", None)
        if installed is not None:
            return any(
                not handle.cancelled and handle.mode is not None and loop.is_running()
                for loop, handle in list(installed.items())
            )
    return False
