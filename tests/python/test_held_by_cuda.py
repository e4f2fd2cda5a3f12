"""What CUDA still holds: attached_to_cuda == handed_back_by_cuda + held_by_cuda, live in stats() and in
the exit report, for every way of handing an object to CUDA (against the fake libcuda)."""

import pytest

import cuda_reclaim
import fake_cuda
from exit_report import last_report

HOLD_LAW = """
def hold():
    s = cuda_reclaim.stats()
    assert s["attached_to_cuda"] == s["handed_back_by_cuda"] + s["held_by_cuda"], s
    return s["held_by_cuda"]
"""


def test_stats_name_the_hold_counters():
    s = cuda_reclaim.stats()
    assert set(cuda_reclaim.HOLD_KEYS) <= set(s)
    assert s["attached_to_cuda"] == s["handed_back_by_cuda"] + s["held_by_cuda"]


def test_every_kind_of_attachment_is_held_until_cuda_hands_it_back():
    fake_cuda.run(
        HOLD_LAW
        + """
assert hold() == 0
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P())
assert hold() == 1
stream = 0x7100
fake.fake_cuda_stream_hold(stream, 1)
cuda_reclaim.keep_alive_until(stream, P())
future = cuda_reclaim.launch_host_func(stream, lambda: "ran")
node_graph = fake.fake_cuda_graph_create()
cuda_reclaim.add_host_node(node_graph, print)
assert hold() == 4
fake.fake_cuda_graph_destroy(graph)
assert hold() == 3, "the user object's destructor handed it back"
fake.fake_cuda_stream_hold(stream, 0)
fake.fake_cuda_run_host_functions()
assert hold() == 1, "both host functions ran"
fake.fake_cuda_graph_destroy(node_graph)
assert hold() == 0
cuda_reclaim.drain()
assert future.result(timeout=0) == "ran"
s = cuda_reclaim.stats()
assert s["attached_to_cuda"] == 4 and s["handed_back_by_cuda"] == 4, s
print("ok")
"""
    )


def test_failed_attachments_are_never_counted_as_held():
    fake_cuda.run(
        HOLD_LAW
        + """
for attach in (lambda: cuda_reclaim.keep_alive(fake.fake_cuda_failing_graph(), P()),
               lambda: cuda_reclaim.keep_alive_until(fake.fake_cuda_failing_stream(), P()),
               lambda: cuda_reclaim.launch_host_func(fake.fake_cuda_failing_stream(), print),
               lambda: cuda_reclaim.add_host_node(fake.fake_cuda_failing_graph(), print)):
    try:
        attach()
    except cuda_reclaim.DriverError:
        pass
    else:
        raise AssertionError("no DriverError")
    assert hold() == 0
assert cuda_reclaim.stats()["attached_to_cuda"] == 0
"""
    )


def test_the_exit_report_counts_what_cuda_still_holds():
    # As a new user would: exit while a "kernel" still runs at the head of a stream with host functions
    # queued behind it, and with an executable graph never destroyed.
    result = fake_cuda.run(
        """
stream = 0x7200
fake.fake_cuda_stream_hold(stream, 1)          # the kernel: nothing behind it runs before exit
cuda_reclaim.keep_alive_until(stream, P())
cuda_reclaim.launch_host_func(stream, print, "never runs")
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P(), P())
executable = fake.fake_cuda_graph_instantiate(graph)
fake.fake_cuda_graph_destroy(graph)            # the exec still holds the user object
for _ in range(3):
    cuda_reclaim.defer_release(P())
print("exiting", flush=True)
""",
        CUDA_RECLAIM_REPORT="1",
    )
    report = last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    assert report["held_by_cuda"] == 3, result.stderr
    assert report["attached_to_cuda"] == 3 and report["handed_back_by_cuda"] == 0, result.stderr
    assert report["released"] == 3 and report["pending"] == 0, result.stderr
    assert "never runs" not in result.stdout


def test_what_cuda_hands_back_after_close_is_counted_as_leaked_and_no_longer_held():
    # The stream reaches its host functions only after cuda_reclaim's final drain (an atexit hook that
    # is registered first, so it runs last, releases it; a CUDA thread then runs them during exit).
    result = fake_cuda.run(
        """
import atexit
stream = 0x7300
def release_the_stream():
    fake.fake_cuda_stream_hold(stream, 0)
    assert fake.fake_cuda_stream_synchronize(stream, 30000) == 0
atexit.unregister(cuda_reclaim._auto.close_at_exit)
atexit.register(release_the_stream)            # runs after the close below
atexit.register(cuda_reclaim._auto.close_at_exit)
fake.fake_cuda_start_threads(2)
fake.fake_cuda_stream_hold(stream, 1)
cuda_reclaim.keep_alive_until(stream, P())
future = cuda_reclaim.launch_host_func(stream, print, "never runs")
print("exiting", flush=True)
""",
        CUDA_RECLAIM_REPORT="1",
    )
    report = last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    assert report["held_by_cuda"] == 0 and report["handed_back_by_cuda"] == 2, result.stderr
    assert report["leaked_after_close"] == 2, result.stderr
    assert "never runs" not in result.stdout


def test_report_fields_come_before_the_verdict_in_a_fixed_order():
    from cuda_reclaim import _reclaim

    line = _reclaim.report().strip()
    keys = [item.split("=", 1)[0] for item in line.split()[1:]]
    assert keys[-4:] == ["attached_to_cuda", "handed_back_by_cuda", "held_by_cuda", "conserved"], line
    assert keys[: len(cuda_reclaim.STATS_KEYS)] == list(cuda_reclaim.STATS_KEYS)
    report = last_report(line)
    assert report["attached_to_cuda"] == report["handed_back_by_cuda"] + report["held_by_cuda"]


@pytest.mark.parametrize("mode", ["thread", "off"])
def test_held_counts_stay_lawful_under_many_cuda_threads(mode):
    fake_cuda.run(
        HOLD_LAW
        + f"""
cuda_reclaim.set_auto_drain({mode!r})
fake.fake_cuda_start_threads(4)
streams = [0x7400 + i for i in range(4)]
futures = []
for i in range(4000):
    stream = streams[i % 4]
    if i % 3 == 0:
        cuda_reclaim.keep_alive_until(stream, P())
    else:
        futures.append(cuda_reclaim.launch_host_func(stream, int, i))
for stream in streams:
    assert fake.fake_cuda_stream_synchronize(stream, 30000) == 0
assert hold() == 0
if {mode!r} == "off":
    while cuda_reclaim.pending():
        cuda_reclaim.drain()
for i, future in enumerate(futures):
    future.result(timeout=30)
s = cuda_reclaim.stats()
assert s["attached_to_cuda"] == 4000 and s["calls_run"] == len(futures), s
"""
    )
