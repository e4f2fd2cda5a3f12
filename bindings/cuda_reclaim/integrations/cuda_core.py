"""cuda.core's host callbacks through cuda-reclaim: ``GraphDefinition.callback`` and ``GraphNode.callback`` (every
node kind's), and a C host function with user data for APIs that launch one on a stream.

cuda.core accepts two forms of host callback: a Python callable, which its own trampoline calls with the GIL
on CUDA's thread, and a ctypes ``CUhostFn`` pointer with ``user_data``, which CUDA calls as it is.

- :func:`host_call` gives the second form for one call on a stream (``cuLaunchHostFunc``, or an API that
  wraps it): cuda-reclaim's C trampoline and user data. CUDA's thread only hands the call over and waits,
  without the GIL, until a drain has run it (stream order), and the call runs in a drain.
- :func:`install` makes the Python-callable form of ``GraphDefinition.callback`` and ``GraphNode.callback``
  add the node in the form of :func:`cuda_reclaim.add_host_node_ordered` (each firing hands one call to a
  drain and waits, without the GIL, until a drain has run it) and return
  cuda.core's object for that node, so that the builder chain goes on as with cuda.core's own. cuda.core's
  files are not edited: its classes are compiled extension types, so their namespaces are written and
  CPython told with ``PyType_Modified``. :func:`uninstall` puts back cuda.core's own; :func:`installed` is
  both as a context manager. A ctypes pointer given by the caller goes to cuda.core unchanged.

While installed, a Python callable given to ``callback(fn)`` is called ``fn()`` each time the graph reaches
the node, in a cuda-reclaim drain (the automatic drain thread, an event loop's drain, or an explicit
:func:`cuda_reclaim.drain`), and the graph goes on past the node once the call has returned, as with
cuda.core's own: the graph's later nodes, and a ``stream.sync()`` after the launch, see what ``fn`` did. An
exception goes to ``sys.unraisablehook`` and the graph still finishes, as
with cuda.core's own trampoline (``noexcept with gil``). That holds for every exception of ``fn``, of a
graph's node and of a :func:`host_call` alike: a KeyboardInterrupt or SystemExit (raised in ``fn``, or a
Ctrl-C that lands in it while the main thread drains) goes to ``sys.unraisablehook`` too, and neither stops
the drain nor reaches the code that drains.

What differs from cuda.core's own:

- The call runs on the drain's thread, never on CUDA's, and CUDA's thread never takes the GIL. The drain
  needs the GIL to run the call that the stream waits for (a node's firing, a :func:`host_call`): a thread
  that waits for the stream must release the GIL while it waits (cuda.bindings, CuPy and ctypes release it
  around driver calls), as with cuda-reclaim's own ordered calls.
- Something must drain: ``callback(fn)`` raises RuntimeError (naming ``GraphDefinition.callback`` or
  ``GraphNode.callback``) while the automatic drain is ``"off"`` and no event loop drains
  (:func:`cuda_reclaim.asyncio.install`), as :func:`cuda_reclaim.add_host_node_ordered` does. While a
  firing waits, every host function of the context waits behind it; ``fn``, and anything a drain runs,
  must not wait for GPU work queued behind a firing that waits.
- ``GraphBuilder.callback`` (a host function launched into a stream capture) stays cuda.core's own:
  cuda-reclaim adds nothing to a graph under capture.
- The node's callable as cuda.core reports it (``HostCallbackNode.callback``) is not ``fn``.
- A ctypes pointer, or a call with ``user_data``, goes to cuda.core's own method: what the class held when
  :func:`install` first ran in the process (never a wrapper that leads back to the integration's).
- After :func:`cuda_reclaim.close` (and at exit) a firing runs nothing and the graph goes on.
"""

import ctypes

from . import _support

__all__ = ["host_call", "withdraw", "install", "uninstall", "is_installed", "installed"]

_PATCHES = _support.Patches()

# CUhostFn, void (*)(void*): the prototype cuda.core checks a ctypes callback against (host_call's pointer type).
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_FUNCTION_POINTER = HOST_FN.__mro__[1]  # the base class of every ctypes function pointer type


def host_call(stream, fn, /, *args, **kwargs):
    """``(pointer, user_data, future)`` for calling ``fn(*args, **kwargs)`` once, when ``stream`` reaches the
    point where CUDA is handed ``pointer`` and ``user_data`` (``cuLaunchHostFunc(stream, pointer, user_data)``,
    or a cuda.core API that takes a ctypes ``CUhostFn`` with ``user_data``). Every keyword is ``fn``'s. The
    call runs in a cuda-reclaim drain, in stream order: CUDA's thread waits, without the GIL, until the call
    has run, so the stream's later work sees its effects (the rules of
    :func:`cuda_reclaim.launch_host_func_ordered` apply: RuntimeError when no drain would run it). ``future``
    (a ``concurrent.futures.Future``) gets its result; an exception, a KeyboardInterrupt or SystemExit
    included, goes to ``sys.unraisablehook`` (and the future's result is None).

    ``pointer`` is a ctypes ``CUhostFn`` (``cuda_core.HOST_FN``) to cuda-reclaim's C trampoline, ``user_data`` an
    int. Hand the pair to CUDA exactly once, on ``stream``, and not into a graph capture; if it never gets
    there (the launch failed), call :func:`withdraw`. ``stream``: as :func:`cuda_reclaim.launch_host_func`.
    After :func:`cuda_reclaim.close`: a null pointer (false), user data 0 and a cancelled future: nothing to
    hand to CUDA. Starts the automatic drain, lazily. Any thread."""
    from cuda_reclaim import _ordered_calls

    if not callable(fn):
        raise TypeError(f"host_call(): fn must be callable, not {type(fn).__name__}")
    address, user_data, future = _ordered_calls.prepare_host_call(
        "host_call", stream, _support.reporting(fn), args, kwargs, ordered=True
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


def _add(function, graph, fn, dependencies):
    """The stream-ordered host node of ``fn`` (cuda_reclaim.add_host_node_ordered's, with errors that name the
    public `function`), as cuda.core's object for it."""
    from cuda_reclaim import _graph, _ordered_calls, _reclaim

    handle = _graph.add_node(
        function, graph, fn, (), dependencies, None, ordered=True,
        check=lambda: _ordered_calls.check_a_drain_runs(function),
    )
    if _reclaim.is_closed():
        _graph.warn_after_close(function, _graph.NODE_AFTER_CLOSE)
    return _node_of(graph, handle)


def _is_python_callable(fn, user_data):
    return user_data is None and callable(fn) and not isinstance(fn, _FUNCTION_POINTER)


@_PATCHES.replacement("callback")
def _definition_callback(self, fn, *, user_data=None):
    """GraphDefinition.callback while installed: a Python callable becomes a stream-ordered cuda-reclaim host
    node."""
    if _is_python_callable(fn, user_data):
        return _add("GraphDefinition.callback", self, fn, ())
    return _support.call_original(_PATCHES.own(type(self), "callback"), self, fn, user_data=user_data)


@_PATCHES.replacement("callback")
def _node_callback(self, fn, *, user_data=None):
    """GraphNode.callback while installed: a Python callable becomes a stream-ordered cuda-reclaim host node
    after this one."""
    if _is_python_callable(fn, user_data):
        return _add("GraphNode.callback", self.graph, fn, () if self.handle is None else (self,))
    return _support.call_original(_PATCHES.own(type(self), "callback"), self, fn, user_data=user_data)


def _documented(replacement, original):
    replacement.__doc__ = (
        "cuda.core's callback(fn, *, user_data=None); a Python callable is added as "
        "cuda_reclaim.add_host_node_ordered adds it and runs in a cuda-reclaim drain, not on CUDA's thread, "
        "before the graph goes on (cuda_reclaim.integrations.cuda_core).\n\n"
        + (getattr(original, "__doc__", None) or "")
    )


def install():
    """Make the Python-callable form of cuda.core's ``GraphDefinition.callback`` and ``GraphNode.callback`` add
    a stream-ordered cuda-reclaim host node (:func:`cuda_reclaim.add_host_node_ordered`). Idempotent: True if
    this call installed them, False if they were installed already. ImportError when cuda.core is missing."""
    graph = _support.import_library(
        "cuda.core.graph", "cuda_reclaim.integrations.cuda_core.install()", "cuda.core", "cuda-core"
    )
    definition, node = graph.GraphDefinition, graph.GraphNode
    mine = _PATCHES.install([(definition, "callback", _definition_callback), (node, "callback", _node_callback)])
    if mine:
        _documented(_definition_callback, _PATCHES.own(definition, "callback"))
        _documented(_node_callback, _PATCHES.own(node, "callback"))
    return mine


def uninstall():
    """Put back cuda.core's own methods (exactly what each class held before :func:`install`): True if this call did.
    False if nothing was installed, or while an :func:`installed` block is inside its ``with`` (the last block to
    leave puts them back)."""
    return _PATCHES.uninstall()


def is_installed():
    """Whether :func:`install` is in force."""
    return _PATCHES.is_installed()


def installed():
    """The integration in force for the ``with`` block (also in another thread's overlapping block); the last
    block to leave puts back the library's own methods, unless :func:`install` was called outside a block."""
    return _support.installed_block(_PATCHES, install)
