"""Child of test_reliability.py: a finalizer that a drain runs calls os.fork(), and the child returns from it
and goes on using the library (as code that forks a helper process from a finalizer would), then ends
normally: its atexit close() and exit report run.

argv[1]: "drain" — auto drain off, one explicit drain() on the main thread of more than one batch;
         "thread" — the default drain thread runs the finalizer (the child's only thread is then that one:
         a new thread carries on there, with the automatic drain off, since nothing would ever stop a
         daemon drain thread in a child whose main thread has ended; the child ends with that thread).
The child writes its findings to a pipe; the parent checks them and the child's exit status, then prints
"done". A hang is caught by the test's timeout."""

import os
import sys
import threading
import time

import cuda_reclaim

MODE = sys.argv[1]
PLAIN = 2000  # several of the drain's batches: the fork happens while later ones are still queued
read_end, write_end = os.pipe()
state = {"child": False, "pid": None}
released_in = {}  # pid -> how many Plain finalizers ran in that process (a child inherits its parent's)
forked = threading.Event()


class Forks:
    def __del__(self):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            state["child"] = True
            if MODE == "thread":
                # The drain thread is the child's only thread: let a new one carry on (non-daemon, so the
                # child's exit waits for it), and return into the drain loop, which must leave in the child.
                threading.Thread(target=child_goes_on).start()
            return
        state["pid"] = pid
        forked.set()


class Plain:
    def __del__(self):
        released_in[os.getpid()] = released_in.get(os.getpid(), 0) + 1


def child_goes_on():
    # Only what the drain had taken before the fork may be released here; the rest of the parent's queue is
    # abandoned. The forking drain either finishes its batch in hand ("drain") or, stopped by the child's
    # fork hook ("thread": its worker is stopped), puts the rest of it back, pending in the child's queue.
    # Nothing twice: the Plain objects released in this process's history (before the fork, where
    # os.fork()'s before-fork hook may have drained, and here since) + pending + abandoned = all of them.
    # (In "thread" mode the forking thread may still be finishing its item: wait, bounded.)
    deadline = time.monotonic() + 30
    while True:
        before = cuda_reclaim.stats()
        plain_here = sum(released_in.values())
        accounted = plain_here + before["pending"] + before["abandoned_after_fork"]
        if (accounted == PLAIN and before["in_drain"] == 0) or time.monotonic() > deadline:
            break
        time.sleep(0.01)  # the pace of a poll with a deadline, on the package's counters
    findings = [
        cuda_reclaim.conserved(before),
        before["in_drain"] == 0 and (MODE == "thread" or before["pending"] == 0),
        accounted == PLAIN,
    ]
    # The child's own queue works: a new hand-over is released by drain().
    cuda_reclaim.set_auto_drain("off")
    released = threading.Event()

    class Marker:
        def __del__(self):
            released.set()

    cuda_reclaim.defer_release(Marker())
    cuda_reclaim.drain()
    findings.append(released.is_set())
    after = cuda_reclaim.stats()
    findings += [
        cuda_reclaim.conserved(after),
        after["released"] == before["released"] + before["pending"] + 1
        and sum(released_in.values()) + after["abandoned_after_fork"] == PLAIN,
    ]
    os.write(write_end, repr(findings).encode())
    os.close(write_end)


cuda_reclaim.set_auto_drain("off")  # everything queued before any drain takes the first batch
cuda_reclaim.defer_release(Forks())
for _ in range(PLAIN):
    cuda_reclaim.defer_release(Plain())
if MODE == "thread":
    cuda_reclaim.set_auto_drain("thread")
else:
    cuda_reclaim.drain()
    if state["child"]:
        child_goes_on()
        sys.exit(0)  # a normal exit: atexit close(), the exit report
assert forked.wait(30), "the drain ran the forking finalizer"
os.close(write_end)
deadline = time.monotonic() + 60
findings = b""
while time.monotonic() < deadline:
    chunk = os.read(read_end, 1000)
    if not chunk:
        break
    findings += chunk
_, status = os.waitpid(state["pid"], 0)
assert os.waitstatus_to_exitcode(status) == 0, f"the child ended with {status}"
assert findings == repr([True] * 6).encode(), findings
print("done", flush=True)
