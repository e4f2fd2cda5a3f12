"""The automatic drain across ``os.fork()``: the before-fork hook and the after-fork hooks of parent and child.

``_auto`` owns the state and registers these hooks (``_auto._install_process_hooks``, in the order its comments
give). The hooks read and write that state through the module (``_auto._fork_depth``, never a copy made at
import): the child's hook rebinds ``_auto._lock`` and ``_auto._stopping_threads``, and every reader looks them up in
``_auto`` when it runs. States and transitions: docs/design.md ("The lifecycle", "Fork").
"""

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


# CPython 3.13 counts the threads for os.fork()'s multi-threaded-process DeprecationWarning after the parent's
# after-fork hooks (3.12 before them): a drain thread started by the hook would make every fork warn. Later
# patch releases count the OS's threads before the hooks where the OS tells, and still count after them
# where it does not; so from 3.13 on the main thread restarts the drain thread once os.fork() has returned.
_FORK_COUNTS_THREADS_AFTER_HOOKS = sys.version_info >= (3, 13)


def _after_fork_in_parent():
    # A fork on the main thread: the drain thread restarts through a pending call that runs as soon as
    # os.fork() has returned to its caller (_DrainWorker._call_once_fork_returned), before the caller's next
    # bytecode, so releases that CUDA hands back meanwhile wait for no later hand-over. A fork on another thread
    # restarts it here: a pending call runs on the main thread only, which may be blocked in C for as long as
    # that fork's caller likes (a join), and releases must not wait for it. Such a fork warns anyway on 3.12+:
    # its process has two threads at the fork, the main one and the forking one.
    with _auto._lock.held():
        _auto._fork_depth = max(0, _auto._fork_depth - 1)
        later = (
            _FORK_COUNTS_THREADS_AFTER_HOOKS
            and not sys.is_finalizing()
            and threading.get_ident() == threading.main_thread().ident
        )
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
