"""One run of the finalizer stress test: a program whose finalizers call back into cuda_reclaim.

Usage: stress_child.py SEED. The seed picks everything: what the finalizers do (hand over, toggle the
automatic drain, drain, close, fork, a failing keep_alive_until), which threads hand references over
(main, Python threads daemon or not, native threads that keep pushing through exit), and how the program
ends. The harness (finalizer_stress.py) checks the outcome: the process ends, with the exit status that
ending gives, and one exit report that conserves. A fork child checks the conservation law itself and
ends with os._exit; a parent that sees a failed fork child writes STRESS-FAILURE to stderr.
"""

import os
import random
import sys
import threading

import cuda_reclaim
import _native_producers

ACTIONS = ("hand_over", "hand_over", "hand_over", "toggle", "drain", "stats", "keep_alive", "close", "fork")
ENDINGS = ("return", "sys_exit", "close_then_return", "exception", "keyboard_interrupt")
MODES = ("thread", "off")


def law_holds(stats):
    return cuda_reclaim.conserved(stats)  # the law as the C header defines it (reclaim_stats_conserved)


class Leaf:
    pass


class Actor:
    """Its finalizer runs on whichever thread drains it, and does one thing to cuda_reclaim."""

    def __init__(self, action, arg):
        self.action, self.arg = action, arg

    def __del__(self):
        action = self.action
        if action == "hand_over":
            cuda_reclaim.defer_release(Leaf())
        elif action == "toggle":
            cuda_reclaim.set_auto_drain(self.arg)
        elif action == "drain":
            cuda_reclaim.drain()
        elif action == "stats":
            # Exact only at quiescence on an open queue; a closed one conserves in every snapshot. Closed
            # is read first: a snapshot taken while open may be inexact even if the queue closes before
            # it is looked at.
            closed = cuda_reclaim.is_closed()
            stats = cuda_reclaim.stats()
            if closed and not law_holds(stats):
                os.write(2, f"STRESS-FAILURE: law broken after close: {stats}\n".encode())
        elif action == "keep_alive":
            try:
                cuda_reclaim.keep_alive_until(0, Leaf())
            except cuda_reclaim.DriverError:
                pass
        elif action == "close":
            cuda_reclaim.close()
        elif action == "fork":
            try:
                pid = os.fork()
            except RuntimeError:  # "can't fork at interpreter shutdown": a daemon thread's finalizer, late
                return
            if pid == 0:
                os._exit(0 if law_holds(cuda_reclaim.stats()) else 7)
            _, status = os.waitpid(pid, 0)
            if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                os.write(2, f"STRESS-FAILURE: fork child ended with status {status}\n".encode())


def make_actors(rng, count):
    actors = []
    for _ in range(count):
        action = rng.choice(ACTIONS)
        if action in ("close", "fork") and rng.random() < 0.8:
            action = "hand_over"  # rare: they end or multiply the run
        actors.append(Actor(action, rng.choice(MODES)))
    return actors


def hand_over_all(actors, pause_every):
    for i, actor in enumerate(actors):
        cuda_reclaim.defer_release(actor)
        if pause_every and i % pause_every == 0:
            cuda_reclaim.drain()


def main():
    seed = int(sys.argv[1])
    rng = random.Random(seed)
    cuda_reclaim.set_auto_drain(rng.choice(MODES))
    threads = []
    for _ in range(rng.randint(0, 2)):
        actors = make_actors(rng, rng.randint(10, 300))
        thread = threading.Thread(target=hand_over_all, args=(actors, rng.choice((0, 7))), daemon=rng.random() < 0.5)
        threads.append(thread)
    if rng.random() < 0.6:
        # Native threads, like CUDA's callback thread: some pushes land after the final close.
        natives = make_actors(rng, rng.randint(10, 200))
        _native_producers.hand_over_detached(natives, rng.randint(1, 3), rng.choice((0, 50, 500)))
    for thread in threads:
        thread.start()
    hand_over_all(make_actors(rng, rng.randint(10, 500)), rng.choice((0, 5, 50)))
    if rng.random() < 0.5:
        cuda_reclaim.drain()
    ending = rng.choice(ENDINGS)
    print(f"ending={ending}", flush=True)
    if ending == "sys_exit":
        sys.exit(0)
    if ending == "close_then_return":
        cuda_reclaim.close()
    if ending == "exception":
        raise RuntimeError("the program fails")
    if ending == "keyboard_interrupt":
        raise KeyboardInterrupt


if __name__ == "__main__":
    main()
