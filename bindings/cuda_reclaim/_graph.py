"""Graph and stream keep-alive: turn the graph/stream argument into a driver handle and attach.

Accepted without importing cuda.core or cuda.bindings (their types are looked up only if the caller's
object could be one of them, i.e. the module is already loaded):

- graphs: a cuda.core ``GraphDefinition``; a cuda.core ``GraphBuilder`` while building (the graph being
  captured) or after ``end_building()`` (its ``graph_definition``); a cuda.bindings ``CUgraph``; an int.
- streams: a cuda.core ``Stream``; a cuda.bindings ``CUstream``; any object with ``__cuda_stream__``;
  an int (0 is the legacy default stream).
- graph nodes (host-node dependencies): a cuda.core ``GraphNode``; a cuda.bindings ``CUgraphNode``; an int.

Also the Python calls CUDA triggers (docs/callbacks.md): :func:`launch_host_func` (a stream host function)
and :func:`add_host_node` (a graph host node); the call runs in a drain, never on CUDA's thread.
"""

import os as _os
import sys
import warnings as _warnings
from concurrent.futures import Future  # imported before the fork hooks: _auto._install_process_hooks

from . import _auto
from . import _reclaim

DriverError = _reclaim.DriverError

# What becomes of the objects of keep_alive() and keep_alive_until() after close().
_LEAKED_WHEN_CUDA_LETS_GO = (
    "the objects stay attached for as long as CUDA may use them, then are leaked on purpose (counted in "
    "leaked_after_close)"
)

_EXEC_HINT = (
    "user objects cannot be attached to an executable graph (CUgraphExec); pass the graph it was "
    "made from instead: the cuda.core GraphDefinition (before instantiate()) or GraphBuilder (before "
    "complete()), or a CUgraph. Objects attached to that graph stay alive for every executable graph "
    "instantiated from it."
)


def _core_graph_types():
    core = sys.modules.get("cuda.core")
    graph = getattr(core, "graph", None) if core is not None else None
    if graph is None:
        return None, None, None
    return (
        getattr(graph, "GraphDefinition", None),
        getattr(graph, "GraphBuilder", None),
        getattr(graph, "Graph", None),
    )


def _driver_type(name):
    driver = sys.modules.get("cuda.bindings.driver")
    return getattr(driver, name, None) if driver is not None else None


def _is(obj, cls):
    return cls is not None and isinstance(obj, cls)


def _checked_int(value, what, function):
    return _reclaim._checked_handle(function, what, value)  # the C builtins' own rule: one implementation


def _handle_of(value, what, function):
    """The checked int behind a cuda.core or cuda.bindings object's handle, with an error that names it: a
    closed cuda.core object's handle is None, and int() of that would only say NoneType."""
    if value is None:
        raise ValueError(f"{function}(): {what} is None: the object is closed (or was never created)")
    try:
        handle = int(value)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{function}(): {what} must be convertible to an int handle, not {type(value).__name__}"
        ) from error
    return _checked_int(handle, what, function)


def _graph_handle(graph, what, function):
    value = _checked_int(graph, what, function)
    if value == 0:
        raise ValueError(f"{function}(): {what} is a null CUgraph handle (closed, or never created)")
    return value


def graph_target(graph, function):
    """Return ("graph", CUgraph int) or ("capture", CUstream int) for the graph argument of `function`."""
    definition_type, builder_type, exec_type = _core_graph_types()
    if isinstance(graph, int) and not isinstance(graph, bool):
        return "graph", _graph_handle(graph, "graph", function)
    if _is(graph, definition_type):
        what = "GraphDefinition.handle"
        return "graph", _graph_handle(_handle_of(graph.handle, what, function), what, function)
    if _is(graph, builder_type):
        if graph.is_closed:
            raise ValueError(f"{function}(): the GraphBuilder is closed: attach objects before closing it")
        if graph.is_building:
            # The graph under capture: cuStreamGetCaptureInfo on the builder's stream finds it.
            what = "GraphBuilder.stream.handle"
            return "capture", _handle_of(graph.stream.handle, what, function)
        try:
            definition = graph.graph_definition
        except RuntimeError as error:
            raise ValueError(
                f"{function}() needs a GraphBuilder that is building, or has ended building and is not yet "
                f"complete: {error}"
            ) from None
        what = "GraphBuilder.graph_definition.handle"
        return "graph", _graph_handle(_handle_of(definition.handle, what, function), what, function)
    if _is(graph, exec_type) or _is(graph, _driver_type("CUgraphExec")):
        raise TypeError(f"{function}() got a {type(graph).__name__}: {_EXEC_HINT}")
    if _is(graph, _driver_type("CUgraph")):
        return "graph", _graph_handle(_handle_of(graph, "CUgraph", function), "CUgraph", function)
    raise TypeError(
        f"{function}() expects a graph: a cuda.core GraphDefinition or GraphBuilder, a cuda.bindings "
        f"CUgraph, or an int CUgraph handle; got {type(graph).__name__}"
    )


def stream_handle(stream, function):
    """Return the CUstream int for the stream argument of `function` (the public name the user called)."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return _checked_int(stream, "stream", function)
    stream_type = getattr(sys.modules.get("cuda.core"), "Stream", None)
    if _is(stream, stream_type) or _is(stream, _driver_type("CUstream")):
        what = "Stream.handle" if _is(stream, stream_type) else "CUstream"
        handle = stream.handle if _is(stream, stream_type) else stream
        return _handle_of(handle, what, function)
    protocol = getattr(type(stream), "__cuda_stream__", None)
    if protocol is not None:
        name = type(stream).__name__
        if not callable(protocol):
            raise TypeError(f"{function}(): {name}.__cuda_stream__ must be a method returning (version, handle)")
        result = stream.__cuda_stream__()
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError(
                f"{function}(): {name}.__cuda_stream__() must return (version, handle), not {result!r:.80}"
            )
        return _checked_int(result[1], f"{name}.__cuda_stream__() handle", function)
    raise TypeError(
        f"{function}() expects a stream: a cuda.core Stream, a cuda.bindings CUstream, an object "
        f"with __cuda_stream__, or an int CUstream handle; got {type(stream).__name__}"
    )


def _named(function, call, *args):
    """``call(*args)``, a C entry point that loads the driver; a :class:`DriverError` it raises is re-raised
    with the public function's name first (``keep_alive(): ...``)."""
    try:
        return call(*args)
    except DriverError as error:
        if error.args and isinstance(error.args[0], str) and not error.args[0].startswith(f"{function}(): "):
            error.args = (f"{function}(): {error.args[0]}", *error.args[1:])
        raise


# Whether this process (its pid) has said that something was handed over after close().
_warned_after_close_in = None


def warn_after_close(function, what):
    """A ResourceWarning, the first time in this process that a hand-over (by the public `function`) comes
    after close(): `what` says what becomes of it. Not while the interpreter is finalizing (nothing can act on
    it then). Any thread."""
    global _warned_after_close_in
    if _warned_after_close_in == _os.getpid() or sys.is_finalizing():
        return
    _warned_after_close_in = _os.getpid()
    _warnings.warn(
        f"{function}() after cuda_reclaim.close(): {what} (said once per process)", ResourceWarning, stacklevel=3
    )


def _payload(function, objs):
    if not objs:
        raise TypeError(f"{function}() needs at least one object to keep alive")
    # One reference per call: the object itself, or the tuple holding them all.
    return objs[0] if len(objs) == 1 else objs


def keep_alive(graph, *objs):
    """Keep ``objs`` alive for as long as CUDA keeps ``graph`` (and its clones and executable graphs).

    The objects are retained by a CUDA user object on the graph; when CUDA destroys it (the graph and
    everything instantiated or cloned from it are gone) the references are handed to the reclaim queue
    and released by the next drain, never on CUDA's thread. ``graph`` may be a cuda.core
    ``GraphDefinition``, a ``GraphBuilder`` (while building, or after ``end_building()`` and before
    ``complete()``), a cuda.bindings ``CUgraph`` or an int handle. Executable graphs (cuda.core
    ``Graph``, ``CUgraphExec``) are refused with a TypeError. Raises :class:`DriverError` if the CUDA
    driver is missing or too old, or the driver call fails (then nothing is attached and the references
    are not kept); its message starts with the function's name and, where the driver library could not be
    loaded, names ``CUDA_RECLAIM_LIBCUDA``. Starts the automatic drain, lazily. After :func:`close` (at
    exit) the objects are still attached, so that they stay alive for as long as CUDA may use them; when
    CUDA lets them go they are leaked on purpose and counted in ``leaked_after_close``, as everything handed
    over after the close is; a ``ResourceWarning`` says so, once per process (not while the interpreter is
    finalizing).

    Returns an :class:`~cuda_reclaim.Attachment`: ``done()`` / ``wait(timeout)`` tell when CUDA has handed
    these objects back. It holds the objects until a drain releases it and you no longer hold it: drop it
    once you are done waiting (ignoring it, as before, changes nothing).
    """
    payload = _payload("keep_alive", objs)
    kind, handle = graph_target(graph, "keep_alive")
    attach = _reclaim._keep_alive_capture if kind == "capture" else _reclaim._keep_alive_graph
    attachment = _named("keep_alive", attach, handle, payload)
    _auto.note_handover()  # only once something was attached: a failed call starts nothing
    if _reclaim.is_closed():
        warn_after_close("keep_alive", _LEAKED_WHEN_CUDA_LETS_GO)
    return attachment


def keep_alive_until(stream, *objs):
    """Keep ``objs`` alive until ``stream`` reaches this point (all work enqueued before it is done).

    A host function enqueued on the stream hands the references to the reclaim queue when it runs.
    ``stream`` may be a cuda.core ``Stream``, a cuda.bindings ``CUstream``, an object with
    ``__cuda_stream__`` or an int handle. A stream that is capturing a graph is refused (use
    :func:`keep_alive` with the graph builder). Raises :class:`DriverError` as :func:`keep_alive` does.
    Starts the automatic drain, lazily. After :func:`close`, as :func:`keep_alive`: kept alive, then leaked
    on purpose and counted, and a ``ResourceWarning`` once per process. Returns an
    :class:`~cuda_reclaim.Attachment`, as :func:`keep_alive` does.
    """
    payload = _payload("keep_alive_until", objs)
    handle = stream_handle(stream, "keep_alive_until")
    attachment = _named("keep_alive_until", _reclaim._keep_alive_stream, handle, payload)
    _auto.note_handover()  # only once something was attached: a failed call starts nothing
    if _reclaim.is_closed():
        warn_after_close("keep_alive_until", _LEAKED_WHEN_CUDA_LETS_GO)
    return attachment


def launch_host_func(stream, fn, /, *args, **kwargs):
    """Call ``fn(*args, **kwargs)`` once ``stream`` reaches this point; return a ``concurrent.futures.Future``.

    CUDA runs a host function on its own thread when the stream gets here; that host function only hands
    the call to the reclaim queue (no Python, no GIL on CUDA's thread). The call runs later in a drain —
    the automatic drain thread, an event loop's drain (:mod:`cuda_reclaim.asyncio`), or an explicit
    :func:`cuda_reclaim.drain` — and the future gets its result or its exception. Calls launched on one
    stream run in stream order. Cancelling the future before the call runs means it never runs.

    ``stream``: as :func:`keep_alive_until` (a cuda.core ``Stream``, a cuda.bindings ``CUstream``, an object
    with ``__cuda_stream__``, an int). A stream that is capturing a graph is refused (use
    :func:`add_host_node`). Raises :class:`DriverError` if the driver is missing or the launch fails
    (nothing is launched then). After :func:`cuda_reclaim.close` (and at exit) nothing runs: a call whose
    host function CUDA has not run by then is cancelled (its future too, and its references are released),
    and a launch after close returns an already-cancelled future, with a ``ResourceWarning`` once per process
    (not while the interpreter is finalizing). A ``concurrent.futures.Future`` carries no reason for its
    cancellation: :func:`cuda_reclaim.is_closed` tells whether the close was it. Starts the automatic drain,
    lazily.
    Safe from a finalizer, on any thread.
    """
    future = launch("launch_host_func", stream, fn, args, kwargs)
    if future.cancelled() and _reclaim.is_closed():
        warn_after_close("launch_host_func", "the call never runs: its future is cancelled")
    return future


def launch(function, stream, fn, args, kwargs, *, ordered=False):
    """launch_host_func() for the public function `function` (named in its errors): returns the Future. With
    `ordered`, as launch_host_func_ordered() (without its check that a drain runs)."""
    if not callable(fn):
        raise TypeError(f"{function}(): fn must be callable, not {type(fn).__name__}")
    handle = stream_handle(stream, function)
    future = Future()
    if _named(function, _reclaim._launch_host_func, handle, future, fn, args, kwargs or None, ordered):
        _auto.note_handover()  # only once something was launched
    return future


# The Attachment of each NodeHandle that add_host_node() made, by the handle's id(); its __del__ drops the
# entry. Kept here rather than on the instance: an int subclass with a __dict__ changes int's layout before
# 3.12, and the class stays slot-less and immutable as it was.
_node_attachments: "dict[int, _reclaim.Attachment]" = {}


class NodeHandle(int):
    """The CUgraphNode that :func:`add_host_node` added: an int (``int(node)``, ``operator.index(node)``),
    equal to and hashed as that int, usable wherever a CUgraphNode handle is (a dependency of another
    node, ``cuda.bindings.driver.CUgraphNode(int(node))``). Immutable. ``repr()`` says what it is.

    One made by :func:`add_host_node` also tells when CUDA has handed the node's function back (the graph
    and everything made from it are gone): :meth:`done` and :meth:`wait`, as :class:`Attachment`'s."""

    __slots__ = ()

    def __new__(cls, node, /):
        return super().__new__(cls, _checked_int(node, "node", "NodeHandle"))

    def __del__(self):
        attachments = _node_attachments
        if attachments is not None:  # None only very late in an interpreter's teardown
            attachments.pop(id(self), None)

    def __repr__(self):
        return f"<cuda_reclaim.NodeHandle CUgraphNode {int(self):#x}>"

    def _attachment_of(self, method):
        attachment = _node_attachments.get(id(self))
        if attachment is None:
            raise ValueError(
                f"NodeHandle.{method}(): this handle was made from an int, not by add_host_node(): it has no "
                "hand-back to wait for"
            )
        return attachment

    def done(self):
        """True once CUDA has handed the node's function back (its graph and everything made from it are
        gone). ValueError for a handle not made by :func:`add_host_node`."""
        return self._attachment_of("done").done()

    def wait(self, timeout=None):
        """Block (the GIL released) until CUDA has handed the node's function back: True. False when
        ``timeout`` seconds pass first (``None``: no limit) or once the queue is closed. Any thread but
        CUDA's callback thread. ValueError for a handle not made by :func:`add_host_node`."""
        _reclaim._checked_seconds("NodeHandle.wait", "timeout", timeout)
        attachment = self._attachment_of("wait")
        return attachment.wait(timeout)

    def __reduce__(self):
        # The node's number travels (copy, pickle); its hand-back, which only this process sees, does not.
        return (NodeHandle, (int(self),))

    __str__ = int.__repr__  # str() and format() stay the plain number, as before the type existed


NodeHandle.__module__ = "cuda_reclaim"


def _node_handle(node, function):
    if isinstance(node, int) and not isinstance(node, bool):
        return _checked_int(node, "dependency", function)
    core_graph = getattr(sys.modules.get("cuda.core"), "graph", None)
    node_type = getattr(core_graph, "GraphNode", None)
    if _is(node, node_type):
        if node.handle is None:
            raise ValueError(
                f"{function}(): a graph's entry node is not a node of the graph: pass no dependency instead"
            )
        return _handle_of(node.handle, "GraphNode.handle", function)
    if _is(node, _driver_type("CUgraphNode")):
        return _handle_of(node, "CUgraphNode", function)
    raise TypeError(
        f"{function}(): dependencies must be graph nodes: cuda.core GraphNode, cuda.bindings CUgraphNode, "
        f"NodeHandle or int handles; got {type(node).__name__}"
    )


def add_host_node(graph, fn, /, *args, dependencies=(), **kwargs):
    """Add a host node to ``graph`` that calls ``fn(*args, **kwargs)`` each time it runs; return its
    :class:`NodeHandle`.

    The node fires on every launch of every executable graph instantiated from ``graph``; each firing only
    hands one call to the reclaim queue (no Python reference count changes on CUDA's thread: a native
    count keeps ``fn`` and ``args`` alive until every call handed over has run and the graph is gone). The
    calls run in drains, as for :func:`launch_host_func`; an exception goes to ``sys.unraisablehook``.
    ``graph``: a cuda.core ``GraphDefinition``, a ``GraphBuilder`` after ``end_building()`` (its
    ``graph_definition``), a cuda.bindings ``CUgraph`` or an int. ``dependencies``: nodes of that graph
    (cuda.core ``GraphNode``, ``CUgraphNode``, :class:`NodeHandle` or int handles) that must finish first;
    being this function's own keyword, ``dependencies`` is the one keyword ``fn`` cannot be given. Returns
    the new ``CUgraphNode`` as a :class:`NodeHandle` (an int; usable as a dependency). Raises
    :class:`DriverError` as :func:`keep_alive` does. Starts the automatic drain, lazily. After
    :func:`cuda_reclaim.close` the node is still added, its firings never run and its function is never
    released (counted in ``leaked_after_close``), and a ``ResourceWarning`` says so, once per process (not while
    the interpreter is finalizing). Safe from a finalizer, on any thread.
    """
    handle = add_node("add_host_node", graph, fn, args, dependencies, kwargs, ordered=False)
    if _reclaim.is_closed():
        warn_after_close("add_host_node", NODE_AFTER_CLOSE)
    return handle


NODE_AFTER_CLOSE = "the node is added; its firings never run and its function is never released"


def add_node(function, graph, fn, args, dependencies, kwargs, *, ordered, check=None):
    """add_host_node() for the public function `function` (named in its errors), less the warning after close
    (the caller's, so that it points at its caller); with `ordered`, as add_host_node_ordered() (without its
    check that a drain runs: `check()`, called once the arguments are checked)."""
    if not callable(fn):
        raise TypeError(f"{function}(): fn must be callable, not {type(fn).__name__}")
    if isinstance(dependencies, (str, bytes)) or not hasattr(dependencies, "__iter__"):
        raise TypeError(
            f"{function}(): dependencies must be an iterable of graph nodes, not {type(dependencies).__name__}"
        )
    nodes = tuple(_node_handle(node, function) for node in dependencies)
    kind, handle = graph_target(graph, function)
    if kind == "capture":
        raise ValueError(
            f"{function}() needs the graph itself: call end_building() on the GraphBuilder first, or add "
            "the node to a GraphDefinition (while capturing, launch_host_func is refused and cuda.core's "
            "GraphBuilder.callback runs Python on CUDA's thread)"
        )
    if check is not None:
        check()
    node, attachment = _named(function, _reclaim._add_host_node, handle, nodes, fn, args, kwargs or None, ordered)
    _auto.note_handover()
    handle = int.__new__(NodeHandle, node)  # the driver's handle: no check needed
    _node_attachments[id(handle)] = attachment
    return handle
