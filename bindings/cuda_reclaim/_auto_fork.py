"""The automatic drain across ``os.fork()``: the before-fork hook and the after-fork hooks of parent and child.

``_auto`` owns the state and registers these hooks (``_auto._install_process_hooks``, in the order its comments
give). The hooks read and write that state through the module (``_auto._fork_depth``, never a copy made at
import): the child's hook rebinds ``_auto._lock`` and ``_auto._stopping_threads``, and every reader looks them up in
``_auto`` when it runs. States and transitions: docs/design.md ("The lifecycle", "Fork").
"""

import re
import sys
import threading

from . import _auto, _reclaim
from ._auto_threads import _StateLock, current_drain_thread

# How long a fork waits for the drain thread to leave. Other libraries' before-fork hooks run before ours
# when they were registered after it (as logging's would: it takes its module lock across the fork): a
# finalizer on the drain thread that needs such a lock cannot return until the fork is over, so waiting
# for it without limit would hang the fork. Past the limit the fork goes ahead with the thread alive (it
# holds no state the child needs: it releases only with the GIL, which the forking thread holds).
_FORK_JOIN_LIMIT_SECONDS = 1.0


def _before_fork():
    # The child should start single-threaded (CPython 3.12+ warns about forking a multi-threaded process),
    # so stop ours and wait (bounded, see above) for it to leave. With an automatic drain on, release what
    # is queued now, here in the parent: references still queued at the fork are counted as abandoned in
    # the child (its copies of them stay alive there). With "off" the queue is left as the user left it.
    with _auto._lock.held():
        _auto._fork_depth += 1
        _auto._retire_locked()
        drain_now = _auto._mode != "off" and not _auto._closed
    _auto._join_stopping_threads(_FORK_JOIN_LIMIT_SECONDS)
    if drain_now:
        _reclaim.drain()


# When CPython's os.fork() counts the threads for its multi-threaded-process DeprecationWarning, relative to the
# parent's after-fork hooks. This is the one statement of that fact; other files point here.
# os_fork_impl (Modules/posixmodule.c) warns when the count is above 1. The count is the OS's where the OS tells it
# (Linux: the 20th space-separated field of the first 159 bytes of /proc/self/stat, read as C's atoi reads it, taken
# as told when at least 1; macOS: task_threads()), else threading's (len(_active) + len(_limbo)).
# - 3.10, 3.11: there is no such warning.
# - 3.12: warn_about_fork_with_threads() runs before PyOS_AfterFork_Parent(), which runs the hooks: a thread that a
#   hook starts is never counted.
# - 3.13.0 to 3.13.9, 3.14.0, 3.15.0a1: it runs after PyOS_AfterFork_Parent() (gh-116522, PR gh-116607: the warning
#   cannot be issued while the world is stopped), whichever count it takes: a thread that a hook starts makes every
#   fork warn.
# - 3.13.10, 3.14.1, 3.15.0a2 and later: get_number_of_os_threads() runs before PyOS_AfterFork_Parent() and the
#   warning uses its count (gh-137109, PR gh-141438, backports gh-141614 and gh-141639). Where the OS does not tell
#   (an OS other than Linux and macOS, no readable /proc, a process name with a space, which shifts the 20th field),
#   the warning still takes threading's count after the hooks.
# Where the count is taken after the hooks (_fork_counts_threads_after_hooks()), a fork on the main thread restarts
# the drain thread once os.fork() has returned (_DrainWorker._call_once_fork_returned, drain_fork_return.cc) instead
# of in the hook. That restart can be deleted once requires-python excludes 3.13.0-3.13.9, 3.14.0 and 3.15.0a1, if
# a warning is acceptable on the forks whose count the OS does not tell (CPython keeps that fallback).
# tests/python/test_cpython_fork_counts_threads.py fails where CPython departs from _fork_counts_threads_after_hooks().
_COUNTS_AFTER_HOOKS_EVERYWHERE = any(low <= sys.version_info < high for low, high in (
    ((3, 13), (3, 13, 10)), ((3, 14), (3, 14, 1)), ((3, 15), (3, 15, 0, "alpha", 2))))


# The thread count that os.fork() takes from Linux, given the first 159 bytes of /proc/self/stat: the 20th field split
# on spaces (a run of spaces as one), read as C's atoi reads it; 0 (no count) where there is none.
def _os_thread_count(stat_head):
    field = ([field for field in stat_head.split(b" ") if field][19:20] or [b""])[0]
    number = re.match(rb"\s*([+-]?[0-9]+)", field)
    return int(number.group(1)) if number else 0


# True where this interpreter's os.fork() counts the threads for its multi-threaded-process warning after the
# parent's after-fork hooks (the statement above), for a process whose /proc/self/stat begins with stat_head (read
# now when None).
def _fork_counts_threads_after_hooks(stat_head=None):
    if _COUNTS_AFTER_HOOKS_EVERYWHERE or sys.version_info < (3, 13) or sys.platform == "darwin":
        return _COUNTS_AFTER_HOOKS_EVERYWHERE
    if stat_head is None and sys.platform.startswith("linux"):
        try:
            with open("/proc/self/stat", "rb") as stat:
                stat_head = stat.read(159)
        except OSError:
            pass
    return _os_thread_count(stat_head or b"") < 1


def _after_fork_in_parent():
    # A fork on the main thread whose thread count os.fork() takes after the hooks (see the statement above): the
    # drain thread restarts through a pending call that runs as soon as os.fork() has returned to its caller
    # (_DrainWorker._call_once_fork_returned), before the caller's next bytecode, so releases that CUDA hands back
    # meanwhile wait for no later hand-over. Any other fork restarts it here. A fork on another thread does so even
    # where the count comes after the hooks: a pending call runs on the main thread only, which may be blocked in C
    # for as long as that fork's caller likes (a join), and releases must not wait for it. Such a fork warns anyway
    # on 3.12+: its process has two threads at the fork, the main one and the forking one.
    later = (
        not sys.is_finalizing()
        and threading.get_ident() == threading.main_thread().ident
        and _fork_counts_threads_after_hooks()
    )
    with _auto._lock.held():
        _auto._fork_depth = max(0, _auto._fork_depth - 1)
        failure = None if later else _auto._start_locked()
    # Called from this frame itself: the frame below it is the one that called os.fork().
    if later and not _reclaim._DrainWorker._call_once_fork_returned(_restart_after_fork):
        with _auto._lock.held():
            failure = _auto._start_locked()
    _auto._warn_start_failure(failure)


def _restart_after_fork():
    """The parent's restart after a fork on the main thread, once os.fork() has returned: starts the drain
    thread if the state still calls for one (a set_auto_drain() or close() since decides; one that started
    it already leaves nothing to do). Main thread, from a pending call."""
    with _auto._lock.held():
        failure = _auto._start_locked()
    _auto._warn_start_failure(failure)


def _after_fork_in_child():
    # cleanup/'s pthread_atfork handler already gave the child a fresh, open queue (what the parent had
    # queued is counted as abandoned). Only the forking thread exists here: if it is a drain thread (a
    # finalizer it ran called fork()), its loop leaves when that release returns. The drain thread
    # restarts lazily on the next Python-side hand-over, as in a new process; at once when a C API user
    # announced itself in the parent, since its native threads hand over without ever passing through Python.
    current = current_drain_thread()
    if current is not None:
        current.worker.stop()
    _auto._lock = _StateLock()
    _auto._worker = _auto._thread = None
    # Not the forking drain thread: its drain stops taking from the parent's storage after the reset, so a
    # new drain thread may serve the child's hand-overs while the finalizer that forked still runs.
    _auto._stopping_threads = []
    _auto._closed = False
    _auto._fork_depth = 0
    _auto._starting = False
    _auto._start_failure = None
    _reclaim._after_fork_in_child()
    if _auto._announced:
        with _auto._lock.held():
            failure = _auto._start_locked()
        _auto._warn_start_failure(failure)
