"""The meaning of each CPython private name the package uses (cuda_reclaim/_python_compat.py), pinned on every
interpreter: the day a release changes it, this fails."""

from conftest import run_child


def test_a_threading_exit_hook_runs_after_the_main_thread_before_the_join_last_registered_first():
    result = run_child(
        """
import os, threading
from cuda_reclaim import _python_compat
release = threading.Event()
order = []
def first():
    order.append("first")
    os.write(1, ("hooks ran in the order " + " ".join(order) + "\\n").encode())
    release.set()
def second():
    order.append("second")
def worker():
    release.wait()  # a thread that is not a daemon, held until the hook runs: the join would hang first
    os.write(1, b"worker released\\n")
_python_compat.register_threading_exit_hook(first)
_python_compat.register_threading_exit_hook(second)
threading.Thread(target=worker).start()
print("main ends", flush=True)
""",
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["main ends", "hooks ran in the order second first", "worker released"]


def test_a_threading_exit_hook_cannot_be_registered_once_threading_shuts_down():
    result = run_child(
        """
import threading
from cuda_reclaim import _python_compat
def late():
    try:
        _python_compat.register_threading_exit_hook(print)
    except RuntimeError as error:
        print("refused:", error, flush=True)
_python_compat.register_threading_exit_hook(late)
""",
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("refused:"), result.stdout + result.stderr
