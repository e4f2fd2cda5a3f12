"""Child of test_cpython_fork_counts_threads.py: whether CPython's os.fork() counts, for its multi-threaded-process
DeprecationWarning, a thread that the parent's after-fork hook starts. Imports no cuda_reclaim.

Arguments: where the thread starts, "hook" (an os.register_at_fork(after_in_parent=...) hook) or "after_return"
(the caller, once os.fork() has returned), then the process name to set before the fork (written to
/proc/self/comm; "-" keeps the interpreter's). The process is single-threaded until the fork; the thread lives until
os.fork() has returned, then ends. Prints the first 159 bytes of /proc/self/stat just before the fork (hex), the
threads started, and the multi-threaded-fork warnings that os.fork() issued (recorded, not raised: os.fork() clears
the error that an error filter makes of it).
"""

import os
import sys
import threading
import warnings

where, name = sys.argv[1], sys.argv[2]
if name != "-":
    with open("/proc/self/comm", "w") as comm:
        comm.write(name)
fork_returned = threading.Event()
threads = []


def start_a_thread():
    thread = threading.Thread(target=fork_returned.wait)
    thread.start()
    threads.append(thread)


if where == "hook":
    os.register_at_fork(after_in_parent=start_a_thread)
assert threading.active_count() == 1, threading.enumerate()
with open("/proc/self/stat", "rb") as stat:
    stat_head = stat.read(159)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pid = os.fork()
    if pid == 0:
        os._exit(0)
if where == "after_return":
    start_a_thread()
fork_returned.set()
for thread in threads:
    thread.join()
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
warned = [w for w in caught if issubclass(w.category, DeprecationWarning) and "multi-threaded" in str(w.message)]
print("stat head:", stat_head.hex())
print("threads started:", len(threads))
print("multi-threaded-fork warnings:", len(warned), flush=True)
