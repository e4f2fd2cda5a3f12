"""The automatic drain: a Python-owned thread (default), a gc callback, or nothing.

The thread waits on the wake-up fd with the GIL released and drains when work arrives. It starts
lazily, the first time a reference is handed over through a Python-side API, so a process that never
uses the queue has no extra thread. It is stopped and joined before interpreter finalization (through
``threading._register_atexit``, which runs before non-daemon threads are joined) so it never runs
while the interpreter finalizes, and around ``fork()`` so that the child starts single-threaded.
"""

import gc
import os
import threading
import time

from . import _reclaim

_MODES = ("thread", "gc", "off")

# How long the drain thread lingers after a drain that found work (see _run): bounds the extra release
# latency for references that arrive meanwhile, and the producer's eventfd writes to one per period.
_LINGER_SECONDS = 0.001

_lock = threading.RLock()
_mode = "thread"
_used = False  # a reference was handed over through a Python-side API in this process
_thread = None  # the running drain thread, or None
_stopping = False  # tells the drain thread to leave its loop
_shutting_down = False  # interpreter shutdown (or close()) began: never start again
_atexit_registered = False
_restart_after_fork = False
_gc_installed = False


def get_auto_drain():
    """Return the automatic drain mode: ``"thread"``, ``"gc"`` or ``"off"``."""
    return _mode


def set_auto_drain(mode):
    """Choose how queued references are released without an explicit :func:`drain`.

    ``"thread"`` (default): a Python thread wakes on the fd and drains; started lazily.
    ``"gc"``: drain from a ``gc.callbacks`` hook after each collection; no thread.
    ``"off"``: only explicit drains, event-loop drains and the final drain at exit.
    Returns the previous mode.
    """
    global _mode
    if mode not in _MODES:
        raise ValueError(f"auto-drain mode must be one of {', '.join(map(repr, _MODES))}, not {mode!r}")
    with _lock:
        previous = _mode
        _mode = mode
        if mode != "thread":
            _stop_thread()
        _set_gc_callback(mode == "gc" and not _shutting_down)
        if mode == "thread" and _used:
            _start_thread()
    return previous


def note_handover():
    """A reference is being handed over through a Python-side API: make sure someone will drain."""
    global _used
    if _thread is not None or _mode != "thread":
        _used = True
        return
    with _lock:
        _used = True
        _start_thread()


def is_thread_running():
    """True while the drain thread is alive (for tests and diagnostics)."""
    thread = _thread
    return thread is not None and thread.is_alive()


def _run():
    # On CPython 3.13+ the wake-up also schedules one bounded drain on the main thread (a pending call),
    # so a main thread busy in bytecode releases within microseconds instead of after the GIL switch
    # interval; whichever thread holds the GIL first drains.
    #
    # While references keep arriving, the thread lingers: its drain keeps the wake-up signal set, so
    # producers (CUDA's thread) skip the eventfd write, and it looks again after _LINGER_SECONDS. The
    # first drain that finds nothing clears the signal, and the thread goes back to blocking on the fd:
    # an idle process has an idle thread.
    while not _stopping:
        if _reclaim.wait(None, True) and not _stopping:
            while _reclaim._drain_and_linger() and not _stopping:
                _reclaim.wait(_LINGER_SECONDS)


def _start_thread():
    global _thread, _stopping, _atexit_registered
    if _mode != "thread" or _shutting_down or _thread is not None or _reclaim.is_closed():
        return
    if not _atexit_registered:
        try:
            threading._register_atexit(shutdown)
        except RuntimeError:  # "can't register atexit after shutdown": too late for a thread
            return
        _atexit_registered = True
    _stopping = False
    thread = threading.Thread(target=_run, name="cuda-reclaim-drain", daemon=True)
    thread.start()
    _thread = thread


def _stop_thread():
    """Stop and join the drain thread; True if one was running."""
    global _thread, _stopping
    thread = _thread
    if thread is None:
        return False
    _stopping = True
    _reclaim.notify()
    _thread = None
    if thread is threading.current_thread():
        # Called from a finalizer that the drain thread itself is running (close(), set_auto_drain()
        # or fork inside __del__): it leaves its loop when that drain returns; it cannot join itself.
        return True
    thread.join()
    # notify() left the fd readable; this drain clears it (and releases anything that arrived).
    _reclaim.drain()
    _wait_for_os_thread_exit(thread)
    return True


def _wait_for_os_thread_exit(thread, limit=1.0):
    # join() returns once the thread's Python state is gone; the OS thread ends a moment later. fork()
    # in CPython 3.12+ counts OS threads (/proc/self/stat) to decide on its DeprecationWarning, so wait
    # until the kernel no longer lists ours (bounded: never hang a fork over it).
    native_id = getattr(thread, "native_id", None)
    if native_id is None:
        return
    path = f"/proc/self/task/{native_id}"
    deadline = time.monotonic() + limit
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.0005)


def _gc_callback(phase, info):
    if phase == "stop":
        _reclaim.drain()


def _set_gc_callback(installed):
    global _gc_installed
    if installed and not _gc_installed:
        gc.callbacks.append(_gc_callback)
        _gc_installed = True
    elif not installed and _gc_installed:
        try:
            gc.callbacks.remove(_gc_callback)
        except ValueError:
            pass
        _gc_installed = False


def shutdown():
    """Stop every automatic drain for good (interpreter shutdown, or close())."""
    global _shutting_down
    with _lock:
        _shutting_down = True
        _stop_thread()
        _set_gc_callback(False)


def before_fork():
    global _restart_after_fork
    _lock.acquire()  # held across fork so the child never inherits it mid-change
    _reclaim.drain()
    _restart_after_fork = _stop_thread()


def after_fork_in_parent():
    global _restart_after_fork
    try:
        if _restart_after_fork:
            _start_thread()
        _restart_after_fork = False
    finally:
        _lock.release()


def after_fork_in_child():
    # The queue itself was reset by cleanup/'s pthread_atfork handler (what the parent had queued is
    # counted as abandoned). The drain thread does not exist here; it restarts lazily on the next
    # hand-over.
    global _lock, _thread, _restart_after_fork, _stopping
    _reclaim._after_fork_in_child()
    _lock = threading.RLock()
    _thread = None
    _stopping = False
    _restart_after_fork = False
