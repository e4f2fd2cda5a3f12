"""The parts the automatic drain (``_auto``) is built from: its state lock and the drain threads.

Nothing here holds state of the automatic drain: ``_auto`` owns which thread runs and when it stops. A drain
thread runs one ``_reclaim._DrainWorker``, then calls the ``on_leave`` it was made with, on itself.
"""

import os
import select
import sys
import threading

from . import _python_compat, _reclaim


class _StateLock:
    """A re-entrant lock that, once the interpreter is finalizing, waits for nobody.

    From then on CPython ends (3.10-3.13) or hangs (3.14) every other thread that tries to take the GIL
    back, so a thread that holds this lock at that point never runs again and never releases it: a
    finalizer that the garbage collector runs during finalization (and that toggles the drain, say) would
    wait for it forever. The one thread still running Python takes the lock if it is free, and otherwise
    goes ahead without it: nobody else can touch the state any more.

    Used as ``with _lock.held():``. Until finalization that is the RLock itself, whose C ``__enter__`` takes
    it with no Python code between the acquire and the with block: a KeyboardInterrupt (a signal handler
    runs between bytecodes) cannot land after the acquire and before the block's exit is armed, which would
    leave the lock held for good.
    """

    def __init__(self):
        self._lock = threading.RLock()

    def held(self):
        """A context manager holding the lock (see the class docstring)."""
        if sys.is_finalizing():
            return _TakenIfFree(self._lock)
        return self._lock

    def is_owned(self):
        """True when the calling thread holds the lock."""
        return _python_compat.rlock_is_owned(self._lock)


class _TakenIfFree:
    """The lock during finalization: taken if it is free, otherwise not waited for."""

    def __init__(self, lock):
        self._lock = lock
        self._taken = False

    def __enter__(self):
        self._taken = self._lock.acquire(blocking=False)
        return self

    def __exit__(self, *exc_info):
        if self._taken:
            self._lock.release()
        return False


_drain_local = threading.local()  # .thread: the drain thread this thread is (marks drain threads)


def current_drain_thread():
    """The drain thread object of the calling thread, or None when it is not a drain thread."""
    return getattr(_drain_local, "thread", None)


def _run_drain_loop(thread, on_leave):
    # The body of every drain thread, threading's or native: the loop, then the hand-off to a successor.
    _drain_local.thread = thread
    try:
        thread.worker.run()
    finally:
        on_leave(thread)


class _DrainThread(threading.Thread):
    """A thread running one DrainWorker (drain threads never join each other)."""

    given_up = False  # a finalizer that a drain runs waited past the limit: no such finalizer waits again

    def __init__(self, worker, on_leave):
        super().__init__(name="cuda-reclaim-drain", daemon=True)
        self.worker = worker
        self._on_leave = on_leave

    def run(self):
        _run_drain_loop(self, self._on_leave)


class _NativeDrainThread:
    """The same loop on a native thread that attaches by itself (PyThreadState_EnsureFromView on 3.15+,
    PyGILState_Ensure before; see bindings/drain_native_thread.h), for when threading refuses a new
    thread. 3.12 refuses every one from the start of Py_FinalizeEx (a first hand-over from a non-daemon thread
    being joined, or from an atexit hook, would find nobody draining); a refusal for want of resources
    fails here too, and _auto reports it.
    PyGILState_Ensure works until runtime finalization, which comes after the atexit hooks; the atexit
    hook joins it (with the GIL released, bounded) before it closes the queue. Same interface as the
    threading one where _auto uses it: start, join, is_alive, worker, native_id, given_up."""

    name = "cuda-reclaim-drain"
    native_id = None  # nothing to wait for in /proc: fork is no concern at exit
    given_up = False

    def __init__(self, worker, on_leave):
        self.worker = worker
        self._on_leave = on_leave
        self._native = None

    def start(self):
        self._native = _reclaim._NativeThread(lambda: _run_drain_loop(self, self._on_leave))

    def join(self, timeout=None):
        self._native.join(timeout)

    def is_alive(self):
        return self._native is not None and self._native.is_alive()


# PIDFD_THREAD of <linux/pidfd.h> (Linux 6.9+): pidfd_open() of a thread rather than a process. It is O_EXCL's
# value; os has no name for it.
_PIDFD_THREAD = os.O_EXCL


def wait_for_os_thread_exit(thread, limit=1.0):
    """After ``thread.join()``: wait (at most ``limit`` seconds) until the kernel has reaped the OS thread.

    join() returns once the thread's Python state is gone (3.10-3.12) or its pthread_join returned (3.13+);
    the kernel drops the thread from the process's thread count a moment later, and fork() in CPython
    3.12+ warns when that count (/proc/self/stat) is above one. The event is a thread pidfd, which turns
    readable as the thread is reaped. Without one (a kernel before 6.9, or not Linux) this returns at once
    and a fork in that window may warn: no polling stands in for the event. Any thread but ``thread``;
    blocks up to ``limit``; allocates a descriptor while it waits.
    """
    native_id = getattr(thread, "native_id", None)
    pidfd_open = getattr(os, "pidfd_open", None)
    if native_id is None or pidfd_open is None:
        return
    try:
        pidfd = pidfd_open(native_id, _PIDFD_THREAD)
    except OSError:  # ESRCH: reaped already; EINVAL: no thread pidfds in this kernel
        return
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(limit * 1000)
    finally:
        os.close(pidfd)

