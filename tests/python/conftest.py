"""Shared helpers for the cuda_reclaim pytest suite.

close() is final for a process, and fork/exit behaviour needs a process of its own, so many tests run
a short child interpreter (same interpreter, same sys.path) through `run_child`.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import cuda_reclaim

STATS_LAW = ("released", "pending", "leaked_after_close", "abandoned_after_fork")


def conserved(stats):
    return stats["enqueued"] == sum(stats[k] for k in STATS_LAW)


def parse_report(text):
    """Parse the exit report line 'cuda-reclaim: key=value ...' from stderr text (the last one)."""
    lines = [line for line in text.splitlines() if line.startswith("cuda-reclaim: enqueued=")]
    assert lines, f"no exit report in:\n{text}"
    fields = dict(item.split("=", 1) for item in lines[-1].split()[1:])
    return {k: (v if k == "conserved" else int(v)) for k, v in fields.items()}


def run_child(code, *, env=None, timeout=60, args=()):
    """Run `code` in a fresh interpreter; return the CompletedProcess (text mode)."""
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    child_env.pop("CUDA_RECLAIM_REPORT", None)
    if env:
        child_env.update(env)
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def drained():
    """Start and end a test with nothing queued and the auto drain off (restored afterwards)."""
    previous = cuda_reclaim.set_auto_drain("off")
    cuda_reclaim.drain()
    yield cuda_reclaim
    cuda_reclaim.drain()
    cuda_reclaim.set_auto_drain(previous)


class Tracked:
    """An object whose release is observable: `released` holds the ids of collected instances."""

    released = []

    def __init__(self, ident):
        self.ident = ident

    def __del__(self):
        Tracked.released.append(self.ident)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "gpu: needs an NVIDIA GPU, its driver and cuda.core (skipped with the reason where absent); "
        "run with `pytest -m gpu`",
    )
