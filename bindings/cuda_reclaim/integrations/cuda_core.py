"""cuda.core's host callbacks through cuda-reclaim: ``GraphDefinition.callback`` and ``GraphNode.callback`` (every
node kind's), and a C host function with user data for APIs that launch one on a stream.

cuda.core accepts two forms of host callback: a Python callable, which its own trampoline calls with the GIL
on CUDA's thread, and a ctypes ``CUhostFn`` pointer with ``user_data``, which CUDA calls as it is.

- :func:`host_call` gives the second form for one call on a stream (``cuLaunchHostFunc``, or an API that
  wraps it): cuda-reclaim's C trampoline and user data. CUDA's thread only hands the call over (ordered: and
  waits, without the GIL, until a drain has run it), and the call runs in a drain.
- :func:`install` makes the Python-callable form of ``GraphDefinition.callback`` and ``GraphNode.callback``
  add the node with :func:`cuda_reclaim.add_host_node` (each firing hands one call to a drain) and return
  cuda.core's object for that node, so that the builder chain goes on as with cuda.core's own. cuda.core's
  files are not edited: its classes are compiled extension types, so their namespaces are written and
  CPython told with ``PyType_Modified``. :func:`uninstall` puts back cuda.core's own; :func:`installed` is
  both as a context manager. A ctypes pointer given by the caller goes to cuda.core unchanged.

While installed, a Python callable given to ``callback(fn)`` is called ``fn()`` each time the graph reaches
the node, in a cuda-reclaim drain (the automatic drain thread, an event loop's drain, or an explicit
:func:`cuda_reclaim.drain`); an exception goes to ``sys.unraisablehook`` and the graph still finishes, as
with cuda.core's own trampoline (``noexcept with gil``).

What differs from cuda.core's own:

- The call runs on the drain's thread, never on CUDA's, and CUDA's thread takes no GIL: a thread that holds
  the GIL while it waits on the CUDA driver cannot deadlock with it.
- The graph does not wait for the call: the node completes once the call is handed over, so the graph's
  later nodes, and a ``stream.sync()`` after the launch, may come before ``fn`` has run. cuda-reclaim's
  ordered form (:func:`host_call`, :func:`cuda_reclaim.launch_host_func_ordered`) serves one call on a
  stream; a graph node fires at every launch, which that form does not cover.
- ``GraphBuilder.callback`` (a host function launched into a stream capture) stays cuda.core's own:
  cuda-reclaim adds nothing to a graph under capture.
- The node's callable as cuda.core reports it (``HostCallbackNode.callback``) is not ``fn``.
- After :func:`cuda_reclaim.close` (and at exit) a firing never runs.
"""

import contextlib
import ctypes

from . import _support

__all__ = ["HOST_FN", "host_call", "withdraw", "install", "uninstall", "is_installed", "installed"]

_PATCHES = _support.Patches()

# CUhostFn, void (*)(void*): the prototype cuda.core checks a ctypes callback against.
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_FUNCTION_POINTER = HOST_FN.__mro__[1]  # the base class of every ctypes function pointer type


def host_call(stream, fn, /, *args, ordered=True, **kwargs):
    """``(pointer, user_data, future)`` for calling ``fn(*args, **kwargs)`` once, when ``stream`` reaches the
    point where CUDA is handed ``pointer`` and ``user_data`` (``cuLaunchHostFunc(stream, pointer, user_data)``,
    or a cuda.core API that takes a ctypes ``CUhostFn`` with ``user_data``). The call runs in a cuda-reclaim
    drain; ``future`` (a ``concurrent.futures.Future``) gets its result; an exception goes to
    ``sys.unraisablehook`` (and the future's result is None). ``ordered`` (the default): CUDA's thread waits,
    without the GIL, until the call has run, so the stream's later work sees its effects (the rules of
    :func:`cuda_reclaim.launch_host_func_ordered` apply); False: CUDA goes on at once.

    ``pointer`` is a ctypes ``CUhostFn`` (:data:`HOST_FN`) to cuda-reclaim's C trampoline, ``user_data`` an
    int. Hand the pair to CUDA exactly once, on ``stream``, and not into a graph capture; if it never gets
    there (the launch failed), call :func:`withdraw`. ``stream``: as :func:`cuda_reclaim.launch_host_func`.
    After :func:`cuda_reclaim.close`: a null pointer (false), user data 0 and a cancelled future: nothing to
    hand to CUDA. Starts the automatic drain, lazily. Any thread."""
    from cuda_reclaim import _ordered_calls

    if not callable(fn):
        raise TypeError(f"host_call(): fn must be callable, not {type(fn).__name__}")
    address, user_data, future = _ordered_calls.prepare_host_call(
        "host_call", stream, _support.reporting(fn), args, kwargs, ordered=bool(ordered)
    )
    return HOST_FN(address), user_data, future


def withdraw(user_data):
    """Hand back a :func:`host_call` whose pair CUDA never got: its future is cancelled and ``fn`` and its
    arguments are released. ValueError for user data that is not a prepared call's, or one that ran or was
    withdrawn already."""
    from cuda_reclaim import _reclaim

    try:
        _reclaim._withdraw_host_call(user_data)
    except ValueError as error:
        raise ValueError(str(error).replace("_withdraw_host_call()", "withdraw()", 1)) from None


def _node_of(graph, handle):
    """cuda.core's object for the node `handle` of `graph` (cuda.core has no constructor from a handle)."""
    for node in graph.nodes():
        if node.handle is not None and int(node.handle) == int(handle):
            return node
    raise RuntimeError(f"cuda_reclaim.integrations.cuda_core: the host node {int(handle):#x} is not in its graph")


def _add(graph, fn, dependencies):
    import cuda_reclaim

    return _node_of(graph, cuda_reclaim.add_host_node(graph, fn, dependencies=dependencies))


def _graph_definition_callback(original):
    def callback(self, fn, *, user_data=None):
        if user_data is None and callable(fn) and not isinstance(fn, _FUNCTION_POINTER):
            return _add(self, fn, ())
        return _support.call_original(original, self, fn, user_data=user_data)

    callback.__doc__ = _doc(original)
    return callback


def _graph_node_callback(original):
    def callback(self, fn, *, user_data=None):
        if user_data is None and callable(fn) and not isinstance(fn, _FUNCTION_POINTER):
            return _add(self.graph, fn, () if self.handle is None else (self,))
        return _support.call_original(original, self, fn, user_data=user_data)

    callback.__doc__ = _doc(original)
    return callback


def _doc(original):
    return (
        "cuda.core's callback(fn, *, user_data=None); a Python callable is added with cuda_reclaim.add_host_node "
        "and runs in a cuda-reclaim drain, not on CUDA's thread (cuda_reclaim.integrations.cuda_core).\n\n"
        + (getattr(original, "__doc__", None) or "")
    )


def install():
    """Make the Python-callable form of cuda.core's ``GraphDefinition.callback`` and ``GraphNode.callback`` go
    through :func:`cuda_reclaim.add_host_node`. Idempotent: True if this call installed them, False if they
    were installed already. ImportError when cuda.core is missing."""
    graph = _support.import_library(
        "cuda.core.graph", "cuda_reclaim.integrations.cuda_core.install()", "cuda.core", "cuda-core"
    )
    if _PATCHES.is_installed():
        return False
    definition, node = graph.GraphDefinition, graph.GraphNode
    return _PATCHES.install(
        [
            (definition, "callback", _graph_definition_callback(definition.callback)),
            (node, "callback", _graph_node_callback(node.callback)),
        ]
    )


def uninstall():
    """Put back cuda.core's own methods (exactly what each class held before :func:`install`). Idempotent:
    False if nothing was installed."""
    return _PATCHES.uninstall()


def is_installed():
    """Whether :func:`install` is in force."""
    return _PATCHES.is_installed()


@contextlib.contextmanager
def installed():
    """:func:`install` for the ``with`` block; on leaving, :func:`uninstall` if this block installed it."""
    mine = install()
    try:
        yield
    finally:
        if mine:
            uninstall()
