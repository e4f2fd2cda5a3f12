"""Child of test_fork.py: one scenario per run, named by the first argument."""

import os
import time
import weakref

import scenario


def rests_in_its_wait(tid, deadline):
    """True once the thread `tid` of this process sleeps in the drain loop's wait: poll(2) (the kernel
    function it sleeps in, /proc's wchan) on more than one fd (the linger polls its stop fd alone; /proc's
    syscall gives the number, then the arguments, or "running"); False at `deadline` (time.monotonic())."""
    while time.monotonic() < deadline:
        with open(f"/proc/self/task/{tid}/wchan") as wchan, open(f"/proc/self/task/{tid}/syscall") as syscall:
            polls, fields = "poll" in wchan.read(), syscall.read().split()
        if polls and len(fields) > 2 and int(fields[2], 16) > 1:
            return True
        time.sleep(0.001)  # the pace of a poll with a deadline, on a state the kernel exposes
    return False


def fork_child_gets_a_fresh_queue_and_parent_keeps_draining():
    import _native_producers
    import cuda_reclaim
    from cuda_reclaim import _auto

    class P:
        pass

    cuda_reclaim.defer_release(P())  # auto drain thread starts
    assert _auto.is_thread_running()
    cuda_reclaim.set_auto_drain("off")  # keep parent's work queued, to see it abandoned in the child
    cuda_reclaim.set_auto_drain("thread")
    cuda_reclaim.drain()
    parent_objs = [P() for _ in range(50)]
    parent_refs = [weakref.ref(o) for o in parent_objs]
    _native_producers.hand_over(parent_objs, 2)
    del parent_objs
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        s = cuda_reclaim.stats()
        # _native_producers is a C API user (its import attached): the child's drain thread starts at once
        # (a_child_drains_what_a_c_api_users_native_threads_hand_over).
        ok = s["pending"] == 0 and not cuda_reclaim.is_closed()
        ok = ok and cuda_reclaim.conserved(s)
        import threading

        child = P()
        gone = threading.Event()
        ref = weakref.ref(child, lambda _: gone.set())
        cuda_reclaim.defer_release(child)
        del child
        ok = ok and _auto.is_thread_running()
        ok = ok and gone.wait(30) and ref() is None
        os.write(w, b"child-ok" if ok else repr(s).encode())
        os._exit(0)
    os.close(w)
    message = os.read(r, 1000).decode()
    os.waitpid(pid, 0)
    assert message == "child-ok", message
    assert all(ref() is None for ref in parent_refs), "the before-fork drain released the parent's work"
    assert _auto.is_thread_running(), "the parent's drain thread is restarted after fork"
    print("ok")


def a_child_drains_what_a_c_api_users_native_threads_hand_over():
    # A C API user's import attaches: the drain thread runs although nothing Python-side handed anything
    # over. In a fork child its native threads hand over without ever passing through Python, so the
    # child must start its drain thread by itself.
    import threading

    import _native_producers  # cuda_reclaim_import(): the capsule's attach
    from cuda_reclaim import _auto

    assert _auto.is_thread_running(), "the attach started the drain thread before the import returned"
    pid = os.fork()
    if pid == 0:
        released = threading.Event()

        class Marker:
            def __del__(self):
                released.set()

        _native_producers.hand_over([Marker()], 1)  # like CUDA's thread in the child
        os._exit(0 if released.wait(30) else 5)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's native hand-over was never released"
    print("ok")


def work_queued_at_a_raw_fork_is_abandoned_in_the_child():
    # libc's fork() through ctypes skips Python's before-fork hook (which would drain), so the queue is
    # non-empty at fork time: only cleanup/'s pthread_atfork reset acts in the child.
    import ctypes

    import cuda_reclaim

    cuda_reclaim.set_auto_drain("off")
    released = []

    class P:
        def __init__(self, i):
            self.i = i

        def __del__(self):
            released.append((os.getpid(), self.i))

    for i in range(10):
        cuda_reclaim.defer_release(P(i))
    pid = ctypes.CDLL(None).fork()
    if pid == 0:
        s = cuda_reclaim.stats()
        law = cuda_reclaim.conserved(s)
        cuda_reclaim.drain()
        mine = [i for (p, i) in released if p == os.getpid()]
        os.write(1, f"child {s['pending']} {s['abandoned_after_fork']} {law} {mine}\n".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert cuda_reclaim.drain() == 10, "the parent still owns and releases its work"
    assert sorted(i for (p, i) in released if p == os.getpid()) == list(range(10))
    print("parent ok", flush=True)


def a_fork_from_a_finalizer_that_a_drain_runs_is_single_threaded():
    # The drain thread is idle; a finalizer that the main thread's drain() runs forks: the fork hook stops
    # the thread and waits for it (the first such wait of a finalizer that a drain runs), so the process
    # forks with one thread. This hook, registered first, runs after the package's.
    import itertools
    import operator
    import sys

    threads_at_fork = []
    os.register_at_fork(before=lambda: threads_at_fork.append(len(os.listdir("/proc/self/task"))))
    import cuda_reclaim
    from cuda_reclaim import _auto, _reclaim

    import threading

    cuda_reclaim.defer_release(object())  # the drain thread starts, drains it, then sleeps on the fd
    assert _auto.is_thread_running()
    (drain_thread,) = [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]
    assert rests_in_its_wait(drain_thread.native_id, time.monotonic() + 30), "the drain thread never went idle"

    class Forks:
        def __del__(self):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

    # The push wakes the drain thread, which asks the main thread to step aside at its next bytecode: the
    # push and the main thread's drain() run back to back in C (no bytecode between them), and the switch
    # interval keeps the GIL with the main thread meanwhile. iter(holder.pop, None) hands the object to the
    # push without keeping a reference, so the drain's release runs the finalizer.
    holder = [None, Forks()]
    sys.setswitchinterval(30)
    _, released = itertools.chain(map(_reclaim.defer_release, iter(holder.pop, None)),
                                  map(operator.methodcaller("__call__"), [cuda_reclaim.drain]))
    sys.setswitchinterval(0.005)
    print("released by the main thread:", released)
    print("threads at the fork:", threads_at_fork)


def a_fork_waits_for_a_finalizer_that_takes_loggings_lock():
    # logging, imported by the user after the package: its fork hook (which holds logging's module lock
    # across the fork) must run after the package's, whose wait for the drain thread would otherwise let
    # a finalizer that logs block on that lock and the fork go ahead with the thread still there.
    import threading

    threads_at_fork = []
    os.register_at_fork(before=lambda: threads_at_fork.append(len(os.listdir("/proc/self/task"))))
    import cuda_reclaim
    import logging

    started = threading.Event()

    class Logs:
        def __del__(self):
            started.set()
            time.sleep(0.2)  # a busy finalizer: the main thread's fork lands while it runs
            logging.getLogger("cuda_reclaim.test.fork")  # takes logging's module lock

    with scenario.auto_drain_off():
        cuda_reclaim.defer_release(Logs())
    assert started.wait(30), "the drain thread never ran the finalizer"
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("threads at the fork:", threads_at_fork, flush=True)
    print("logger made:", "cuda_reclaim.test.fork" in logging.Logger.manager.loggerDict)


def forks_that_each_stop_a_running_drain_thread(count_text):
    # Each fork finds the drain thread running (the parent restarts it after the previous fork) and stops
    # it first. A before-fork hook registered before the import runs after the package's (before-hooks run
    # last-registered first): it reads the OS threads the child inherits, which CPython 3.12 counts for its
    # multi-threaded-fork warning. Prints how many forks found more than one.
    import threading

    def threads_now():
        with open("/proc/self/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[17])  # num_threads, proc(5)

    crowded_forks = []
    os.register_at_fork(before=lambda: crowded_forks.append(threads_now()) if threads_now() > 1 else None)

    import cuda_reclaim
    from cuda_reclaim import _auto

    class P:
        pass

    try:
        os.close(os.pidfd_open(os.getpid(), os.O_EXCL))  # PIDFD_THREAD: Linux 6.9+
        thread_pidfds = "yes"
    except (AttributeError, OSError):
        thread_pidfds = "no"
    count = int(count_text)
    for _ in range(count):
        cuda_reclaim.defer_release(P())
        assert _auto.is_thread_running() and threading.active_count() == 2
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    print(f"forks {count} multi-threaded {len(crowded_forks)} thread pidfds {thread_pidfds}", flush=True)


def forks_on_the_main_thread_with_the_drain_thread_running(count_text):
    # Each fork, on the main thread, finds the drain thread running (a C API user's import started it, and the
    # parent restarts it after each fork, once os.fork() has returned where CPython counts the threads for the
    # multi-threaded-fork DeprecationWarning after the parent's after-fork hooks: _auto_fork says where). A
    # warning is recorded, not turned into an error (os.fork() clears the error an error filter makes of it). An
    # after-fork hook registered after the import runs after the package's and runs Python code there. After each
    # fork a native thread of the C API user hands an object over, which passes through no Python hand-over: the
    # restarted drain thread releases it.
    import threading
    import warnings

    import _native_producers  # cuda_reclaim_import(): the capsule's attach starts the drain thread
    from cuda_reclaim import _auto

    later_hook_calls = []

    def square(number):
        return number * number

    def later_hook():  # calls and loops: eval-breaker checks inside os.fork(), in frames of their own
        later_hook_calls.append(sum(square(number) for number in range(1000)))

    os.register_at_fork(after_in_parent=later_hook)
    count = int(count_text)
    running_as_fork_returned = 0
    released_after_fork = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(count):
            assert _auto.is_thread_running() and threading.active_count() == 2
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            running_as_fork_returned += _auto.is_thread_running()
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            released = threading.Event()

            class Marker:
                def __del__(self):
                    released.set()

            _native_producers.hand_over([Marker()], 1)  # like CUDA's thread
            released_after_fork += released.wait(30)
    warned = [str(w.message) for w in caught if "multi-threaded" in str(w.message)]
    print("later hook calls:", len(later_hook_calls))
    print("multi-threaded-fork warnings:", len(warned), *warned[:1])
    print("drain thread running as os.fork() returned:", running_as_fork_returned)
    print("native hand-overs released after the fork:", released_after_fork, flush=True)


def a_fork_on_another_thread_while_the_main_thread_waits_in_a_join():
    # The main thread runs no Python code until the join returns; the forking thread's C API hand-over after
    # the fork passes through no Python hand-over: the drain thread must be running again by then.
    import threading

    import _native_producers  # cuda_reclaim_import(): the capsule's attach starts the drain thread

    released_in_time = []

    def forks():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        released = threading.Event()

        class Marker:
            def __del__(self):
                released.set()

        _native_producers.hand_over([Marker()], 1)  # like CUDA's thread
        released_in_time.append(released.wait(30))

    forker = threading.Thread(target=forks)
    forker.start()
    forker.join()
    print("released while the main thread waits:", released_in_time == [True], flush=True)


def a_later_after_fork_hook_switches_off_then_closes():
    # After-fork hooks registered after the import run after the package's, inside os.fork(): what they switch
    # holds once os.fork() has returned (the drain thread restarts then only if the state still calls for it).
    import cuda_reclaim
    from cuda_reclaim import _auto

    class P:
        pass

    in_later_hook = []
    os.register_at_fork(after_in_parent=lambda: in_later_hook and in_later_hook.pop()())
    for action in ((lambda: cuda_reclaim.set_auto_drain("off")), cuda_reclaim.close):
        cuda_reclaim.set_auto_drain("thread")
        cuda_reclaim.defer_release(P())
        assert _auto.is_thread_running()
        in_later_hook.append(action)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        what = "switched off" if cuda_reclaim.get_auto_drain() == "off" else "closed"
        print(f"after a fork whose later hook {what}:", cuda_reclaim.get_auto_drain(), _auto.is_thread_running())


if __name__ == "__main__":
    scenario.run(
        a_fork_on_another_thread_while_the_main_thread_waits_in_a_join,
        a_later_after_fork_hook_switches_off_then_closes,
        forks_on_the_main_thread_with_the_drain_thread_running,
        forks_that_each_stop_a_running_drain_thread,
        fork_child_gets_a_fresh_queue_and_parent_keeps_draining,
        a_child_drains_what_a_c_api_users_native_threads_hand_over,
        work_queued_at_a_raw_fork_is_abandoned_in_the_child,
        a_fork_from_a_finalizer_that_a_drain_runs_is_single_threaded,
        a_fork_waits_for_a_finalizer_that_takes_loggings_lock,
    )
