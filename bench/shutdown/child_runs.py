"""Running one child interpreter of a shutdown torture under a time limit, shared by the shutdown
comparison (torture.py) and the callbacks torture (tests/shutdown/callbacks_torture.py).

The child runs in a process group of its own, so that a timeout also kills a fork child it made, and any
fork child it left behind is killed once it ends.
"""

import os
import signal
import subprocess
import time


def run_child(argv, *, env, timeout):
    """Run `argv` with stdin and stdout closed; return (returncode, stderr as text, timed_out, seconds)."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a timeout kills a fork child too
    )
    timed_out = False
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # a fork child left behind, if any
        except ProcessLookupError:
            pass
    return process.returncode, stderr.decode("utf-8", "replace"), timed_out, time.monotonic() - started
