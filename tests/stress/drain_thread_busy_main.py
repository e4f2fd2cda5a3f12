"""The drain thread against a main thread that holds the GIL (bindings/drain_worker.cc, drain_step_aside.cc).

When taking the GIL was contended, the drain thread drains without lingering and goes back to poll(2):
then the next push must be an empty→non-empty edge that writes the eventfd, or it would never be
released (nobody lingers for it). When the main thread alternates bytecode and short sleeps, the loop
switches between that and the linger, whose end looks at the queue without the GIL. Checked here, only by
waiting for conditions (a generous deadline guards against a hang; nothing is timed):

  1. a steady stream of native pushes is released completely while the main thread runs bytecode;
  2. afterwards, still busy, the signal is settled: the fd is quiet, and one more push writes the eventfd
     and is released (a lost wake-up would hang here);
  3. the same with a main thread that alternates bytecode and sleeps (contended and free acquisitions);
  4. idle: the drain thread blocks in poll(2): no context switch at all while nothing is pushed;
  5. stopped, it leaves the signal settled: a push stays pending with the fd readable, drain() gets it.
  6. (3.13+) with a switch interval of 30 s, a main thread in bytecode still lets the drain thread in:
     the drain thread's pending call makes it step aside, so a push is released while the main thread
     spins (on 3.10-3.12.1 the call does not reach a main thread that never blocks promptly: skipped
     before 3.13); also
     with every CPU crowded by spinning processes, where the drain thread woken by the step-aside may
     wait milliseconds for a core: the main thread must wait for it, not for a fixed slice.
  7. (every version) with a switch interval of 30 s, a main thread that runs bytecode and gives the GIL
     up for an instant now and then (as an event loop's select(0) between callbacks does, or a library
     call that releases the GIL around a few instructions) lets the drain thread in through the
     step-aside: each re-take of the GIL counts as a switch for a waiting thread, whose wait then never
     ends in a drop request, so without the call the drain thread could get in only by winning the GIL in
     one of those instants. Here the instant has nothing in it (the GIL is taken straight back), so it
     rarely wins: each push must be released, and, counted over all pushes, after a median of at most
     MAX_MEDIAN_INSTANTS instants (without the call 3.12.1 needs several times more: docs/benchmarks.md;
     with it, every version gives 1: the call reaches the main thread at its next re-take of the GIL on
     3.10-3.12.1, and at once on 3.13+). Instants are counted, not time, so a slow machine changes
     nothing but the run time.

Exits 0 when every check holds; prints the failed check and exits 1 otherwise.

    python drain_thread_busy_main.py [--pushes 3000] [--rounds 3] [--crowded-pushes 300]
                                     [--brief-release-pushes 100]
"""

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time

import cuda_reclaim
from cuda_reclaim import _auto, _reclaim

import _native_producers

DEADLINE_S = 120  # a hang guard only


class Payload:
    pass


def busy_until(condition, what):
    """Run bytecode (holding the GIL, never blocking) until condition()."""
    deadline = time.monotonic() + DEADLINE_S
    i = 0
    while not condition():
        i += 1
        if i % 4096 == 0 and time.monotonic() > deadline:
            raise AssertionError(f"hang: {what}")


def mixed_until(condition, what):
    """Alternate bytecode and short sleeps (the GIL is contended, then free) until condition()."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"hang: {what}"
        spin_until = time.perf_counter() + 0.003
        while time.perf_counter() < spin_until:
            pass
        time.sleep(0.0005)  # the behaviour under test: the main thread gives the GIL up for a while


def sleep_until(condition, what):
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"hang: {what}"
        time.sleep(0.001)  # the pace of a poll with a deadline, on the package's state


def released():
    return cuda_reclaim.stats()["released"]


def stream(pushes, delay_us, wait):
    """Native threads push `pushes` fresh objects `delay_us` apart; `wait` runs the main thread until all
    are released. Then, with the same main thread, checks that the signal is settled."""
    before = released()
    _native_producers.hand_over_detached([Payload() for _ in range(pushes)], 2, delay_us)
    wait(lambda: released() - before == pushes, f"{pushes} pushes released")
    wait(lambda: cuda_reclaim.pending() == 0 and not _reclaim.wait(0), "signal settled after the stream")

    # The stream is over: the next push must write the eventfd (an edge), and the thread must release it.
    def push_is_an_edge_and_released():
        writes = cuda_reclaim.stats()["eventfd_writes"]
        start = released()
        _native_producers.hand_over([Payload()])
        edge = cuda_reclaim.stats()["eventfd_writes"] == writes + 1
        wait(lambda: released() == start + 1, "a single push after the stream released")
        return edge

    wait(push_is_an_edge_and_released, "a push after the stream is an edge")


MAX_SPINNERS = 64  # a large host is crowded enough by these; hundreds of processes would only cost time


@contextlib.contextmanager
def crowded_cpus(per_cpu):
    """`per_cpu` spinning processes for every CPU this process may run on (at most MAX_SPINNERS), for the
    duration; every one started is stopped, also when starting the next one fails."""
    spinners = []
    try:
        for _ in range(min(MAX_SPINNERS, per_cpu * len(os.sched_getaffinity(0)))):
            spinners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def push_released_while_spinning(what):
    start = released()
    _native_producers.hand_over([Payload()])
    deadline = time.monotonic() + 10.0  # a third of the switch interval
    while released() == start:
        assert time.monotonic() < deadline, f"the busy main thread did not step aside for the drain thread ({what})"


def main_thread_steps_aside(crowded_pushes):
    """6: without the step-aside call, a drain thread would wait the whole switch interval (30 s here)."""
    if sys.version_info < (3, 13):
        print("drain_thread_busy_main: check 6: before 3.13 the step-aside does not reach a main thread that "
              "never blocks promptly (skipped)", flush=True)
        return
    previous = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        for _ in range(5):
            push_released_while_spinning("idle machine")
        with crowded_cpus(per_cpu=4):
            for _ in range(crowded_pushes):
                push_released_while_spinning("crowded CPUs")
    finally:
        sys.setswitchinterval(previous)


MAX_MEDIAN_INSTANTS = 4


def run_and_give_the_gil_up_briefly_until(condition, what):
    """Alternate 1 ms of bytecode with giving the GIL up for an instant until condition(), for at most
    10 s (a third of the switch interval check 7 sets). (A system call in between, even a select(0),
    would sometimes let the scheduler run the woken drain thread first, which then wins that instant.)
    Returns how many instants it gave."""
    deadline = time.monotonic() + 10.0
    instants = 0
    while not condition():
        assert time.monotonic() < deadline, f"the drain thread did not get in ({what})"
        spin_until = time.perf_counter() + 0.001
        while time.perf_counter() < spin_until:
            pass
        _native_producers.release_gil_for_an_instant()
        instants += 1
    return instants


def main_thread_giving_the_gil_up_briefly_steps_aside(pushes):
    """7: without the step-aside call, such a main thread starves a waiting drain thread."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    instants = []
    try:
        for _ in range(pushes):
            start = released()
            _native_producers.hand_over([Payload()])
            given = run_and_give_the_gil_up_briefly_until(lambda: released() > start, "a push released")
            instants.append(given)
    finally:
        sys.setswitchinterval(previous)
    median = statistics.median(instants)
    assert median <= MAX_MEDIAN_INSTANTS, (
        f"the drain thread got in after a median of {median} instants of a main thread that gives the GIL "
        f"up briefly (at most {MAX_MEDIAN_INSTANTS}; max {max(instants)}): it was not asked in"
    )


def voluntary_switches(native_id):
    with open(f"/proc/self/task/{native_id}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--pushes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--crowded-pushes", type=int, default=300)
    parser.add_argument("--brief-release-pushes", type=int, default=100)
    args = parser.parse_args(argv)

    cuda_reclaim.set_auto_drain("thread")
    cuda_reclaim.defer_release(Payload())  # starts the drain thread
    sleep_until(lambda: cuda_reclaim.pending() == 0, "first release")
    thread = _auto._thread
    assert thread is not None and thread.is_alive()

    for _ in range(args.rounds):
        stream(args.pushes, 200, busy_until)  # 1, 2: contended acquisitions
        stream(args.pushes, 200, mixed_until)  # 3: contended and free, linger on and off
        stream(args.pushes // 10, 0, busy_until)  # bursts faster than any drain

    main_thread_steps_aside(args.crowded_pushes)  # 6
    main_thread_giving_the_gil_up_briefly_steps_aside(args.brief_release_pushes)  # 7

    # 4. Idle: blocked in poll(2), not woken at all.
    # It may still be finishing its last linger: a window without any switch proves it; a thread that
    # woke up periodically would switch in every window.
    sleep_until(lambda: cuda_reclaim.pending() == 0 and not _reclaim.wait(0), "quiet before idling")
    for _ in range(10):
        switches = voluntary_switches(thread.native_id)
        time.sleep(0.2)  # the behaviour under test: a window in which an idle thread never wakes
        if voluntary_switches(thread.native_id) == switches:
            break
    else:
        raise AssertionError("the idle drain thread kept waking up")

    # 5. Stopped: the signal is settled, a push stays pending and its fd is readable.
    cuda_reclaim.set_auto_drain("off")
    assert not _auto.is_thread_running()
    _native_producers.hand_over([Payload()])
    assert cuda_reclaim.pending() == 1
    assert _reclaim.wait(0), "a push after the stop left the fd unreadable"
    assert cuda_reclaim.drain() == 1
    stats = cuda_reclaim.stats()
    assert stats["pending"] == 0, stats
    print("drain_thread_busy_main: ok", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as failure:
        print(f"drain_thread_busy_main: FAILED: {failure}", flush=True)
        sys.exit(1)
