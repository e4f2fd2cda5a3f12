"""Reliability: finalizers that call back into cuda_reclaim while the drain is stopping, lost wake-ups,
exit ordering against non-daemon threads, close() and blocked waiters, reloads, bad configuration.

Each scenario runs in a child interpreter under a timeout: a hang fails the test instead of the suite.
"""

import subprocess
import sys

import pytest

import exit_report
from conftest import run_child

pytest.importorskip("_native_producers")

# Generous: a scenario that works takes well under a second or two; only a hang reaches this.
HANG_LIMIT = 120


def run_scenario(code, **kwargs):
    kwargs.setdefault("timeout", HANG_LIMIT)
    try:
        return run_child(code, **kwargs)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the scenario hung (no exit within {expired.timeout} s); output so far:\n{expired.stdout}")


def assert_clean_exit(result, last_line="done"):
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == last_line, result.stdout
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    return report


# --- finalizers that hand over while the drain thread is being stopped ----------------------------------

_HANDS_OVER_IN_DEL = """
import os, sys, time, cuda_reclaim
class Child: pass
class Parent:
    def __del__(self):
        {pause}
        cuda_reclaim.defer_release(Child())
for _ in range({count}):
    cuda_reclaim.defer_release(Parent())
{ending}
print("done", flush=True)
"""


@pytest.mark.parametrize(
    "pause, count, ending",
    [
        pytest.param("", 50000, "", id="exit"),
        pytest.param("time.sleep(0.0005)", 2000, "time.sleep(0.05); cuda_reclaim.close()", id="close"),
        pytest.param(
            "time.sleep(0.0005)",
            2000,
            "time.sleep(0.05)\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)",
            id="fork",
        ),
    ],
)
def test_finalizer_on_the_drain_thread_hands_over_while_the_thread_is_stopped(pause, count, ending):
    code = _HANDS_OVER_IN_DEL.format(pause=pause, count=count, ending=ending)
    report = assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))
    # Every Parent and every Child it handed over before the close was released.
    assert report["released"] == 2 * count


def test_finalizer_on_the_drain_thread_toggles_keeps_alive_and_closes_while_exiting():
    code = """
    import cuda_reclaim
    class Busy:
        def __init__(self, i): self.i = i
        def __del__(self):
            cuda_reclaim.defer_release(object())
            if self.i % 97 == 0:
                cuda_reclaim.set_auto_drain("off"); cuda_reclaim.set_auto_drain("thread")
            if self.i == 4000:
                cuda_reclaim.close()
    for i in range(5000):
        cuda_reclaim.defer_release(Busy(i))
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


# --- lost wake-ups after the drain thread stops itself --------------------------------------------------

def test_after_a_finalizer_switches_the_drain_thread_off_later_work_still_wakes_the_fd():
    code = """
    import select, threading, time, cuda_reclaim, _native_producers
    from cuda_reclaim import _auto
    stopped = threading.Event()
    class SwitchesOff:
        def __del__(self):
            cuda_reclaim.set_auto_drain("off")
            stopped.set()
    # Enough work that the drain thread lingers (keeps the signal set) right before it stops.
    for _ in range(100):
        cuda_reclaim.defer_release(object())
    cuda_reclaim.defer_release(SwitchesOff())
    assert stopped.wait(30)
    deadline = time.monotonic() + 30
    while _auto.is_thread_running() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not _auto.is_thread_running()
    cuda_reclaim.drain()
    _native_producers.hand_over([object()], 1)          # like CUDA's thread
    readable, _, _ = select.select([cuda_reclaim.fileno()], [], [], 30)
    assert readable, "the push after the self-stop must make the fd readable"
    assert cuda_reclaim.drain() == 1
    cuda_reclaim.set_auto_drain("thread")               # a new thread starts and must wake for new work
    released = threading.Event()
    class Marker:
        def __del__(self): released.set()
    _native_producers.hand_over([Marker()], 1)
    assert released.wait(30), "the restarted drain thread released the new work"
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_toggling_off_and_on_from_a_finalizer_leaves_one_drain_thread():
    code = """
    import threading, time, cuda_reclaim
    from cuda_reclaim import _auto
    toggled = threading.Event()
    class Toggles:
        def __del__(self):
            cuda_reclaim.set_auto_drain("off")
            cuda_reclaim.set_auto_drain("thread")
            toggled.set()
    cuda_reclaim.defer_release(Toggles())
    assert toggled.wait(30)
    def drain_threads():
        return [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]
    deadline = time.monotonic() + 30
    while len(drain_threads()) != 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(drain_threads()) == 1, drain_threads()
    released = threading.Event()
    class Marker:
        def __del__(self): released.set()
    cuda_reclaim.defer_release(Marker())
    assert released.wait(30)
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_fork_from_a_finalizer_on_the_drain_thread_leaves_both_processes_draining():
    code = """
    import os, threading, time, cuda_reclaim
    from cuda_reclaim import _auto
    forked = threading.Event()
    child_pid = []
    class Forks:
        def __del__(self):
            pid = os.fork()
            if pid == 0:
                # The child: only this (drain) thread exists. Its loop must leave, and a new drain
                # thread must serve the child's own hand-overs.
                released = threading.Event()
                class Marker:
                    def __del__(self): released.set()
                ok = True
                def check():
                    nonlocal ok
                    cuda_reclaim.defer_release(Marker())
                    ok = released.wait(30)
                t = threading.Thread(target=check); t.start(); t.join()
                os._exit(0 if ok else 3)
            child_pid.append(pid)
            forked.set()
    cuda_reclaim.defer_release(Forks())
    assert forked.wait(30)
    _, status = os.waitpid(child_pid[0], 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    released = threading.Event()
    class Marker:
        def __del__(self): released.set()
    cuda_reclaim.defer_release(Marker())
    assert released.wait(30), "the parent's drain thread restarted after the fork"
    print("done", flush=True)
    """
    args = ("-W", "ignore::DeprecationWarning")  # forking from a non-main thread warns on 3.12+
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}, args=args))


# --- exit ordering against non-daemon threads ------------------------------------------------------------

def test_exit_does_not_hang_when_a_non_daemon_thread_waits_for_finalizers_to_free_slots():
    code = """
    import threading, time, cuda_reclaim as cr
    slots = threading.Semaphore(4)
    class Buffer:
        def __del__(self): slots.release()
    def worker():
        for i in range(200):
            slots.acquire(); cr.defer_release(Buffer()); time.sleep(0.001)
        print("done", flush=True)
    threading.Thread(target=worker).start()
    time.sleep(0.02)   # main returns while the worker still needs releases
    """
    report = assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))
    assert report["released"] == 200


# --- close() and waiters --------------------------------------------------------------------------------

@pytest.mark.parametrize("timeout", ["float('inf')", "1e6"])
def test_close_wakes_a_thread_blocked_in_drain_with_a_timeout(timeout):
    code = f"""
    import threading, time, cuda_reclaim
    cuda_reclaim.set_auto_drain("off")
    entered = threading.Event()
    result = []
    def waiter():
        entered.set()
        result.append(cuda_reclaim.drain(timeout={timeout}))
    t = threading.Thread(target=waiter); t.start()
    entered.wait()
    time.sleep(0.05)  # let it block in the wait (a waiter that has not blocked yet returns at once too)
    cuda_reclaim.close()
    t.join(30)
    assert not t.is_alive(), "close() must wake the waiter"
    assert result == [0], result
    assert cuda_reclaim.drain(timeout={timeout}) == 0, "a drain after close returns at once"
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


# --- reload ----------------------------------------------------------------------------------------------

def test_reload_does_not_register_the_process_hooks_twice():
    code = """
    import importlib, os, threading, cuda_reclaim, _native_producers
    from cuda_reclaim import _auto
    cuda_reclaim = importlib.reload(cuda_reclaim)
    cuda_reclaim = importlib.reload(cuda_reclaim)
    cuda_reclaim.defer_release(object())
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    assert _auto.is_thread_running(), "every fork restarts the parent's drain thread"
    released = threading.Event()
    class Marker:
        def __del__(self): released.set()
    _native_producers.hand_over([Marker()], 1)   # a push from a native thread: only the drain thread releases it
    assert released.wait(30)
    print("done", flush=True)
    """
    result = run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"})
    assert_clean_exit(result)
    assert result.stderr.count("cuda-reclaim: handed_over=") == 1, result.stderr


def test_the_exit_report_is_written_once_after_reloads():
    code = """
    import importlib, cuda_reclaim
    importlib.reload(cuda_reclaim)
    cuda_reclaim.defer_release(object())
    print("done", flush=True)
    """
    result = run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"})
    assert_clean_exit(result)
    assert result.stderr.count("cuda-reclaim: handed_over=") == 1, result.stderr


# --- configuration and reporting --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["2261669771489293824", "0", "-5", "12k", "16777217", ""])
def test_bad_reserved_capacity_is_a_clear_import_error(value):
    result = run_scenario("import cuda_reclaim", env={"CUDA_RECLAIM_RESERVED_CAPACITY": value})
    assert result.returncode == 1, result.stderr
    assert "ImportError" in result.stderr and "CUDA_RECLAIM_RESERVED_CAPACITY" in result.stderr
    assert "from 1 to 16777216" in result.stderr


def test_largest_reserved_capacity_is_accepted():
    code = "import cuda_reclaim; cuda_reclaim.defer_release(object()); print('done')"
    result = run_scenario(code, env={"CUDA_RECLAIM_RESERVED_CAPACITY": "16777216", "CUDA_RECLAIM_REPORT": "1"})
    assert_clean_exit(result)


@pytest.mark.parametrize("value, reported", [("1", True), ("TRUE", True), ("yes", True), ("On", True),
                                             ("0", False), ("false", False), ("", False), ("off", False)])
def test_report_setting_accepts_the_usual_spellings(value, reported):
    result = run_scenario("import cuda_reclaim; print('done')", env={"CUDA_RECLAIM_REPORT": value})
    assert result.returncode == 0, result.stderr
    assert ("cuda-reclaim: handed_over=" in result.stderr) == reported


def test_report_setting_that_is_not_understood_is_an_import_error():
    result = run_scenario("import cuda_reclaim", env={"CUDA_RECLAIM_REPORT": "please"})
    assert result.returncode == 1
    assert "CUDA_RECLAIM_REPORT" in result.stderr and "ImportError" in result.stderr


def test_exit_by_keyboard_interrupt_still_writes_the_report():
    code = """
    import cuda_reclaim
    for _ in range(10):
        cuda_reclaim.defer_release(object())
    print("done", flush=True)
    raise KeyboardInterrupt
    """
    result = run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"})
    assert result.returncode in (-2, 130), result.returncode  # killed by SIGINT, as CPython does
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes" and report["released"] == 10
    assert result.stderr.count("cuda-reclaim: handed_over=") == 1


def test_max_pending_is_never_below_pending():
    code = """
    import cuda_reclaim
    cuda_reclaim.set_auto_drain("off")
    for i in range(10):
        cuda_reclaim.defer_release(object())
        s = cuda_reclaim.stats()
        assert s["max_pending"] >= s["pending"] == i + 1, s
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_a_failed_keep_alive_starts_no_drain_thread():
    code = """
    import threading, cuda_reclaim
    from cuda_reclaim import _auto
    try:
        cuda_reclaim.keep_alive_until(0, object())
    except (cuda_reclaim.DriverError, TypeError, ValueError) as error:
        print("refused:", type(error).__name__)
    assert not _auto.is_thread_running()
    print("done", flush=True)
    """
    result = run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1", "CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"})
    assert "refused: DriverError" in result.stdout, result.stdout + result.stderr
    assert_clean_exit(result)


# --- fork and the automatic drain -----------------------------------------------------------------------

def test_fork_with_the_auto_drain_off_leaves_the_parent_queue_alone():
    code = """
    import os, cuda_reclaim
    cuda_reclaim.set_auto_drain("off")
    for _ in range(5):
        cuda_reclaim.defer_release(object())
    pid = os.fork()
    if pid == 0:
        s = cuda_reclaim.stats()
        os._exit(0 if s["pending"] == 0 and s["abandoned_after_fork"] == 5 else 4)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, status
    assert cuda_reclaim.pending() == 5, "off means only the drains you call: fork drained nothing"
    assert cuda_reclaim.drain() == 5
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_a_fork_child_of_a_closed_queue_gets_an_open_queue_and_an_automatic_drain():
    code = """
    import os, threading, cuda_reclaim
    cuda_reclaim.close()
    pid = os.fork()
    if pid == 0:
        released = threading.Event()
        class Marker:
            def __del__(self): released.set()
        ok = not cuda_reclaim.is_closed() and cuda_reclaim.defer_release(Marker())
        ok = ok and released.wait(30)
        os._exit(0 if ok else 5)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, status
    assert cuda_reclaim.is_closed()
    print("done", flush=True)
    """
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}))


def test_fork_does_not_hang_when_another_before_fork_hook_holds_a_lock_the_drain_thread_needs():
    # logging registers a before-fork hook that takes its module lock and holds it across the fork; when
    # logging is imported after cuda_reclaim, that hook runs first. A finalizer on the drain thread that
    # logs then waits for the lock while the fork waits for the drain thread: the fork must go ahead.
    code = """
    import os, threading, time, cuda_reclaim
    entered = threading.Event()
    lock = threading.Lock()
    os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release)
    class NeedsTheLock:
        def __del__(self):
            entered.set()
            time.sleep(0.2)            # the main thread forks meanwhile
            with lock:
                pass
    cuda_reclaim.defer_release(NeedsTheLock())
    assert entered.wait(30)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("done", flush=True)
    """
    args = ("-W", "ignore::DeprecationWarning")  # the fork may find the drain thread still alive
    assert_clean_exit(run_scenario(code, env={"CUDA_RECLAIM_REPORT": "1"}, args=args))
