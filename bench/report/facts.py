"""The numbers in the prose of docs/benchmarks.md (bench/report/template.md), each derived from the run
being reported, so that a regenerated report never repeats a number that its run did not measure."""

from report.tables import CLOCK_RESOLUTION_NS, DRAIN_FATES, count, fmt_ns

ANCHOR_STRATEGIES = ("mutex_vector", "mutex_deque", "cas_pending_call")


def run_facts(py, command):
    """The run's date, machine, interpreter and command, as a Markdown list."""
    m = py["machine"]
    quick = " (--quick: tiny sizes, not meaningful)" if py.get("quick") else ""
    return "\n".join([
        f"- **Run:** {m['date']}{quick}; load average at start {', '.join(f'{x:.2f}' for x in m['loadavg'])}",
        f"- **Machine:** {m['cpu']}, {m['cores']} cores; {m['platform']}",
        f"- **Python:** {m['python_impl']} {m['python']} (switch interval {fmt_ms(m['switch_interval_s'])})",
        f"- **Command:** `{command}`",
    ])


def fmt_ms(seconds):
    return f"{seconds * 1e3:g} ms"


def oversubscribed(py, most_threads=4):
    cores = py["machine"]["cores"]
    if cores is None or cores >= most_threads:
        return ""
    return f" {most_threads} producers on {cores} cores (the machine above) are oversubscribed."


def latency_setting(r, key, scale, unit):
    """A setting of the release-latency runs (recorded in their rows), e.g. the push spacing."""
    row = next((row for row in r.rows if row["section"] == "latency" and key in row), None)
    return "–" if row is None else f"{row[key] * scale:g} {unit}"


def section_n(r, section):
    row = next((row for row in r.rows if row["section"] == section), None)
    return count(row["n"] if row else None)


def producer_repeats(r):
    """How the producer rows were taken: the repeats of each row (older runs have none recorded: one)."""
    repeats = max((row.get("repeats", 1) for row in r.rows if row["section"] == "producer"), default=1)
    if repeats == 1:
        return " Each row is one run."
    return (f" Each row runs {repeats} times, the repeats interleaved with the other rows; the table shows the "
            f"medians of the runs' p50s and p99s and the largest max, and `calls` is per run.")


def fastest_anchor_p50(r, main, threads):
    """The lowest producer p50 of the anchors in one (main thread, producers) row; None without them."""
    anchors = [row["p50"] for row in r.rows if row["section"] == "producer" and row["strategy"] in ANCHOR_STRATEGIES
               and row["main"] == main and row["threads"] == threads]
    return min(anchors) if anchors else None


def producer_gap(r):
    """How far cuda-reclaim's producer p50 is behind the fastest anchor, over this run's rows."""
    gaps = []
    for row in r.rows:
        if row["section"] != "producer" or row["strategy"] != "cuda_reclaim":
            continue
        fastest = fastest_anchor_p50(r, row["main"], row["threads"])
        if fastest is not None:
            gaps.append(row["p50"] - fastest)
    floor = [row["p50"] for row in r.rows if row["section"] == "producer" and row["strategy"] == "noop"]
    behind = [gap for gap in gaps if gap > 0]
    if not behind:
        return "In this run cuda-reclaim's p50 is behind no anchor in the Python-hosted rows."
    return (f"In the Python-hosted rows of this run cuda-reclaim's p50 is behind the fastest anchor by at most "
            f"{fmt_ns(max(behind))} (the no-op row's p50, {fmt_ns(min(floor)) if floor else '–'}, is what the "
            "per-call timestamps themselves cost).")


def producer_drain_cost(r):
    """What the automatic drain, running while the producers push, adds to their p50: the same push with it
    off (older runs have no such rows: nothing)."""
    pairs = []
    costs = []  # p50 with the drain running minus p50 with it off
    behind = []
    for main in ("idle", "busy"):
        for threads in (1, 2, 4):
            on = r.find("producer", main=main, threads=threads, strategy="cuda_reclaim")
            off = r.find("producer", main=main, threads=threads, strategy="cuda_reclaim_no_drain")
            if not (on and off):
                continue
            pairs.append(f"{fmt_ns(off['p50'])} against {fmt_ns(on['p50'])} ({main}, {threads})")
            costs.append(on["p50"] - off["p50"])
            fastest = fastest_anchor_p50(r, main, threads)
            if fastest is not None:
                behind.append(off["p50"] - fastest)
    if not pairs:
        return ""
    lead = (f"behind the fastest anchor by at most {fmt_ns(max(behind))}" if behind and max(behind) > 0
            else "behind no anchor")
    if max(costs) > CLOCK_RESOLUTION_NS and min(costs) < -CLOCK_RESOLUTION_NS:
        effect = (f"the two differ in both directions, from {fmt_ns(-min(costs))} faster to "
                  f"{fmt_ns(max(costs))} slower with the drain running: the same code's p50 moves by that much "
                  "between rows (where the scheduler puts the threads, what the other threads do), so what the "
                  "concurrent drain costs a push is below what these rows resolve (the C++ push rows below "
                  "measure the push alone)")
    elif max(costs) > CLOCK_RESOLUTION_NS:
        effect = (f"the drain running meanwhile costs the producer up to {fmt_ns(max(costs))} at the p50 (it "
                  "empties the queue as it fills, so it reads the lanes and the tail index the producer has "
                  "just written, and those lines move between the two cores)")
    else:
        effect = ("the drain running meanwhile does not move the producer's p50 by more than the clock's tick "
                  f"({CLOCK_RESOLUTION_NS} ns)")
    return (" cuda-reclaim's automatic drain runs while the producers push (the mutex anchors are drained after "
            "the run, and cuda.core's pending call only when the main thread runs it). The same push with the "
            "automatic drain off, p50 against the default's (main thread, producers): " + "; ".join(pairs)
            + f"; so {effect}, and with it off cuda-reclaim is {lead} in these rows.")


def idle_p99(r):
    row = next((row for row in r.rows if row["section"] == "producer" and row["main"] == "idle"
                and row["threads"] == 1 and row["strategy"] == "cuda_reclaim"), None)
    return "" if row is None else f" (this run's p99 with one producer and an idle owner: {fmt_ns(row['p99'])})"


def pending_call_busy(r):
    row = next((row for row in r.rows if row["section"] == "latency" and row["main"] == "busy"
                and row["strategy"] == "cas_pending_call"), None)
    if row is None:
        return ""
    version = r.py["machine"]["python"]
    if not row["released_in_window"]:
        return f"In this run (Python {version}) it released none of its {row['n']} objects within the window."
    return (f"In this run (Python {version}) it released {row['released_in_window']} of {row['n']} objects "
            f"within the window, p50 {fmt_ns(row['p50'])}.")


def own_work(same_thread_ns, elsewhere_ns):
    """What cuda-reclaim's work around moodycamel (lanes, counts, signal) adds per pointer, pushed on the
    draining thread and by another thread. It only adds work to the same bulk dequeue, so a negative value is
    the run's noise showing through."""
    if same_thread_ns >= 0 and elsewhere_ns >= 0:
        return (f"its own work around it (lanes, counts and signal together) costs "
                f"{same_thread_ns:.1f} and {elsewhere_ns:.1f} ns per pointer")
    return (f"its own work around it (lanes, counts and signal together) changes the time per pointer by "
            f"{same_thread_ns:+.1f} and {elsewhere_ns:+.1f} ns: that work only adds to the same bulk dequeue, so "
            "where it is negative the run's noise is larger than the work")


def dequeue_share(r):
    """The C++ drain of cuda-reclaim (all at once) against a plain loop over an array and against moodycamel's
    bulk dequeue alone, per item."""
    limit = r.bench(r"BM_Drain/plain_loop/0/iterations:\d+")
    ours = r.bench(r"BM_Drain/cuda_reclaim/0/iterations:\d+")
    if limit is None or ours is None:
        return "see the C++ table"
    per = lambda bench: 1e9 / bench["items_per_second"]  # noqa: E731
    text = (f"in this run the C++ drain of pointers pushed on the draining thread runs at "
            f"{ours['items_per_second'] / limit['items_per_second']:.0%} of the loop over an array "
            f"({per(ours) - per(limit):+.1f} ns per pointer: the copy out of the queue's blocks)")
    floor = r.bench(r"BM_Drain/moodycamel_bulk/0/iterations:\d+")
    floor_elsewhere = r.bench(r"BM_DrainPushedElsewhere/moodycamel_bulk/iterations:\d+")
    elsewhere = r.bench(r"BM_DrainPushedElsewhere/cuda_reclaim/iterations:\d+")
    if floor is not None and floor_elsewhere is not None and elsewhere is not None:
        text += (f"; moodycamel's bulk dequeue alone, in batches of the same size with the same release, runs at "
                 f"{floor['items_per_second'] / limit['items_per_second']:.0%} of the loop "
                 f"({per(floor) - per(limit):+.1f} ns per pointer), and at "
                 f"{floor_elsewhere['items_per_second'] / limit['items_per_second']:.0%} when another thread pushed "
                 f"(cuda-reclaim's drain: {elsewhere['items_per_second'] / limit['items_per_second']:.0%}), so "
                 f"cuda-reclaim's drain runs at {ours['items_per_second'] / floor['items_per_second']:.0%} and "
                 f"{elsewhere['items_per_second'] / floor_elsewhere['items_per_second']:.0%} of the storage it is "
                 f"built on: {own_work(per(ours) - per(floor), per(elsewhere) - per(floor_elsewhere))}, "
                 "and the rest of the gap to the loop is moodycamel's copy")
    vector = r.bench(r"BM_DrainPushedElsewhere/mutex_vector/iterations:\d+")
    if elsewhere is not None and vector is not None:
        text += (f"; of pointers another thread pushed, cuda-reclaim takes {per(elsewhere):.1f} ns per pointer "
                 f"against the PyO3-style vector's {per(vector):.1f} ns: the blocks another core wrote must move to "
                 "this one, and the copy waits for them line by line, where a loop that releases as it reads "
                 "overlaps that wait with its work")
    return text


def busy_latency(r):
    """The busy-main-thread release latency through the drain thread, against one switch interval."""
    row = next((row for row in r.rows if row["section"] == "latency" and row["main"] == "busy"
                and row["strategy"] == "cuda_reclaim" and row["drain"] == "thread"), None)
    if row is None:
        return ""
    interval_ns = r.py["machine"]["switch_interval_s"] * 1e9
    verdict = "within" if row["p99"] <= interval_ns + 1e6 else "beyond"
    return (f"In this run: p50 {fmt_ns(row['p50'])}, p99 {fmt_ns(row['p99'])} with a switch interval of "
            f"{fmt_ms(r.py['machine']['switch_interval_s'])}: {verdict} one interval plus 1 ms.")


def push_breakdown(r):
    """One thread, C++: the push's parts measured alone, the whole push and the CAS stack's push."""
    parts = {name: r.bench(rf"BM_PushPart/{name}/iterations:\d+") for name in ("exchange", "moodycamel_enqueue")}
    ours = r.bench(r"BM_Push/cuda_reclaim/iterations:\d+/real_time/threads:1")
    cas = r.bench(r"BM_Push/cas_stack/iterations:\d+/real_time/threads:1")
    if None in parts.values() or ours is None or cas is None:
        return "(no breakdown in this run)"
    rest = ours["cpu_time"] - parts["exchange"]["cpu_time"] - parts["moodycamel_enqueue"]["cpu_time"]
    return (f"In this run, one thread: the exchange alone {fmt_ns(parts['exchange']['cpu_time'])}, the "
            f"enqueue alone {fmt_ns(parts['moodycamel_enqueue']['cpu_time'])}, the whole push "
            f"{fmt_ns(ours['cpu_time'])} (so about {fmt_ns(max(rest, 0))} for the lane choice, the closed and "
            f"signal checks, the count and the call), the CAS stack's push {fmt_ns(cas['cpu_time'])}.")


def drain_breakdown(r):
    """Python drain, per reference: the limit, bindings' batch action over an array, the limit over an array
    another thread wrote, the public drain."""
    parts = []
    for fate in DRAIN_FATES:
        limit = r.find("drain", fate=fate, strategy="plain_decref_loop", batch="all")
        action = r.find("drain", fate=fate, strategy="plain_release_fn_loop", batch="all")
        elsewhere = r.find("drain", fate=fate, strategy="plain_decref_loop_written_elsewhere", batch="all")
        ours = r.find("drain", fate=fate, strategy="cuda_reclaim", batch="all")
        if None in (limit, action, elsewhere, ours):
            return "(no breakdown in this run)"
        per = lambda row: row["ns"] / row["n"]  # noqa: E731
        parts.append(f"*{fate}*: the limit {per(limit):.1f} ns per reference, bindings' batch action over the "
                     f"same array {per(action):.1f} ns, the limit over an array another thread wrote "
                     f"{per(elsewhere):.1f} ns ({elsewhere['refs_per_s'] / limit['refs_per_s']:.0%}), the public "
                     f"`drain()` {per(ours):.1f} ns ({ours['refs_per_s'] / limit['refs_per_s']:.0%} of the limit, "
                     f"{ours['refs_per_s'] / elsewhere['refs_per_s']:.0%} of the hand-over's)")
    return "In this run: " + "; ".join(parts) + "."


def scaling_facts(scaling):
    """The scaling run's machine and load, from Google Benchmark's context."""
    if scaling is None:
        return "No scaling run is recorded."
    c = scaling.get("context", {})
    load = c.get("load_avg") or []
    return (f"Run {c.get('date', '?')} on {c.get('num_cpus', '?')} CPUs at {c.get('mhz_per_cpu', '?')} MHz"
            + (f", load average at start {', '.join(f'{x:.2f}' for x in load)}" if load else "")
            + "; command: `queue_bench --threads=1,2,4,8,16 --benchmark_filter=BM_Push "
            "--benchmark_repetitions=3 --benchmark_report_aggregates_only=true` (median of 3).")


def memory_per_reference(r):
    ours = r.find("memory", strategy="cuda_reclaim")
    cas = r.find("memory", strategy="cas_pending_call")
    mutexes = [r.find("memory", strategy=s) for s in ("mutex_vector", "mutex_deque")]
    if ours is None or cas is None or None in mutexes:
        return ""
    mutex_bytes = " and ".join(f"{row['bytes_per_pending']:.1f}" for row in mutexes)
    return (f"In this run a pending reference costs cuda-reclaim {ours['bytes_per_pending']:.1f} bytes of RSS "
            f"(a pointer plus block overhead), the mutex anchors {mutex_bytes}, and cuda.core's node "
            f"{cas['bytes_per_pending']:.1f}.")


def gpu_wakeups(gpu):
    if gpu is None or "stats" not in gpu:
        return ""
    writes = gpu["stats"].get("eventfd_writes", "?")
    return (f" Section 6 shows it on a GPU: {writes} eventfd {'write' if writes == 1 else 'writes'} for "
            f"{gpu['handed_over']} hand-overs from CUDA's thread.")


def all_facts(r, gpu, command, scaling=None):
    """Every $name of the template that is a number or a sentence with numbers of this run."""
    return {
        "run_facts": run_facts(r.py, command),
        "oversubscribed": oversubscribed(r.py),
        "latency_spacing": latency_setting(r, "spacing_us", 1e-3, "ms"),
        "latency_grace": latency_setting(r, "grace_s", 1e3, "ms"),
        "drain_n": section_n(r, "drain"),
        "memory_n": section_n(r, "memory"),
        "switch_interval": fmt_ms(r.py["machine"]["switch_interval_s"]),
        "producer_gap": producer_gap(r),
        "producer_repeats": producer_repeats(r),
        "idle_p99": idle_p99(r),
        "producer_drain_cost": producer_drain_cost(r),
        "pending_call_busy": pending_call_busy(r),
        "dequeue_share": dequeue_share(r),
        "memory_per_reference": memory_per_reference(r),
        "gpu_wakeups": gpu_wakeups(gpu),
        "push_breakdown": push_breakdown(r),
        "busy_latency": busy_latency(r),
        "drain_breakdown": drain_breakdown(r),
        "scaling_facts": scaling_facts(scaling),
    }
