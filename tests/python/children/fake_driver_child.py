"""What a child program that runs against the fake driver imports first: the package with the automatic drain
off (a test turns it on), the fake's controls as `fake`, a payload class `P`, and `wait_until`.

    from fake_driver_child import cuda_reclaim, fake, P, wait_until

The runner (fake_cuda.run_script) names the fake in CUDA_RECLAIM_LIBCUDA; the child's own folder is on sys.path,
and so is this one's parent (for fake_cuda)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fake_cuda  # noqa: E402

import cuda_reclaim  # noqa: E402

fake = fake_cuda.load(os.environ["CUDA_RECLAIM_LIBCUDA"])  # the runner names the fake there
cuda_reclaim.set_auto_drain("off")


class P:
    """A payload: any object with a reference to hand over."""


def wait_until(predicate, timeout=30.0):
    """Returns once predicate() is true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)
