"""The drain at its edges: a stopped drain thread leaves before its next item, what a drain took and never
finished is counted (in_drain), the gc mode never runs calls, no host-node call runs after close(),
stats() is one consistent read, and the drain thread trims after a burst even under a trickle.

Each scenario runs in a child with the fake driver (tests/graph/fake_libcuda.cc), under a timeout."""

import os
import sys

import fake_cuda
from exit_report import find_reports

# A child that hangs fails here rather than after the default limit.
LIMIT = 60


def test_no_host_node_call_runs_after_a_close_inside_a_call_of_the_same_batch():
    fake_cuda.run(
        """
calls = []
def closing():
    calls.append("closing")
    cuda_reclaim.close()
    calls.append("closed")
graph = fake.fake_cuda_graph_create()
cuda_reclaim.add_host_node(graph, calls.append, "node")
exe = fake.fake_cuda_graph_instantiate(graph)
future = cuda_reclaim.launch_host_func(0x5100, closing)
assert fake.fake_cuda_run_host_functions() == 1
fake.fake_cuda_graph_launch(exe, 0x5200)
assert fake.fake_cuda_run_host_functions() == 1
assert cuda_reclaim.pending() == 2
cuda_reclaim.drain()  # one batch: the call (which closes), then the firing
assert calls == ["closing", "closed"], f"a host-node call ran after close() returned: {calls}"
s = cuda_reclaim.stats()
assert s["calls_run"] == 1 and s["calls_cancelled"] == 1 and s["in_drain"] == 0, s
assert cuda_reclaim.conserved(s), s
print("done")
""",
        timeout=LIMIT,
    )


def test_gc_mode_releases_references_but_never_runs_calls():
    fake_cuda.run(
        """
import gc, select
cuda_reclaim.set_auto_drain("gc")
ran = []
future = cuda_reclaim.launch_host_func(0x5300, lambda: ran.append(threading.get_ident()))
keep = P(); ref = weakref.ref(keep)
cuda_reclaim.defer_release(keep); del keep
assert fake.fake_cuda_run_host_functions() == 1
gc.collect()
assert ref() is None, "the gc hook releases references"
assert ran == [] and not future.done(), "the gc hook ran a user's call"
assert cuda_reclaim.pending() == 1 and cuda_reclaim.stats()["in_drain"] == 0
# Pending, so the wake-up fd is readable: an event loop's reader would run it.
assert select.select([cuda_reclaim.fileno()], [], [], 0)[0], "the call went back without a wake-up"
gc.collect()
assert ran == [] and cuda_reclaim.pending() == 1, "a second collection gives it back again"
assert cuda_reclaim.drain() == 1 and ran == [threading.get_ident()] and future.result() is None
assert cuda_reclaim.conserved()
print("done")
""",
        timeout=LIMIT,
    )


def test_gc_mode_does_not_run_a_call_inside_a_lock_held_where_the_collection_starts():
    # Before: the gc hook ran the call inside `with lock:` of the thread that allocated, and the call that
    # takes the same lock deadlocked that thread with itself (the child hangs).
    fake_cuda.run(
        """
import gc
cuda_reclaim.set_auto_drain("gc")
lock = threading.Lock()
def takes_the_lock():
    with lock:
        pass
future = cuda_reclaim.launch_host_func(0x5310, takes_the_lock)
assert fake.fake_cuda_run_host_functions() == 1
with lock:
    gc.collect()
assert not future.done()
cuda_reclaim.drain()
assert future.done() and future.exception() is None
print("done")
""",
        timeout=30,
    )


def test_switching_off_stops_a_busy_drain_thread_before_its_next_call_and_keeps_the_order():
    fake_cuda.run(
        """
ran = []
def slow(i):
    time.sleep(0.002)
    ran.append(i)
futures = [cuda_reclaim.launch_host_func(0x5400, slow, i) for i in range(3000)]
assert fake.fake_cuda_run_host_functions() == 3000
cuda_reclaim.set_auto_drain("thread")
wait_until(lambda: len(ran) >= 20)
cuda_reclaim.set_auto_drain("off")
stopped_at = len(ran)
time.sleep(0.3)  # a window in which a drain thread that was not stopped would run more than a hundred calls
assert len(ran) == stopped_at, f"{len(ran) - stopped_at} calls ran after set_auto_drain('off') returned"
s = cuda_reclaim.stats()
assert s["in_drain"] == 0 and s["pending"] == 3000 - stopped_at, s
assert cuda_reclaim.conserved(s), s
cuda_reclaim.drain()  # what went back is taken first, in order
assert ran == list(range(3000)), "out of order after the put-back"
assert all(f.done() for f in futures)
print("done")
""",
        timeout=LIMIT,
    )


def test_the_exit_report_counts_what_a_stuck_drain_took_as_in_drain_not_released():
    result = fake_cuda.run(
        """
started = threading.Event()
def long_call():
    started.set()
    time.sleep(8)  # still running when the process exits: the exit hook gives up waiting for it
cuda_reclaim.launch_host_func(0x5500, long_call)
cuda_reclaim.launch_host_func(0x5500, lambda: None)
cuda_reclaim.keep_alive_until(0x5500, P())
assert fake.fake_cuda_run_host_functions() == 3
cuda_reclaim.set_auto_drain("thread")
assert started.wait(30)
print("done")
""",
        timeout=LIMIT,
        CUDA_RECLAIM_REPORT="1",
    )
    reports = find_reports(result.stderr)
    assert len(reports) == 1, result.stderr
    report = reports[0]
    assert report["conserved"] == "yes", report
    # The long call itself, the call behind it and the keep_alive_until payload: taken, never finished.
    assert report["in_drain"] == 3 and report["released"] == 0 and report["pending"] == 0, report


def test_direct_pushes_stays_zero_and_no_counter_goes_down_without_direct_pushes():
    fake_cuda.run(
        """
fake.fake_cuda_start_threads(4)
cuda_reclaim.set_auto_drain("thread")
GAUGES = {"pending", "in_drain", "held_by_cuda", "calls_outstanding", "max_pending"}
stop = threading.Event()
def launcher(base):
    i = 0
    while not stop.is_set() and i < 200000:
        stream = base + (i % 4)
        cuda_reclaim.launch_host_func(stream, int)
        cuda_reclaim.keep_alive_until(stream, P())
        i += 1
threads = [threading.Thread(target=launcher, args=(0x6000 + 16 * k,)) for k in range(2)]
for t in threads:
    t.start()
previous = cuda_reclaim.stats()
reads = 0
try:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        now = cuda_reclaim.stats()
        reads += 1
        assert now["direct_pushes"] == 0, f"direct_pushes is {now['direct_pushes']} with no direct push at all"
        down = [k for k in now if k not in GAUGES and now[k] < previous[k]]
        assert not down, f"counters went down: {[(k, previous[k], now[k]) for k in down]}"
        previous = now
finally:
    stop.set()
    for t in threads:
        t.join()
assert reads > 100 and previous["host_calls"] > 0 and previous["stream_host_functions"] > 0, (reads, previous)
print("done")
""",
        timeout=LIMIT,
    )


def test_the_drain_thread_trims_after_a_burst_while_a_trickle_goes_on():
    fake_cuda.run(
        """
_reclaim._set_trim_delay(0.2)
cuda_reclaim.set_auto_drain("thread")
burst = [P() for _ in range(50000)]  # far beyond the reserved capacity below
for obj in burst:
    cuda_reclaim.defer_release(obj)
del burst, obj
wait_until(lambda: cuda_reclaim.pending() == 0)
# A hand-over every 20 ms: before, the thread trimmed only after a whole delay with nothing arriving.
deadline = time.monotonic() + 30
while cuda_reclaim.stats()["trims"] == 0 and time.monotonic() < deadline:
    cuda_reclaim.defer_release(P())
    time.sleep(0.02)
s = cuda_reclaim.stats()
assert s["trims"] == 1, s
assert not _reclaim._trim_would_help()
print("done")
""",
        timeout=LIMIT,
        CUDA_RECLAIM_RESERVED_CAPACITY="1024",
    )
