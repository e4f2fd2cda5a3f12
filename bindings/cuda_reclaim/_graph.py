"""Graph and stream keep-alive: turn the graph/stream argument into a driver handle and attach.

Accepted without importing cuda.core or cuda.bindings (their types are looked up only if the caller's
object could be one of them, i.e. the module is already loaded):

- graphs: a cuda.core ``GraphDefinition``; a cuda.core ``GraphBuilder`` while building (the graph being
  captured) or after ``end_building()`` (its ``graph_definition``); a cuda.bindings ``CUgraph``; an int.
- streams: a cuda.core ``Stream``; a cuda.bindings ``CUstream``; any object with ``__cuda_stream__``;
  an int (0 is the legacy default stream).
"""

import sys

from . import _auto
from . import _reclaim

DriverError = _reclaim.DriverError

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


def _checked_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int handle, not {type(value).__name__}")
    if value < 0 or value >= 1 << 64:
        raise ValueError(f"{what} {value} is not a valid handle (expected 0 <= handle < 2**64)")
    return value


def _graph_handle(graph, what="graph"):
    value = _checked_int(graph, what)
    if value == 0:
        raise ValueError(f"{what} is a null CUgraph handle (closed, or never created)")
    return value


def graph_target(graph):
    """Return ("graph", CUgraph int) or ("capture", CUstream int) for a keep_alive() graph argument."""
    definition_type, builder_type, exec_type = _core_graph_types()
    if isinstance(graph, int) and not isinstance(graph, bool):
        return "graph", _graph_handle(graph)
    if _is(graph, definition_type):
        return "graph", _graph_handle(int(graph.handle), "GraphDefinition.handle")
    if _is(graph, builder_type):
        if graph.is_closed:
            raise ValueError("the GraphBuilder is closed: attach objects before closing it")
        if graph.is_building:
            # The graph under capture: cuStreamGetCaptureInfo on the builder's stream finds it.
            return "capture", _checked_int(int(graph.stream.handle), "GraphBuilder.stream.handle")
        try:
            definition = graph.graph_definition
        except RuntimeError as error:
            raise ValueError(
                "keep_alive() needs a GraphBuilder that is building, or has ended building and is not yet "
                f"complete: {error}"
            ) from None
        return "graph", _graph_handle(int(definition.handle), "GraphBuilder.graph_definition.handle")
    if _is(graph, exec_type) or _is(graph, _driver_type("CUgraphExec")):
        raise TypeError(f"keep_alive() got a {type(graph).__name__}: {_EXEC_HINT}")
    if _is(graph, _driver_type("CUgraph")):
        return "graph", _graph_handle(int(graph), "CUgraph")
    raise TypeError(
        "keep_alive() expects a graph: a cuda.core GraphDefinition or GraphBuilder, a cuda.bindings "
        f"CUgraph, or an int CUgraph handle; got {type(graph).__name__}"
    )


def stream_handle(stream):
    """Return the CUstream int for a keep_alive_until() stream argument."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return _checked_int(stream, "stream")
    stream_type = getattr(sys.modules.get("cuda.core"), "Stream", None)
    if _is(stream, stream_type) or _is(stream, _driver_type("CUstream")):
        handle = stream.handle if _is(stream, stream_type) else stream
        return _checked_int(int(handle), "stream handle")
    protocol = getattr(type(stream), "__cuda_stream__", None)
    if protocol is not None:
        version, handle = stream.__cuda_stream__()
        return _checked_int(handle, "__cuda_stream__() handle")
    raise TypeError(
        "keep_alive_until() expects a stream: a cuda.core Stream, a cuda.bindings CUstream, an object "
        f"with __cuda_stream__, or an int CUstream handle; got {type(stream).__name__}"
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
    are not kept). Starts the automatic drain, lazily.
    """
    payload = _payload("keep_alive", objs)
    kind, handle = graph_target(graph)
    if kind == "capture":
        _reclaim._keep_alive_capture(handle, payload)
    else:
        _reclaim._keep_alive_graph(handle, payload)
    _auto.note_handover()  # only once something was attached: a failed call starts nothing


def keep_alive_until(stream, *objs):
    """Keep ``objs`` alive until ``stream`` reaches this point (all work enqueued before it is done).

    A host function enqueued on the stream hands the references to the reclaim queue when it runs.
    ``stream`` may be a cuda.core ``Stream``, a cuda.bindings ``CUstream``, an object with
    ``__cuda_stream__`` or an int handle. A stream that is capturing a graph is refused (use
    :func:`keep_alive` with the graph builder). Raises :class:`DriverError` as :func:`keep_alive` does.
    Starts the automatic drain, lazily.
    """
    payload = _payload("keep_alive_until", objs)
    handle = stream_handle(stream)
    _reclaim._keep_alive_stream(handle, payload)
    _auto.note_handover()  # only once something was attached: a failed call starts nothing


def source_stats():
    """Pushes by source: graph user objects, stream host functions (see :func:`cuda_reclaim.stats`)."""
    counts = _reclaim._source_stats()
    return {"graph_user_objects": counts["graph_user_objects"], "stream_host_functions": counts["stream_host_functions"]}
