"""What a child program that runs against the fake driver imports first: the package with the automatic drain
off (a test turns it on), the fake's controls as `fake`, a payload class `P`, and `wait_until` (scenario.py's).

    from fake_driver_child import cuda_reclaim, fake, P, wait_until, drain_thread_waits

The runner (fake_cuda.run_script) names the fake in CUDA_RECLAIM_LIBCUDA; the child's own folder is on sys.path,
and so is this one's parent (for fake_cuda)."""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fake_cuda  # noqa: E402
from scenario import wait_until  # noqa: E402, F401 - the suite's poll with a deadline, for the programs

import cuda_reclaim  # noqa: E402

fake = fake_cuda.load(os.environ["CUDA_RECLAIM_LIBCUDA"])  # the runner names the fake there
cuda_reclaim.set_auto_drain("off")


class P:
    """A payload: any object with a reference to hand over."""


def drain_thread_waits(*, without_limit=False, timeout=30.0):
    """Returns once the automatic drain thread sleeps in its loop's wait: in poll(2) (the kernel function that
    /proc's wchan names) on more than one fd (the linger polls its stop fd alone). `without_limit`: a wait that
    no timer ends, so no trim is due (poll's timeout -1, ppoll's NULL timespec; /proc's syscall gives the
    number, then the arguments). Fails after `timeout` seconds."""
    (thread,) = [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]

    def waits():
        task = f"/proc/self/task/{thread.native_id}"
        with open(f"{task}/wchan") as wchan, open(f"{task}/syscall") as syscall:
            polls, fields = "poll" in wchan.read(), syscall.read().split()
        if not polls or len(fields) < 4 or int(fields[2], 16) < 2:
            return False
        return not without_limit or int(fields[3], 16) & 0xFFFFFFFF in (0xFFFFFFFF, 0)

    wait_until(waits, "the drain thread waits in poll(2)" + (" without a limit" if without_limit else ""), timeout)
