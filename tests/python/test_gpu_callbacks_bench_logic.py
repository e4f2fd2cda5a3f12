"""The GPU callbacks bench's own logic, without a GPU: how a pass is cut into gated segments, how the
segment is shortened while its enqueueing outlasts its gate, the medians over passes, and the report's
sentence about them. (The bench itself needs a GPU: tests/gpu/run_gpu_tests.sh runs it there.)"""

import time
import types

import gpu_callbacks_bench as bench
from report import gpu_tables


def make_bench(callbacks, segment, gate_ms=20.0):
    """An object with the attributes Bench's pass logic uses, without the GPU that Bench() needs."""
    return types.SimpleNamespace(args=types.SimpleNamespace(callbacks=callbacks), segment=segment,
                                 gate_ms=gate_ms, enqueue_ms=0.0, longest_enqueue_ms=0.0, gate_reruns=0)


def segments_tried(state, enqueue_ms, *args):
    """Runs Bench.gated on `state` with a pass whose enqueueing takes enqueue_ms(segment); returns the
    segment of every pass it ran and what gated returned."""
    seen = []

    def run(*pass_args):
        seen.append(state.segment)
        state.enqueue_ms = enqueue_ms(state.segment)
        return pass_args

    return seen, bench.Bench.gated(state, run, *args)


def test_segments_cover_every_callback_once_in_order():
    for callbacks, segment in ((200, 200), (200, 25), (200, 64), (10, 3), (7, 1)):
        state = make_bench(callbacks, segment)
        segments = bench.Bench.segments(state)
        assert [i for s in segments for i in s] == list(range(callbacks))
        assert all(len(s) == segment for s in segments[:-1])
        assert 1 <= len(segments[-1]) <= segment


def test_gated_halves_the_segment_until_enqueueing_ends_before_the_gate():
    # Enqueueing outlasts the gate while the segment holds more than 40 callbacks (a full launch queue).
    state = make_bench(200, 200, gate_ms=100.0)
    seen, result = segments_tried(state, lambda segment: 150.0 if segment > 40 else 2.0 + segment / 100, "result")
    assert result == ("result",)
    assert seen == [200, 100, 50, 25]
    assert state.segment == 25
    assert state.gate_reruns == 3
    # The longest enqueueing is that of the segments kept, not of the passes thrown away.
    assert state.longest_enqueue_ms == 2.25


def test_gated_keeps_a_pass_that_fits_and_stops_at_one_callback():
    state = make_bench(200, 25, gate_ms=20.0)
    calls, _ = segments_tried(state, lambda segment: 5.0)
    assert calls == [25] and state.gate_reruns == 0 and state.longest_enqueue_ms == 5.0

    state = make_bench(4, 4, gate_ms=20.0)
    calls, _ = segments_tried(state, lambda segment: 500.0)
    assert calls == [4, 2, 1], "one callback per segment is as short as a segment gets"


def test_each_pass_starts_with_no_enqueueing_counted_and_keeps_its_longest_segment():
    state = make_bench(200, 25, gate_ms=20.0)
    state.enqueue_ms = 500.0  # left by an earlier pass
    bench.Bench.gated(state, lambda: None)
    assert state.gate_reruns == 0 and state.enqueue_ms == 0.0

    bench.Bench.enqueued(state, time.perf_counter() - 0.010)
    bench.Bench.enqueued(state, time.perf_counter())
    assert state.enqueue_ms >= 10.0, "a shorter segment after a longer one leaves the longest"


def test_median_summary_takes_each_statistic_over_the_passes():
    passes = [bench.summary([1.0, 2.0, 3.0]), bench.summary([10.0, 20.0, 30.0]), bench.summary([4.0, 5.0, 6.0])]
    merged = bench.median_summary(passes)
    assert merged["p50"] == 5.0
    assert merged["max"] == 6.0
    assert merged["n"] == 3
    assert bench.median_summary([bench.summary([]), bench.summary([2.0])])["p50"] == 2.0
    assert bench.median_summary([bench.summary([])])["p99"] is None
    assert bench.median_summary([bench.summary([1.0]), bench.summary([3.0])])["p50"] == 2.0


def test_the_report_says_how_the_passes_were_gated_when_the_results_record_it():
    data = {"passes": 3, "gate_ms": 20.0, "segment": 25, "longest_enqueue_ms": 1.66, "gate_reruns": 3, "rows": []}
    sentence = gpu_tables._passes_and_gate(data)
    assert "median of 3 passes" in sentence
    assert "segments of 25" in sentence and "20 ms gate" in sentence and "1.7 ms" in sentence
    assert "3 pass(es) outlasted their gate" in sentence
    assert "outlasted" not in gpu_tables._passes_and_gate(dict(data, gate_reruns=0))
    assert gpu_tables._passes_and_gate({"callbacks": 200}) == "", "older results record none of it"


def test_a_row_whose_first_pass_is_long_runs_once():
    now = [0.0]

    def clock():
        return now[0]

    def runner(seconds):
        calls = []

        def run_once():
            calls.append(now[0])
            now[0] += seconds

        return calls, run_once

    calls, run_once = runner(0.4)
    assert bench.run_passes(3, run_once, long_pass_s=5.0, clock=clock) == 3
    assert len(calls) == 3
    calls, run_once = runner(12.0)
    assert bench.run_passes(3, run_once, long_pass_s=5.0, clock=clock) == 1
    assert len(calls) == 1
    calls, run_once = runner(0.1)
    assert bench.run_passes(1, run_once, clock=clock) == 1 and len(calls) == 1


def test_the_report_names_the_rows_that_ran_once():
    data = {"passes": 3, "long_pass_s": 5.0, "gate_ms": 20.0, "segment": 25, "longest_enqueue_ms": 1.66,
            "gate_reruns": 0, "rows": [{"variant": "reclaim", "mode": "busy", "passes": 3},
                     {"variant": "cupy", "mode": "busy", "passes": 1}],
            "second_stream": [{"first_stream": "cupy", "passes": 1}, {"first_stream": "none", "passes": 3}]}
    sentence = gpu_tables._passes_and_gate(data)
    assert "first pass took over 5 s ran once (cupy/busy, second stream with cupy:" in sentence
    assert "reclaim/busy" not in sentence


def test_the_ordered_variant_launches_each_callback_with_launch_host_func_ordered():
    launched = []
    reclaim = types.SimpleNamespace(
        launch_host_func=lambda *call: launched.append(("launch_host_func", *call)) or "future",
        launch_host_func_ordered=lambda *call: launched.append(("launch_host_func_ordered", *call)) or "ordered",
    )
    state = types.SimpleNamespace(reclaim=reclaim)
    futures = []
    bench.Bench.python_callback(state, "reclaim-ordered", "stream", print, 3, futures)
    bench.Bench.python_callback(state, "reclaim", "stream", print, 4, futures)
    assert launched == [("launch_host_func_ordered", "stream", print, 3), ("launch_host_func", "stream", print, 4)]
    assert futures == ["ordered", "future"]


def test_in_asyncio_mode_only_the_unordered_variant_is_left_to_the_loop():
    assert bench.drain_in_asyncio_mode("reclaim") == "off"
    for variant in ("reclaim-ordered", "cupy", "native"):
        assert bench.drain_in_asyncio_mode(variant) == "thread", variant


def test_the_target_compares_each_reclaim_variants_busy_p99_with_its_idle_p99():
    def row(variant, mode, p99):
        return {"variant": variant, "mode": mode, "stall_ms": {"p99": p99}}

    rows = [row("reclaim", "idle", 2.0), row("reclaim", "busy", 2.5), row("reclaim-ordered", "idle", 2.0),
            row("reclaim-ordered", "busy", 4.0), row("cupy", "idle", 1.0)]
    assert bench.busy_against_idle(rows, "reclaim") == {
        "idle_p99_ms": 2.0, "busy_p99_ms": 2.5, "ratio": 1.25, "met": True}
    ordered = bench.busy_against_idle(rows, "reclaim-ordered")
    assert ordered["ratio"] == 2.0 and ordered["met"] is False
    assert bench.busy_against_idle(rows, "cupy") is None, "no busy row"
    assert bench.busy_against_idle([row("reclaim", "idle", 0.0), row("reclaim", "busy", 1.0)], "reclaim") == {
        "idle_p99_ms": 0.0, "busy_p99_ms": 1.0, "ratio": None, "met": False}
