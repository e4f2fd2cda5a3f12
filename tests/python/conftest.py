"""Shared helpers for the cuda_reclaim pytest suite.

close() is final for a process, and fork/exit behaviour needs a process of its own, so many tests run
a short child interpreter (same interpreter, same sys.path): a program of children/ through
`run_child_script` (fake_cuda.run_script for a program that uses the fake driver).
"""

import os
import subprocess
import sys

import pytest

import cuda_reclaim
from exit_report import conserved  # noqa: F401 - the conservation law, for the test modules

CHILDREN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children")


def _run(argv, env, timeout):
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    child_env.pop("CUDA_RECLAIM_REPORT", None)
    if env:
        child_env.update(env)
    return subprocess.run(
        [sys.executable, *argv], env=child_env, capture_output=True, text=True, timeout=timeout
    )


def run_child_script(name, *script_args, env=None, timeout=60, args=()):
    """Run the program children/`name` in a fresh interpreter (with the interpreter options `args`);
    return the CompletedProcess (text mode)."""
    return _run([*args, os.path.join(CHILDREN, name), *script_args], env, timeout)


def gpu_device_or_reason():
    """(a current cuda.core Device, None), or (None, why there is no usable GPU)."""
    from cuda_reclaim import _reclaim

    info = _reclaim._driver_info()
    if info["status"] != "ok":
        return None, f"no usable CUDA driver: {info['message']}"
    try:
        from cuda.core import Device
    except ImportError as error:
        return None, f"cuda.core is not installed: {error}"
    try:
        device = Device()
        device.set_current()
    except Exception as error:  # noqa: BLE001 - any driver failure means no usable GPU
        return None, f"no usable GPU: {error!r}"
    return device, None


@pytest.fixture(scope="module")
def device():
    """The GPU for the tests marked gpu; skips them, saying why, where there is none."""
    found, reason = gpu_device_or_reason()
    if found is None:
        pytest.skip(reason)
    return found


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
    # An invalid escape in a test's source (often inside a child's program text) is an error, not a note.
    config.addinivalue_line("filterwarnings", "error::SyntaxWarning")
    config.addinivalue_line(
        "markers",
        "gpu: needs an NVIDIA GPU, its driver and cuda.core (skipped with the reason where absent); "
        "run with `pytest -m gpu`",
    )
