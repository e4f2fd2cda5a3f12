"""One child interpreter of the shutdown torture suite: `python torture_child.py STRATEGY SCENARIO`.

Native threads (from `_torture`) keep handing Python objects to STRATEGY while this program ends the
way SCENARIO says. The shared record named by $TORTURE_SHM tells the harness what the threads saw.
"""

import os
import signal
import sys
import threading
import time

import _torture

# Started under `nohup ... &` or by a runner that ignores SIGINT, this process would inherit that, and the
# sigint scenario would measure the caller's shell instead of the strategy: back to Python's defaults.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)

# Native hand-over load: THREADS threads, ITEMS objects each, one call every ~DELAY_US (jittered 0..2x),
# so each thread fires for ~0.1 s: before, during and after the ~40 ms the main program runs.
THREADS = 4
ITEMS = 600
DELAY_US = 150
MAIN_MS = 40


class Allocates(_torture.Token):
    def __del__(self):
        self.garbage = [dict(a=i) for i in range(20)]


class Raises(_torture.Token):
    def __del__(self):
        raise ValueError("__del__ raises")


class Drains(_torture.Token):
    def __del__(self):
        _torture.drain()


def tokens(n, kinds=(_torture.Token,)):
    return [kinds[i % len(kinds)]() for i in range(n)]


def work(ms=MAIN_MS):
    """Ordinary Python work (allocation, calls), draining now and then as an event loop would."""
    deadline = time.monotonic() + ms / 1000
    rounds = 0
    while time.monotonic() < deadline:
        junk = [str(i) for i in range(200)]
        del junk
        rounds += 1
        if rounds % 20 == 0:
            _torture.drain()
        time.sleep(0.0005)


def spin(stop):
    while not stop():
        sum(range(1000))


# --- scenarios: each one ends the program its own way -------------------------------------------------


def normal():
    work()


def sys_exit():
    work()
    sys.exit(3)


def exception():
    work()
    raise RuntimeError("uncaught exception in the main thread")


def sigint():
    work()
    signal.raise_signal(signal.SIGINT)
    time.sleep(5)  # not reached: KeyboardInterrupt


def thread_exit():
    def exits():
        time.sleep(0.01)
        sys.exit(5)  # SystemExit in a thread ends only that thread

    def raises():
        time.sleep(0.02)
        raise RuntimeError("uncaught exception in a Python thread")

    threading.excepthook = lambda args: None  # keep stderr for what matters
    threading.Thread(target=exits).start()
    threading.Thread(target=raises).start()
    work(10)  # main ends while they are still running; threading._shutdown joins them


def daemon_threads():
    for _ in range(2):
        threading.Thread(target=spin, args=(lambda: False,), daemon=True).start()
    work()


def busy_main():
    stop = False
    helper = threading.Thread(target=spin, args=(lambda: stop,))
    helper.start()
    deadline = time.monotonic() + MAIN_MS / 1000
    while time.monotonic() < deadline:  # pure bytecode, GIL contended with the helper
        sum(range(1000))
    stop = True
    helper.join()


def del_effects():
    pass  # the difference is in what the native threads were given (see main)


def exit_burst():
    work()


def fork():
    work(20)
    pid = os.fork()
    if pid == 0:
        # The child: only this thread exists here; the parent's native threads go on firing there.
        _torture.start(tokens(200), 2, DELAY_US)
        work(20)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    _torture.note_fork_child(status)
    work(10)


SCENARIOS = {
    "normal": (normal, 0),
    "sys_exit": (sys_exit, 3),
    "exception": (exception, 1),
    "sigint": (sigint, -signal.SIGINT),
    "thread_exit": (thread_exit, 0),
    "daemon_threads": (daemon_threads, 0),
    "busy_main": (busy_main, 0),
    "del_effects": (del_effects, 0),
    "exit_burst": (exit_burst, 0),
    "fork": (fork, 0),
}


def main():
    strategy, scenario = sys.argv[1], sys.argv[2]
    _torture.setup(strategy, os.environ["TORTURE_SHM"])
    kinds = (Allocates, Raises, Drains) if scenario == "del_effects" else (_torture.Token,)
    _torture.start(tokens(THREADS * ITEMS, kinds), THREADS, DELAY_US)
    if scenario == "exit_burst":
        _torture.arm_exit_burst(tokens(2000), 4)
    SCENARIOS[scenario][0]()


if __name__ == "__main__":
    main()
