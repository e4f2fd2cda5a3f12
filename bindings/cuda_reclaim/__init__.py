"""cuda_reclaim — release Python objects safely from CUDA's own threads.

Native threads that Python does not own (CUDA's callback thread above all) hand references over with a
lock-free push that never touches Python; this package releases them later, only in contexts known to
be safe: an explicit :func:`drain`, the automatic drain (a Python thread), an event
loop (:mod:`cuda_reclaim.asyncio`), and a final drain from an ``atexit`` hook, after which the
queue is closed and whatever arrives is counted as leaked and never touched.

CUDA work keeps objects alive with :func:`keep_alive` (a graph: released once CUDA destroys the graph
and everything instantiated from it) and :func:`keep_alive_until` (a stream: released once the stream
reaches that point); both hand the references over from CUDA's thread, loading the driver at run time.
The same path carries calls: :func:`launch_host_func` (a stream host function; returns a Future) and
:func:`add_host_node` (a graph host node) run Python when CUDA gets there, in a drain, never on CUDA's
thread; :func:`launch_host_func_ordered` and :func:`add_host_node_ordered` also hold the stream (CUDA's
thread waits, without Python) until the drain has run the call; :mod:`cuda_reclaim.asyncio` awaits a
stream point on an event loop.

To know when CUDA is done, without polling: :func:`wait_handed_back` blocks until CUDA has handed back
everything attached before the call, :func:`flush` does that and then drains, and the :class:`Attachment`
that :func:`keep_alive` returns (also held by a :class:`NodeHandle`) waits for one attachment alone.

Counters (:func:`stats`, described by :data:`COUNTERS`) obey conservation laws (:func:`conserved`); set
``CUDA_RECLAIM_REPORT=1`` to have one line of them written to stderr at process exit, after Python is gone.

Conventions of every public function (here and in :mod:`cuda_reclaim.asyncio`):

- a timeout is a number of seconds (int or float); ``None`` waits for ever;
- a count (``max_items``) is an int; ``None`` means all, ``0`` none;
- handles (graphs, streams, nodes) are ints in ``[0, 2**64)`` or the cuda.core / cuda.bindings objects;
- a wrong type (``bool`` is not a number or a count) raises TypeError, a wrong value (NaN, negative)
  ValueError, and the message starts with the name of the function called: ``drain(): ...``.
"""

import collections as _collections
import operator as _operator
import os as _os
import types as _types

# First: _hand_back imports concurrent.futures' thread pool, whose exit and fork hooks must come before ours.
from . import _hand_back  # noqa: F401, I001 - the barrier's exit hook, registered at import
from . import _auto
from . import _graph
from . import _reclaim
from ._graph import DriverError, NodeHandle, add_host_node, keep_alive, keep_alive_until, launch_host_func
from ._ordered_calls import add_host_node_ordered, launch_host_func_ordered
from ._reclaim import ABI_VERSION, Attachment, fileno, is_closed, pending, trim
from ._version import __version__

__all__ = [
    "ABI_VERSION",
    "Attachment",
    "COUNTERS",
    "DriverError",
    "NodeHandle",
    "add_host_node",
    "add_host_node_ordered",
    "close",
    "conserved",
    "defer_release",
    "drain",
    "fileno",
    "flush",
    "get_auto_drain",
    "get_include",
    "hand_back_mark",
    "is_closed",
    "keep_alive",
    "keep_alive_until",
    "launch_host_func",
    "launch_host_func_ordered",
    "pending",
    "set_auto_drain",
    "show_config",
    "stats",
    "trim",
    "wait_handed_back",
]



class _Counter(_collections.namedtuple("Counter", ("kind", "source", "help", "description"))):
    """One key of :func:`stats`: ``kind`` ("counter", "gauge" or "high_water_mark"), ``source`` ("queue",
    "origin", "cuda" or "calls"), ``help`` (one short line) and ``description`` (what it counts, in full)."""

    __slots__ = ()


#: Every key of :func:`stats`, in its order, to a read-only record of its ``kind`` (``"counter"``: only grows;
#: ``"gauge"``: a level that goes up and down; ``"high_water_mark"``: the highest level seen), ``source``
#: (``"queue"``: the queue's counters, the C ABI's ``reclaim_stats``; ``"origin"``: ``handed_over`` split by
#: where its references came from; ``"cuda"``: what CUDA took and gave back; ``"calls"``: the calls of
#: :func:`launch_host_func` and :func:`add_host_node`), ``help`` (one short line) and ``description``. Defined
#: once, in the C ABI header (``RECLAIM_COUNTER_TABLE`` in ``cuda_reclaim/reclaim_abi.h``).
COUNTERS = _types.MappingProxyType({name: _Counter(*row) for name, *row in _reclaim._COUNTER_TABLE})

# Re-exported as the C function itself: an empty drain() costs one atomic load and no allocation.
drain = _reclaim.drain


def wait_handed_back(timeout=None, *, since=None):
    """Block until CUDA has handed back everything attached before this call; return True.

    "Attached" means: the objects of :func:`keep_alive` and :func:`keep_alive_until`, the calls of
    :func:`launch_host_func`, the functions of :func:`add_host_node`, and what other extensions count
    through the C API, whose attaching call returned before this one was entered. Attachments made while
    it waits never delay it. ``since``: a mark from :func:`hand_back_mark` to wait only for what was
    attached after the mark (``None``: everything). For a host call, handed back means CUDA ran its host
    function (the call is then queued; a drain runs it: :func:`flush` does both). Returns False when
    ``timeout`` seconds pass first (``None``: no limit) or once the queue is closed (:func:`close`, exit),
    also while waiting.

    The GIL is released while it waits; it sleeps until a hand-back that may end the wait wakes it (no
    polling). Any thread but CUDA's callback thread (a callback that waits for CUDA's own hand-backs would
    wait for itself). In a finalizer or call that a drain runs it does not block (what it waits for may be
    queued behind the caller): it says whether the wait is already over. A KeyboardInterrupt ends the wait
    with that exception.
    """
    return _reclaim.wait_handed_back(timeout, since)


def flush(timeout=None, *, since=None):
    """:func:`wait_handed_back`, then :func:`drain` everything queued; return how many this drain released
    (references released and calls run).

    The call for the end of a test, a benchmark iteration or before a leak check: what was attached
    before it (after the mark ``since``, if given) is released (and run) when it returns, unless
    ``timeout`` (seconds; ``None``: no limit) passed first or the queue is closed, in which case it still
    drains what is there (call :func:`wait_handed_back` to know which). What the automatic drain thread took
    a moment before is released by that thread, and :func:`stats` shows it in ``in_drain`` until it is. Any
    thread but CUDA's callback thread; the GIL is released while it waits.
    """
    _reclaim._checked_seconds("flush", "timeout", timeout)
    _reclaim._checked_since("flush", since)
    _reclaim.wait_handed_back(timeout, since)
    return drain()


def hand_back_mark():
    """A mark for ``since=`` (:func:`wait_handed_back`, :func:`flush`, ``asyncio.handed_back``): what is
    attached after this call counts from it, so that a wait given the mark waits for that alone. Marks only
    grow; a fork child goes on from its parent's. Any thread; never blocks (a brief lock among waiters)."""
    return _reclaim.hand_back_mark()



def defer_release(obj):
    """Hand one reference to ``obj`` over to the queue; it is released by a later drain.

    Any thread. Returns True if queued, False if the queue is already closed (the reference is then
    counted as ``leaked_after_close`` and never released, and a ``ResourceWarning`` says so, once per
    process, not while the interpreter is finalizing). Starts the automatic drain, lazily.
    """
    _auto.note_handover()
    if _reclaim.defer_release(obj):
        return True
    _graph.warn_after_close("defer_release", "the reference is never released (counted in leaked_after_close)")
    return False


def close():
    """Close the queue and release everything queued before the close; later hand-overs are counted as
    ``leaked_after_close`` and never touched. Idempotent.

    Stops the automatic drain for good first (waiting up to 2 s for the drain thread to leave, unless called
    on that thread, and only once for a thread from finalizers that a drain runs; past that the close goes
    ahead and the thread, already stopped, leaves when its release returns). The close comes before the final
    drain so that a reference handed over while it runs ends in exactly one place: queued before the close
    (released here) or after (counted).
    Returns the number of references released by this call. The atexit hook calls it for you.
    All or nothing: a KeyboardInterrupt during the wait still closes the queue, then propagates.
    Safe from a finalizer, on any thread; blocks at most the 2 s above plus the final drain.
    """
    try:
        _auto.stop_for_good()  # its wait for the drain thread can be interrupted (Ctrl-C)
    finally:
        released = _reclaim.close()  # the queue closes whatever interrupted the wait
    return released


def stats():
    """Return the counters as a dict of plain ints: every key of :data:`COUNTERS`, in its order; its record
    says what each counts and whether it is a counter (it only grows) or a level.

    One read of every counter (a single C call).
    """
    return _reclaim._all_stats()


def show_config(file=None):
    """Print what a bug report needs, as ``python -m cuda_reclaim`` does: the versions, the build, the
    Python and platform, the automatic drain, the ``CUDA_RECLAIM_*`` settings, the CUDA driver and its
    devices, the GPU libraries installed and the counters. To ``file`` (default: ``sys.stdout``).

    Reads only: no drain thread starts and no counter moves; the driver is loaded and initialized (cuInit,
    no context) to list its devices, as CuPy's ``show_config()`` does. Returns None.
    """
    if file is not None and not callable(getattr(file, "write", None)):
        raise TypeError(f"show_config(): file must be a text file (with write()) or None, not {type(file).__name__}")
    from . import _info

    _info.show(file)


def get_include():
    """Directory holding ``cuda_reclaim/cuda_reclaim.h``, the C API (capsule) header, for extensions.

    Add it to the include path: ``include_dirs=[cuda_reclaim.get_include()]`` (setuptools), or
    ``-I$(python -c "import cuda_reclaim; print(cuda_reclaim.get_include())")``. Cython code cimports
    ``cuda_reclaim.c_api`` (``c_api.pxd`` in this package, found on ``sys.path``) and needs the same
    include directory for the C compiler. See docs/c-api.md.
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


set_auto_drain = _auto.set_auto_drain
get_auto_drain = _auto.get_auto_drain


def conserved(counters=None):
    """True when the conservation law holds for ``counters`` (a :func:`stats` dict; default: now):
    ``handed_over == released + pending + in_drain + leaked_after_close + abandoned_after_fork`` (the
    buckets are read off the C ABI header's definition of the law, ``reclaim_stats_conserved``).

    Holds whenever nothing is in flight (a hand-over between its count and its enqueue, a drain between
    taking items and counting them); :func:`stats` re-reads until it holds, a bounded number of times.
    """
    if counters is None:
        counters = stats()
    elif not hasattr(counters, "keys") or not hasattr(counters, "__getitem__"):
        raise TypeError(f"conserved(): counters must be a stats() dict or None, not {type(counters).__name__}")
    else:
        missing = [key for key in ("handed_over", *_reclaim._CONSERVATION_BUCKETS) if key not in counters]
        if missing:
            raise ValueError(f"conserved(): counters lacks {', '.join(missing)}: pass a stats() dict")
        counters = {key: _count(counters[key], key) for key in ("handed_over", *_reclaim._CONSERVATION_BUCKETS)}
    return counters["handed_over"] == sum(counters[key] for key in _reclaim._CONSERVATION_BUCKETS)


def _count(value, key):
    """``value`` as a Python int, for :func:`conserved` (exact sums: a numpy count would sum in floating point)."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"conserved(): counters[{key!r}] must be an integer (a count of stats()), "
                        f"not {type(value).__name__}")
    value = _operator.index(value)
    if value < 0:
        raise ValueError(f"conserved(): counters[{key!r}] must not be negative, not {value}")
    return value


def __getattr__(name):
    # `cuda_reclaim.asyncio` works after a plain `import cuda_reclaim`, without importing asyncio (a
    # heavy import) into programs that never use it. Once imported, the submodule is an attribute of
    # this package and this hook is not consulted again.
    if name == "asyncio":
        import importlib

        return importlib.import_module(".asyncio", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
