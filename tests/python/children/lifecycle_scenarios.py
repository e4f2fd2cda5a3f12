"""Child of test_reliability.py: the automatic drain's lifecycle at its edges, one scenario per run, named
by the first argument. Each prints what it saw, then "done"; a hang is caught by the test's timeout."""

import os
import signal
import sys
import threading
import time
import warnings

import cuda_reclaim
from cuda_reclaim import _auto

import scenario


def drain_threads():
    return [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]


def working_drain_threads():
    """Drain threads that may still drain: not past their loop, not handing over to a successor (the one
    leaving starts it, so both exist for that instant)."""
    working = 0
    for thread in drain_threads():
        names = scenario.frame_names(thread.ident)
        if "run" in names and "_drain_thread_leaves" not in names:
            working += 1
    return working


class Blocks:
    """Released by the drain thread: stays in its finalizer until `go` is set."""

    def __init__(self):
        self.entered = threading.Event()
        self.go = threading.Event()

    def __del__(self):
        self.entered.set()
        self.go.wait(60)


class Marker:
    def __init__(self):
        self.released = threading.Event()

    def __del__(self):
        self.released.set()


def hand_over_marker():
    marker = Marker()
    released = marker.released
    cuda_reclaim.defer_release(marker)
    del marker
    return released


def switch_back_on_while_the_stopped_thread_is_inside_a_release():
    # set_auto_drain("off") gives up waiting after its bound; "thread" again must not start a second thread
    # while the stopped one is still inside the release: that one starts its successor as it leaves.
    blocker = Blocks()
    entered, go = blocker.entered, blocker.go
    with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
        cuda_reclaim.defer_release(blocker)
        del blocker
    assert entered.wait(30)
    cuda_reclaim.set_auto_drain("off")  # returns after its bound: the thread is still in the finalizer
    cuda_reclaim.set_auto_drain("thread")
    released = hand_over_marker()  # a hand-over starts a drain thread before it returns, if one is to start
    print("threads while the stopped one is inside a release:", len(drain_threads()))
    most = [0]
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            most[0] = max(most[0], working_drain_threads())
            time.sleep(0.0005)  # the sampler's pace: it samples for as long as the hand-over runs

    sampler = threading.Thread(target=sample)
    sampler.start()
    go.set()
    assert released.wait(30), "nothing drained the hand-over made after the switch back on"
    assert hand_over_marker().wait(30), "no drain thread after the stopped one left"
    sampling.set()
    sampler.join()
    print("most threads draining at once:", max(most[0], working_drain_threads()))
    scenario.holds_within(lambda: len(drain_threads()) == 1)
    print("threads in the end:", len(drain_threads()))
    print("done", flush=True)


def toggles_from_a_finalizer_on_the_drain_thread():
    # Off and on again, many times, from a finalizer that the drain thread runs: one drain thread.
    counts = []

    class Toggles:
        def __del__(self):
            for _ in range(100):
                cuda_reclaim.set_auto_drain("off")
                cuda_reclaim.set_auto_drain("thread")
            counts.append(len(drain_threads()))

    with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
        cuda_reclaim.defer_release(Toggles())
    scenario.wait_until(lambda: counts, "the finalizer counted the threads")
    print("threads right after the toggles:", counts[0])
    assert hand_over_marker().wait(30)
    scenario.wait_until(lambda: len(drain_threads()) == 1, "one drain thread is left")
    print("threads in the end:", len(drain_threads()))
    print("done", flush=True)


def fork_while_the_drain_thread_is_inside_a_release():
    # The fork waits for the drain thread only so long, then goes ahead with it alive: the parent must
    # not start a second one next to it.
    blocker = Blocks()
    entered, go = blocker.entered, blocker.go
    with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
        cuda_reclaim.defer_release(blocker)
        del blocker
    assert entered.wait(30)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    cuda_reclaim.defer_release(object())  # a hand-over starts one before it returns, if nothing stops it
    print("parent threads after the fork:", len(drain_threads()))
    go.set()
    assert hand_over_marker().wait(30)
    scenario.wait_until(lambda: len(drain_threads()) == 1, "one drain thread is left")
    print("threads in the end:", len(drain_threads()))
    print("done", flush=True)


def ctrl_c_while_close_waits_for_the_drain_thread():
    main_ident = threading.main_thread().ident

    def main_thread_waits_in_close():
        # close()'s wait, not set_auto_drain()'s
        return {"stop_for_good", "_join_stopping_threads"} <= scenario.frame_names(main_ident)

    entered = threading.Event()

    class Slow:
        def __del__(self):  # on the drain thread: Ctrl-C once close() waits for this very thread
            entered.set()
            scenario.holds_within(main_thread_waits_in_close)
            signal.pthread_kill(main_ident, signal.SIGINT)  # to the waiting thread: its wait ends by EINTR
            # the KeyboardInterrupt reaches the main thread inside the wait, which it leaves
            scenario.holds_within(lambda: not main_thread_waits_in_close())

    with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
        cuda_reclaim.defer_release(Slow())
    assert entered.wait(30)  # the drain thread is inside the release: close() will wait for it
    try:
        cuda_reclaim.close()
    except KeyboardInterrupt:
        print("interrupted")
    print("closed:", cuda_reclaim.is_closed())
    print("hand-over accepted:", cuda_reclaim.defer_release(object()))
    print("done", flush=True)


def finalizers_that_a_drain_runs_wait_for_the_stopped_drain_thread_once():
    # The drain thread is inside a release that needs a lock the main thread holds around its drain().
    # Finalizers that this drain runs switch the mode and close: the first waits the join limit for the
    # stopped thread and gives up; the others must not wait again for what their caller holds.
    lock = threading.Lock()
    entered = threading.Event()
    ran = []

    class NeedsTheLock:
        def __del__(self):
            entered.set()
            with lock:
                pass

    class Switches:
        def __init__(self, mode):
            self.mode = mode

        def __del__(self):
            ran.append(self.mode)
            if self.mode == "close":
                cuda_reclaim.close()
            else:
                cuda_reclaim.set_auto_drain(self.mode)

    lock.acquire()
    with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
        cuda_reclaim.defer_release(NeedsTheLock())
    assert entered.wait(30)
    joins = []
    for thread in drain_threads():
        real_join = thread.join
        thread.join = lambda timeout=None, real_join=real_join: (joins.append(timeout), real_join(timeout))[1]
    for mode in ("off", "thread", "off", "thread", "close"):
        cuda_reclaim.defer_release(Switches(mode))
    cuda_reclaim.drain()  # the main thread runs the switches and the close
    print("switches run by the main thread:", len(ran))
    print("joins while the lock was held:", len(joins))
    print("closed:", cuda_reclaim.is_closed())
    lock.release()
    print("the stopped thread left:", scenario.holds_within(lambda: not _auto.is_thread_running()))
    print("done", flush=True)


def a_drain_thread_that_cannot_start(limit_text):
    # Thread.start() and the native thread both fail, as they do under a memory or pids limit; a later
    # hand-over, once they can, starts the thread. `limit_text`: how many starts fail.
    from cuda_reclaim import _reclaim

    failures = [int(limit_text)]
    name = "_start_joinable_thread" if hasattr(threading, "_start_joinable_thread") else "_start_new_thread"
    real = getattr(threading, name)
    real_native = _reclaim._NativeThread

    def refuses(*args, **kwargs):
        if failures[0] > 0:
            raise RuntimeError("can't start new thread")
        return real(*args, **kwargs)

    def native_refuses(target):  # tried after threading's refusal: one failed start of the drain thread
        if failures[0] > 0:
            failures[0] -= 1
            raise RuntimeError("can't start new thread: Resource temporarily unavailable")
        return real_native(target)

    setattr(threading, name, refuses)
    _reclaim._NativeThread = native_refuses
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = hand_over_marker()
        second = hand_over_marker()
    for warning in caught:
        print(f"{warning.category.__name__}: {warning.message}")
    print("mode:", cuda_reclaim.get_auto_drain(), "running:", _auto.is_thread_running())
    if failures[0] == 0:
        assert hand_over_marker().wait(30)
        assert first.wait(30) and second.wait(30)
        print("after a later hand-over, mode:", cuda_reclaim.get_auto_drain())
    print("done", flush=True)


def launch_from_a_finalizer_during_finalization(ending):
    # No launch earlier in the process, so launch_host_func makes its first Future here, when imports no
    # longer work. After the close at exit it must return the documented already-cancelled future, on an
    # exit by Ctrl-C (`ending` "ctrl-c") too.
    class LaunchesLate:
        def __del__(self):
            finalizing = sys.is_finalizing()
            try:
                future = cuda_reclaim.launch_host_func(0x8100, print)
                outcome = f"cancelled={future.cancelled()}"
            except Exception as error:  # noqa: BLE001 - the test reads what happened
                outcome = f"{type(error).__name__}: {error}"
            os.write(1, f"finalizing={finalizing} {outcome}\n".encode())

    global late
    late = LaunchesLate()
    late.cycle = late  # collected during finalization, after the atexit hooks
    print("done", flush=True)
    if ending == "ctrl-c":
        raise KeyboardInterrupt


def first_launch_at_exit(where):
    # The process's first hand-over is a launch made at exit: from an atexit hook registered after the
    # import (`where` == "atexit"), or from a non-daemon thread being joined at exit ("thread"). 3.12
    # refuses new threading threads then; the future must still complete.
    import atexit

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import fake_cuda

    fake = fake_cuda.load()
    fake.fake_cuda_start_threads(1)

    def launch():
        future = cuda_reclaim.launch_host_func(0x8200, lambda: 7)
        try:
            os.write(1, f"result {future.result(timeout=10)}\n".encode())
        except Exception as error:  # noqa: BLE001 - the test reads what happened
            os.write(1, f"{type(error).__name__}: {error}\n".encode())

    if where == "atexit":
        atexit.register(launch)
    else:
        def launches_once_the_main_program_ended():
            scenario.holds_within(lambda: not threading.main_thread().is_alive())
            launch()

        threading.Thread(target=launches_once_the_main_program_ended).start()
    print("done", flush=True)

def switch_off_while_the_drain_thread_works_through_a_backlog():
    # "off" means no drain thread touches the queue once set_auto_drain() returns: the thread stops before
    # its next item and what it had taken goes back to the front of the queue, in order.
    released = []

    class Slow:
        def __init__(self, index):
            self.index = index

        def __del__(self):
            released.append(self.index)
            time.sleep(0.002)  # a slow release: the switch lands while the thread works through the backlog

    # The backlog is queued before the thread starts: a drain that took an object while the main thread
    # still held its argument reference would drop only the queue's one, and the finalizer would run on
    # the main thread, out of the drain's order.
    count = 1500
    cuda_reclaim.set_auto_drain("off")
    for index in range(count):
        cuda_reclaim.defer_release(Slow(index))
    cuda_reclaim.set_auto_drain("thread")
    scenario.wait_until(lambda: len(released) >= 20, "the drain thread released 20")
    cuda_reclaim.set_auto_drain("off")
    at_return = len(released)
    scenario.wait_until(lambda: not _auto.is_thread_running(), "the stopped drain thread ended")
    print("released after the switch returned:", len(released) - at_return)
    print("pending is the rest:", cuda_reclaim.pending() == count - at_return)
    cuda_reclaim.drain()
    in_order = released == list(range(count))
    print("in order:", in_order)
    if not in_order:
        first = next((i for i, index in enumerate(released) if index != i), len(released))
        print("first out of order:", first, released[max(0, first - 2):first + 3], "switch at", at_return)
    print("done", flush=True)


def the_exception_that_ended_the_main_program_at_exit():
    # What the package's atexit hook reads (_python_compat.last_exception()) to tell an exit by Ctrl-C.
    import atexit

    from cuda_reclaim import _python_compat

    def report():
        os.write(1, f"last exception at exit: {_python_compat.last_exception()!r}\n".encode())

    atexit.register(report)
    print("done", flush=True)
    raise LookupError("ends the main program")


scenario.run(
    the_exception_that_ended_the_main_program_at_exit,
    switch_off_while_the_drain_thread_works_through_a_backlog,
    switch_back_on_while_the_stopped_thread_is_inside_a_release,
    toggles_from_a_finalizer_on_the_drain_thread,
    fork_while_the_drain_thread_is_inside_a_release,
    ctrl_c_while_close_waits_for_the_drain_thread,
    finalizers_that_a_drain_runs_wait_for_the_stopped_drain_thread_once,
    a_drain_thread_that_cannot_start,
    launch_from_a_finalizer_during_finalization,
    first_launch_at_exit,
)
