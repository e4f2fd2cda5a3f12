"""The automatic drain: a Python-owned thread (default), or nothing.

This module is the one owner of the automatic drain's lifecycle (which mode, whether a drain thread runs,
when it stops for good): it holds the state, runs the atexit hook and registers the process hooks (atexit,
fork, the C API's announce). The fork hooks live in ``_auto_fork``, which reads and writes this module's state
through the module. The drain protocol is one C++ loop, ``_reclaim._DrainWorker.run``; the state lock and the
drain threads are built in ``_auto_threads``. States, transitions, who may call what:
docs/design.md ("The automatic drain").

The rules that keep every entry point safe from a finalizer that a drain runs, on any thread (the state lock
held only for short changes, stopping threads joined outside it and never by a drain thread, never two drain
threads, the native thread when threading refuses one): docs/design.md ("The lifecycle").
"""

import os
import sys
import time
import warnings
from collections.abc import Callable

from . import _auto_fork, _python_compat, _reclaim
from ._auto_threads import (
    _DrainThread,
    _NativeDrainThread,
    _StateLock,
    current_drain_thread,
    wait_for_os_thread_exit,
)

_MODES = ("thread", "off")

_lock = _StateLock()  # guards the state below (see the module docstring for what it never covers)
_mode = "thread"
_used = False  # a reference was handed over through a Python-side API in this process
_announced = False  # a C API user announced itself: its native threads hand over without passing through Python
_closed = False  # close() began (explicitly or at exit): no drain thread starts again in this process
_fork_depth = 0  # os.fork() calls between their before- and after-hooks: no thread starts meanwhile
_starting = False  # a thread is being started (a re-entrant call during Thread.start() must not start one)
_worker = None  # the DrainWorker that should be running, or None
_thread = None  # its thread
_stopping_threads: list = []  # drain threads told to stop that may still be running: no successor starts meanwhile
_start_failure = None  # why the last start of a drain thread failed (text), None once one started


def get_auto_drain():
    """Return the automatic drain that really runs: ``"thread"`` or ``"off"``; ``"closed"`` once
    :func:`close` began (or the atexit hook's): no automatic drain runs again in this process. After
    ``set_auto_drain("thread")`` this says ``"off"`` while the drain thread cannot be started (a
    RuntimeWarning said why; the next hand-over tries again). Any thread; never blocks.
    """
    return "closed" if _closed or _reclaim.is_closed() else _running_mode()


def _running_mode():
    # The mode that runs, closed or not: "off" while the drain thread cannot be started.
    return "off" if _mode == "thread" and _start_failure is not None else _mode


# Called with the new mode after every set_auto_drain(), outside _lock, on the switching thread (which may
# be in a finalizer): cuda_reclaim.asyncio's, so that awaits pending under the drain thread get their
# loop's reader when it stops. Appended to at import time only.
_mode_subscribers: "list[Callable[[str], None]]" = []


def add_mode_subscriber(subscriber):
    """Call ``subscriber(mode)`` after every mode switch (for the package's own modules)."""
    _mode_subscribers.append(subscriber)


def set_auto_drain(mode):
    """Choose how queued references are released without an explicit :func:`drain`.

    ``"thread"`` (default): a Python thread wakes on the fd and drains; started lazily.
    ``"off"``: only explicit drains, event-loop drains and the final drain at exit.
    Returns the previous mode, as :func:`get_auto_drain` reported it before any close (never ``"closed"``).

    Switching away from ``"thread"`` stops the drain thread and, unless called on that thread or from a
    finalizer that interrupted cuda_reclaim on this one, waits up to 2 s for it to leave, holding nothing a
    finalizer needs (finalizers that a drain runs wait so for a thread only once). Past 2 s (a finalizer on it
    is blocked, e.g. on a lock this caller holds) the call returns anyway; the thread, already told to stop,
    leaves when that release returns, and no drain thread starts until it has left (the one leaving starts its
    successor if the mode is "thread" again by then): there is never more than one. If the thread cannot be
    started, a RuntimeWarning says why, :func:`get_auto_drain` says ``"off"`` and every later hand-over tries
    again; meanwhile only explicit, event-loop and exit drains release anything.
    Safe from a finalizer, on any thread; blocks at most the 2 s above.
    """
    global _mode
    if not isinstance(mode, str):
        raise TypeError(f"set_auto_drain(): the mode must be a str, not {type(mode).__name__}")
    mode = str.__str__(mode)  # a str subclass (a StrEnum member) is stored and compared as its plain value
    if mode not in _MODES:
        raise ValueError(
            f"set_auto_drain(): the mode must be one of {', '.join(map(repr, _MODES))}, not {mode!r}"
        )
    with _lock.held():
        previous = _running_mode()
        _mode = mode
        if mode != "thread":
            _retire_locked()
        failure = _start_locked()
    try:
        _warn_start_failure(failure)
        _join_stopping_threads()
    finally:  # a Ctrl-C in the wait: the switch is made, so the subscribers must still hear of it
        _tell_subscribers()
    return previous


def _tell_subscribers():
    mode = get_auto_drain()
    for subscriber in tuple(_mode_subscribers):
        subscriber(mode)


def note_handover():
    """A reference is being handed over through a Python-side API: make sure someone will drain."""
    global _used
    _used = True
    if _worker is not None or _mode != "thread" or _closed:
        return
    with _lock.held():
        failure = _start_locked()
    _warn_start_failure(failure)


def note_announce():
    """A C API user announced itself (the capsule's announce): its native threads will hand references over."""
    global _announced
    _announced = True
    note_handover()


def is_thread_running():
    """True while a drain thread is alive (for tests and diagnostics), stopping ones included."""
    with _lock.held():
        threads = [_thread, *_stopping_threads]
    return any(thread is not None and thread.is_alive() for thread in threads)


def _start_locked():
    """Start the drain thread if the state calls for one. Caller holds _lock.

    Returns the text of a RuntimeWarning for the caller to issue once it has let go of _lock (a warning
    runs user code: filters, showwarning), or None."""
    global _worker, _thread, _starting, _start_failure
    _stopping_threads[:] = [thread for thread in _stopping_threads if thread.is_alive()]
    if (
        _mode != "thread"
        or not _used
        or _closed
        or _fork_depth
        or _starting
        or _worker is not None
        # A stopping thread may still be inside a release: it starts the successor itself when it leaves.
        or _stopping_threads
        or _reclaim.is_closed()
        # A thread started now would never run (it ends at its first take of the GIL), and before 3.12
        # Thread.start() waits for it for ever: e.g. a fork child made by a finalizer during finalization.
        or sys.is_finalizing()
    ):
        return None
    _starting = True
    try:
        worker = _reclaim._DrainWorker()
        thread = _DrainThread(worker, _drain_thread_leaves)
        try:
            thread.start()
        except RuntimeError:  # refused at exit, or no resources: a native thread's start raises then too
            thread = _NativeDrainThread(worker, _drain_thread_leaves)
            thread.start()
        _worker, _thread = worker, thread
    except (RuntimeError, MemoryError, OSError) as error:  # a memory limit, a pids limit, no eventfd
        newly = _start_failure is None
        _start_failure = f"{type(error).__name__}: {error}"
        return _start_failure if newly else None
    finally:
        _starting = False
    _start_failure = None
    if _mode != "thread" or _closed or _fork_depth:  # changed by a finalizer while the thread started
        _retire_locked()
    return None


def _warn_start_failure(failure):
    """Issue the warning _start_locked() returned, if any; caller does not hold _lock."""
    if failure is None:
        return
    warnings.warn(
        f"cuda_reclaim: the automatic drain thread could not start ({failure}); until a later hand-over "
        "starts it, only explicit drain() calls, event-loop drains and the final drain at exit release "
        "anything (get_auto_drain() says 'off' meanwhile)",
        RuntimeWarning,
        stacklevel=3,
    )
    _tell_subscribers()


def _drain_thread_leaves(thread):
    """The last step of every drain thread, on it: if it had been stopped and the state calls for a drain
    thread again (a toggle, a fork, a switch that did not wait), start the successor now that this one
    will touch the queue no more."""
    global _worker, _thread
    with _lock.held():
        was_stopping = thread in _stopping_threads
        if was_stopping:
            _stopping_threads.remove(thread)
        if _thread is thread:  # it left by itself (the queue closed, or finalization began)
            _worker = _thread = None
        failure = _start_locked() if was_stopping else None
    _warn_start_failure(failure)


def _retire_locked():
    """Tell the running drain thread to stop; it is joined later, outside the lock. Caller holds _lock."""
    global _worker, _thread
    if _worker is None:
        return
    _worker.stop()
    _stopping_threads[:] = [thread for thread in _stopping_threads if thread.is_alive()]
    _stopping_threads.append(_thread)
    _worker = _thread = None


# How long set_auto_drain() and close() wait for a stopping drain thread. A finalizer runs wherever the
# interpreter happens to be, holding whatever that code holds (the import lock while a module imports, a
# library's lock), and the drain thread may be waiting for exactly that (os.fork() waits for the import
# lock): past the limit the caller goes on and the thread, already told to stop, leaves by itself when
# its release returns; a later call joins it.
_JOIN_LIMIT_SECONDS = 2.0


def _join_stopping_threads(limit=_JOIN_LIMIT_SECONDS):
    """Wait for stopping drain threads to end; a drain thread never waits (it may be one of them), and
    neither does a thread that holds _lock: a finalizer can run inside a section that holds it (the
    garbage collector runs finalizers at any allocation, e.g. inside note_handover()), and the thread it
    would join may be waiting for _lock in a finalizer of its own. Finalizers that a drain runs wait for
    a thread once: one they gave up on (it may wait for what their caller holds) they leave alone.

    Gives up after `limit` seconds (see _JOIN_LIMIT_SECONDS): a thread still inside a finalizer stays
    among the stopping threads and is joined by a later call. Returns True when none is left.
    """
    if current_drain_thread() is not None:
        return True
    if sys.is_finalizing() or _lock.is_owned():
        return not _stopping_threads  # finalizing: no other thread runs Python again, waiting could only time out
    in_drain = _reclaim._releasing_on_this_thread()
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        with _lock.held():
            waiting = [thread for thread in _stopping_threads if not (in_drain and thread.given_up)]
        if not waiting:
            return not _stopping_threads
        for thread in waiting:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                thread.given_up = thread.given_up or in_drain
                return False
            wait_for_os_thread_exit(thread)
        with _lock.held():
            _stopping_threads[:] = [thread for thread in _stopping_threads if thread not in waiting]


def stop_for_good():
    """Stop every automatic drain for this process (close(), or the atexit hook); wait for the thread."""
    global _closed
    with _lock.held():
        _closed = True
        _retire_locked()
    _join_stopping_threads()


def close_at_exit():
    """The atexit hook: stop the automatic drain, release everything queued, close the queue."""
    if isinstance(_python_compat.last_exception(), KeyboardInterrupt):
        # CPython ends this exit by re-raising SIGINT after finalization: no C exit handler will run.
        _reclaim._report_at_finalize()
    try:
        stop_for_good()  # its wait for the drain thread can be interrupted (Ctrl-C while a finalizer runs)
    finally:
        _reclaim.close()  # the final drain and the close happen whatever interrupted the wait


def _install_process_hooks():
    # Once per process, however often the package is imported or reloaded: the hooks are this module's and
    # _auto_fork's functions, and the flag lives on the extension module, which is never re-initialised.
    if getattr(_reclaim, "_process_hooks_installed", False):
        return
    import atexit

    # launch_host_func's Future, imported now rather than on first use: concurrent.futures brings logging,
    # whose fork hooks (its module lock, taken before a fork, released after) are then registered before
    # ours, so ours runs first before a fork. And no import comes later, when another thread may be between
    # its before- and after-fork hooks (ours waits for a drain thread there): it would be handed logging's
    # release without the acquire.
    import concurrent.futures  # noqa: F401

    # Registered at import, so atexit hooks registered later (which may destroy CUDA graphs and hand
    # references over) run before this one.
    atexit.register(close_at_exit)
    os.register_at_fork(
        before=_auto_fork._before_fork,
        after_in_parent=_auto_fork._after_fork_in_parent,
        after_in_child=_auto_fork._after_fork_in_child,
    )
    # The C API's announce (cuda_reclaim_import() in other extensions): they will hand references over.
    _reclaim._set_announce_hook(note_announce)
    _reclaim._process_hooks_installed = True


_install_process_hooks()
