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


def wait_until(predicate, limit=30):
    deadline = time.monotonic() + limit
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    return predicate()


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


def ctrl_c_while_close_waits_for_the_drain_thread():
    main_ident = threading.main_thread().ident

    def main_thread_waits_in_close():
        frame = sys._current_frames().get(main_ident)
        while frame is not None:
            if frame.f_code.co_name == "_join_retired":
                return True
            frame = frame.f_back
        return False

    class Slow:
        def __del__(self):  # on the drain thread: Ctrl-C once close() waits for this very thread
            wait_until(main_thread_waits_in_close)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the KeyboardInterrupt reaches the main thread inside the wait

    cuda_reclaim.defer_release(Slow())
    time.sleep(0.1)
    try:
        cuda_reclaim.close()
    except KeyboardInterrupt:
        print("interrupted")
    print("closed:", cuda_reclaim.is_closed())
    print("hand-over accepted:", cuda_reclaim.defer_release(object()))
    print("done", flush=True)


def launch_from_a_finalizer_during_finalization():
    # No launch earlier in the process, so launch_host_func makes its first Future here, when imports no
    # longer work. After the close at exit it must return the documented already-cancelled future.
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



scenario.run(
    ctrl_c_while_close_waits_for_the_drain_thread,
    launch_from_a_finalizer_during_finalization,
)
