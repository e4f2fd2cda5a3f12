"""CPython's os.fork() and a thread that the parent's after-fork hook starts: its multi-threaded-process warning
counts that thread exactly where cuda_reclaim._auto_fork._fork_counts_threads_after_hooks() says (the statement
above it in _auto_fork.py gives the versions and the OS condition), and never a thread started once os.fork() has
returned. The scenarios run in a child that imports no cuda_reclaim."""

import sys

import pytest

from conftest import run_child_script
from cuda_reclaim import _auto_fork

CHILD = "fork_hook_starts_a_thread.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child reads and writes /proc/self")

# The process name in the child: "-" keeps the interpreter's, so /proc/self/stat's 20th field is the OS's thread
# count; a name with a space shifts that field by one (to the nice value), so os.fork() has no count from the OS and
# takes threading's.
OS_TELLS = "-"
OS_DOES_NOT_TELL = "fork hook"


def run(where, name):
    """(the first 159 bytes of the child's /proc/self/stat at the fork, the warnings its os.fork() issued)."""
    result = run_child_script(CHILD, where, name)
    assert result.returncode == 0, result.stdout + result.stderr
    printed = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert printed["threads started"] == "1", result.stdout
    return bytes.fromhex(printed["stat head"]), int(printed["multi-threaded-fork warnings"])


def test_a_thread_that_an_after_fork_hook_starts_makes_os_fork_warn_exactly_where_the_gate_says_where_the_os_tells():
    stat_head, warnings = run("hook", OS_TELLS)
    assert _auto_fork._os_thread_count(stat_head) == 1, stat_head  # one thread, told by the OS
    assert warnings == int(_auto_fork._fork_counts_threads_after_hooks(stat_head)), sys.version


def test_a_thread_that_an_after_fork_hook_starts_makes_os_fork_warn_exactly_where_the_gate_says_where_it_does_not():
    stat_head, warnings = run("hook", OS_DOES_NOT_TELL)
    if _auto_fork._os_thread_count(stat_head) != 0:
        pytest.skip(f"the shifted field reads as a count here (the nice value): {stat_head!r}")
    assert warnings == int(_auto_fork._fork_counts_threads_after_hooks(stat_head)), sys.version


@pytest.mark.parametrize("name", [OS_TELLS, OS_DOES_NOT_TELL])
def test_a_thread_started_once_os_fork_has_returned_never_makes_it_warn(name):
    stat_head, warnings = run("after_return", name)
    assert _auto_fork._os_thread_count(stat_head) <= 1, stat_head
    assert warnings == 0, sys.version
