"""The tables of docs/benchmarks.md, each from the rows of one run (bench_python.py's JSON and
queue_bench's Google Benchmark JSON), and the list of rows where cuda-reclaim is slower."""

import math
import re

PRODUCER_STRATEGIES = ("noop", "cuda_reclaim", "cuda_reclaim_no_drain", "mutex_vector", "mutex_deque",
                       "cas_pending_call", "with_gil")
ANCHORS = {
    "noop": "no hand-over (timer floor)",
    "cuda_reclaim": "**cuda-reclaim** (capsule host_destructor)",
    "cuda_reclaim_no_drain": "cuda-reclaim, automatic drain off (nothing drains during the run)",
    "mutex_vector": "mutex + vector (PyO3 pool)",
    "mutex_deque": "mutex + deque (jaxlib)",
    "cas_pending_call": "CAS stack + coalesced Py_AddPendingCall (cuda.core)",
    "cas_stack": "CAS stack, preallocated nodes (cuda.core)",
    "with_gil": "`with gil: Py_DECREF`",
    "plain_decref_loop": "plain Py_DECREF loop over an array (limit)",
    "plain_decref_loop_written_elsewhere": "plain Py_DECREF loop over an array that another thread wrote (the limit of a hand-over)",
    "plain_release_fn_loop": "bindings' batch release action over the same array (the drain minus the queue)",
    "plain_loop": "plain loop over an array (limit)",
    "moodycamel_bulk": "moodycamel's bulk dequeue alone, 512 at a time, then the release over each batch (the floor of a drain built on it)",
}
QUEUE_STRATEGIES_CPP = ("cuda_reclaim", "mutex_vector", "mutex_deque", "cas_stack")
LATENCY_KEYS = (
    ("busy", "cuda_reclaim", "thread"), ("busy", "cas_pending_call", "-"),
    ("sleep", "cuda_reclaim", "thread"), ("sleep", "cas_pending_call", "-"),
    ("asyncio", "cuda_reclaim", "thread"), ("asyncio", "cuda_reclaim", "asyncio_fd"),
    ("asyncio", "cas_pending_call", "-"),
)
DRAIN_METHODS = (("plain_decref_loop", "all"), ("plain_release_fn_loop", "all"),
                 ("plain_decref_loop_written_elsewhere", "all"), ("cuda_reclaim", 64), ("cuda_reclaim", 4096), ("cuda_reclaim", "all"),
                 ("mutex_vector", "all"), ("mutex_deque", "all"), ("cas_pending_call", "all"))
DRAIN_FATES = ("die", "survive", "die, scattered")  # as bench_python.py's
CPP_DRAIN = (("plain_loop", 0), ("cuda_reclaim", 64), ("cuda_reclaim", 4096), ("cuda_reclaim", 0),
             ("moodycamel_bulk", 0), ("mutex_vector", 0), ("mutex_deque", 0), ("cas_stack", 0))
CPP_DRAIN_PUSHED_ELSEWHERE = ("cuda_reclaim", "moodycamel_bulk", "mutex_vector", "mutex_deque", "cas_stack")
CLOCK_RESOLUTION_NS = 10  # steady_clock's step as seen in the producer rows (p50s move in 10 ns steps)
MEMORY_STRATEGIES = ("cuda_reclaim", "mutex_vector", "mutex_deque", "cas_pending_call")


def fmt_ns(ns):
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    if ns == math.inf:
        return "never¹"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_ns_close(ns, other):
    """A time next to another it is compared with: a tenth of a nanosecond where whole ones would print the
    two alike."""
    if ns is not None and other is not None and ns < 1e3 and other < 1e3 and round(ns) == round(other):
        return f"{ns:.1f} ns"
    return fmt_ns(ns)


def fmt_ratio(value, base):
    if base in (None, 0) or value is None:
        return "–"
    if value == math.inf and base == math.inf:
        return "–"
    if value == math.inf:
        return "∞"
    if base == math.inf:
        return "≪1 (anchor: never)"
    return f"{value / base:.2f}×"


def count(n):
    """A count as the report prints it: 10⁶ for a power of ten from a million up, else with separators."""
    if n is None:
        return "–"
    if n >= 10**6 and 10 ** round(math.log10(n)) == n:
        return "10" + "".join("⁰¹²³⁴⁵⁶⁷⁸⁹"[int(d)] for d in str(round(math.log10(n))))
    return f"{n:,}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)



# --- loading ------------------------------------------------------------------------------------------


class Results:
    def __init__(self, py, cpp):
        self.py = py
        self.cpp_json = cpp
        self.missing = []
        self.rows = py["rows"]
        self.cpp_rows = {}
        for bench in cpp.get("benchmarks", []):
            if bench.get("run_type") == "aggregate" and bench.get("aggregate_name") != "median":
                continue
            self.cpp_rows[bench["run_name"]] = bench

    def find(self, section, **keys):
        for row in self.rows:
            if row["section"] == section and all(row.get(k) == v for k, v in keys.items()):
                return row
        self.missing.append(f"python {section} {keys}")
        return None

    def bench(self, pattern):
        for name, bench in self.cpp_rows.items():
            if re.fullmatch(pattern, name):
                return bench
        self.missing.append(f"c++ {pattern}")
        return None


# --- sections -------------------------------------------------------------------------------------


def producer_tables(r):
    out = []
    for main, title in (("idle", "main thread idle (blocked in C, GIL free)"),
                        ("busy", "main thread busy (running bytecode: the GIL is contended)")):
        rows = []
        for threads in (1, 2, 4):
            base = r.find("producer", main=main, threads=threads, strategy="cuda_reclaim")
            for strategy in PRODUCER_STRATEGIES:
                row = r.find("producer", main=main, threads=threads, strategy=strategy)
                if row is None or base is None:
                    continue
                rows.append([threads, ANCHORS[strategy], row["n"], fmt_ns(row["p50"]), fmt_ns(row["p99"]),
                             fmt_ns(row["max"]), fmt_ratio(row["p50"], base["p50"]),
                             fmt_ratio(row["p99"], base["p99"])])
        out.append(f"#### {title}\n\n" + table(
            ["producers", "strategy", "calls", "p50", "p99", "max", "p50 / cuda-reclaim", "p99 / cuda-reclaim"],
            rows))
    return "\n\n".join(out)


def push_thread_counts(r):
    """The producer thread counts of the C++ push rows in this run's JSON, ascending."""
    counts = set()
    for name in r.cpp_rows:
        match = re.fullmatch(r"BM_Push/cuda_reclaim/iterations:\d+/real_time/threads:(\d+)", name)
        if match:
            counts.add(int(match.group(1)))
    return sorted(counts) or [1, 2, 4]


def cpp_push_rows(r):
    """(threads, strategy, bench) for every C++ push row, cuda-reclaim first in each thread count."""
    out = []
    for threads in push_thread_counts(r):
        for strategy in QUEUE_STRATEGIES_CPP:
            bench = r.bench(rf"BM_Push/{strategy}/iterations:\d+/real_time/threads:{threads}")
            if bench is not None:
                out.append((threads, strategy, bench))
    return out


def cpp_push_table(r):
    rows = []
    for threads in push_thread_counts(r):
        found = {}
        for strategy in QUEUE_STRATEGIES_CPP:
            bench = r.bench(rf"BM_Push/{strategy}/iterations:\d+/real_time/threads:{threads}")
            if bench is not None:
                found[strategy] = bench
        base = found.get("cuda_reclaim")
        for strategy, bench in found.items():
            # cpu_time: all threads' CPU time per push (a preempted thread does not count, so a loaded
            # machine inflates it less than wall time); items_per_second: all pushes over wall time.
            rows.append([threads, ANCHORS[strategy], fmt_ns(bench["cpu_time"]),
                         f"{bench['items_per_second'] / 1e6:.1f}",
                         fmt_ratio(bench["cpu_time"], base["cpu_time"]) if base else "–"])
    return table(["threads", "strategy", "CPU time per push", "M pushes/s (all threads, wall time)",
                  "CPU / cuda-reclaim"], rows)


PUSH_PARTS = (
    ("exchange", "one atomic exchange on a private cache line, then a store (the barrier)"),
    ("moodycamel_enqueue", "one moodycamel explicit-producer enqueue (the storage)"),
)


def push_parts_table(r):
    """Where the time of one cuda-reclaim push goes, one thread: its parts measured alone, the whole push,
    and the CAS stack's push."""
    rows = []
    for part, label in PUSH_PARTS:
        bench = r.bench(rf"BM_PushPart/{part}/iterations:\d+")
        if bench is not None:
            rows.append([label, fmt_ns(bench["cpu_time"])])
    ours = r.bench(r"BM_Push/cuda_reclaim/iterations:\d+/real_time/threads:1")
    cas = r.bench(r"BM_Push/cas_stack/iterations:\d+/real_time/threads:1")
    if ours is not None:
        rows.append(["**cuda-reclaim** push: lane exchange, closed and signal checks, count, enqueue, "
                     "free the lane", fmt_ns(ours["cpu_time"])])
    if cas is not None:
        rows.append([ANCHORS["cas_stack"] + " push: link the node, one compare-exchange, check its flag",
                     fmt_ns(cas["cpu_time"])])
    return table(["one thread, C++", "CPU time per push"], rows)


def push_groups(r):
    """(threads, {strategy: bench}, cuda-reclaim's bench or None) for each thread count of the C++ push rows."""
    for threads in push_thread_counts(r):
        found = {strategy: bench for t, strategy, bench in cpp_push_rows(r) if t == threads}
        yield threads, found, found.get("cuda_reclaim")


def scaling_table(scaling):
    """The producer-scaling table from a queue_bench JSON run with --threads=1,2,4,8,16 on a many-core
    host, or a line saying there is none."""
    if scaling is None:
        return "No scaling results given to this report (`--scaling`)."
    rows = []
    for threads, found, base in push_groups(Results({"rows": []}, scaling)):
        for strategy, bench in found.items():
            rows.append([threads, ANCHORS[strategy], fmt_ns(bench["cpu_time"]),
                         f"{bench['items_per_second'] / 1e6:.1f}",
                         fmt_ratio(bench["items_per_second"], base["items_per_second"]) if base else "–",
                         fmt_ratio(bench["cpu_time"], base["cpu_time"]) if base else "–"])
    return table(["producers", "strategy", "CPU time per push", "M pushes/s (all threads, wall time)",
                  "throughput / cuda-reclaim", "CPU / cuda-reclaim"], rows)


# The bullet of the report's "Why cuda-reclaim loses" section that explains each kind of row the "slower" list
# can name, so that every row listed points at its explanation.
WHY_SLOWER = {
    "push": "Producer cost, one thread",
    "shared_slot": "Two producers on one lane",
    "latency": "Release latency, busy main thread",
    "drain": "Drain throughput",
    "memory": "Memory after draining",
}


def why(kind):
    """The pointer from a "slower" row to the bullet that explains it."""
    return f" (why: *{WHY_SLOWER[kind]}*)"


def scaling_slower_rows(scaling):
    """Scaling rows where an anchor pushes with less CPU time or more throughput than cuda-reclaim."""
    if scaling is None:
        return []
    notes = []
    for threads, found, base in push_groups(Results({"rows": []}, scaling)):
        for strategy, bench in found.items():
            if base is None or strategy == "cuda_reclaim":
                continue
            if bench["cpu_time"] < base["cpu_time"]:
                notes.append(f"scaling, C++ push CPU time, {threads} producer(s): {ANCHORS[strategy]} "
                             f"{fmt_ns_close(bench['cpu_time'], base['cpu_time'])} vs {fmt_ns_close(base['cpu_time'], bench['cpu_time'])}"
                             + why("push" if threads == 1 else "shared_slot"))
    return notes


def latency_table(r):
    rows = []
    base = {}
    for main, strategy, drain in LATENCY_KEYS:
        row = r.find("latency", main=main, strategy=strategy, drain=drain)
        if row is None:
            continue
        if strategy == "cas_pending_call":
            base[main] = row
        rows.append((main, strategy, drain, row))
    out = []
    for main, strategy, drain, row in rows:
        anchor = base.get(main)
        how = {"thread": "auto-drain thread", "asyncio_fd": "asyncio fd (add_reader)",
               "-": "its pending call"}[drain]
        out.append([main, ANCHORS[strategy], how, f"{row['released_in_window']}/{row['n']}", fmt_ns(row["p50"]),
                    fmt_ns(row["p99"]), fmt_ns(row["max"]),
                    fmt_ratio(row["p50"], anchor["p50"]) if anchor else "–"])
    return table(["main thread", "strategy", "drained by", "released in window", "p50", "p99", "max",
                  "p50 / cuda.core's"], out)


def drain_tables(r):
    rows = []
    for fate in DRAIN_FATES:
        limit = r.find("drain", fate=fate, strategy="plain_decref_loop", batch="all")
        for strategy, batch in DRAIN_METHODS:
            row = r.find("drain", fate=fate, strategy=strategy, batch=batch)
            if row is None or limit is None:
                continue
            label = ANCHORS[strategy] + (f", `drain({batch})` from Python" if strategy == "cuda_reclaim" else "")
            medians = ("median_ns" in row and "median_ns" in limit)
            rows.append([fate, label, f"{row['refs_per_s'] / 1e6:.1f}", fmt_ns(row["ns"] / row["n"]),
                         f"{row['refs_per_s'] / limit['refs_per_s']:.0%}",
                         f"{limit['median_ns'] / row['median_ns']:.0%}" if medians else "–"])
    python = table(["objects", "drain", "M refs/s", "per ref", "of the limit", "of the limit, medians"], rows)
    rows = []
    limit = r.bench(r"BM_Drain/plain_loop/0/iterations:\d+")
    for strategy, batch in CPP_DRAIN:
        bench = r.bench(rf"BM_Drain/{strategy}/{batch}/iterations:\d+")
        if bench is None or limit is None:
            continue
        rows.append([ANCHORS[strategy] + (f", max_items={batch or 'all'}" if strategy == "cuda_reclaim" else ""),
                     f"{bench['items_per_second'] / 1e6:.0f}",
                     f"{bench['items_per_second'] / limit['items_per_second']:.0%}"])
    for strategy in CPP_DRAIN_PUSHED_ELSEWHERE:
        bench = r.bench(rf"BM_DrainPushedElsewhere/{strategy}/iterations:\d+")
        if bench is None or limit is None:
            continue
        rows.append([ANCHORS[strategy] + ", all, pushed by another thread",
                     f"{bench['items_per_second'] / 1e6:.0f}",
                     f"{bench['items_per_second'] / limit['items_per_second']:.0%}"])
    cpp = table(["drain (C++, no-op release)", "M items/s", "of the limit"], rows)
    return python, cpp


def idle_tables(r):
    drain = r.find("idle_call", call="empty drain()")
    noop = r.find("idle_call", call="noop()")
    thread = r.find("idle_thread")
    rows = []
    if drain and noop:
        for row in (drain, noop):
            rows.append([f"`{row['call']}`" if row is drain else "`_reclaim_bench.noop()` (no-op C function)",
                         fmt_ns(row["ns_per_call"]), fmt_ns(row["median_ns_per_call"]),
                         fmt_ratio(row["ns_per_call"], noop["ns_per_call"])])
    calls = table(["call", "best of 5", "median of 5", "/ no-op"], rows)
    idle = "–"
    if thread:
        idle = table(["idle for", "auto-drain thread CPU time", "share of one core", "wake-ups", "drains"],
                     [[f"{thread['seconds']:.1f} s", fmt_ns(thread["cpu_ns"]), f"{thread['cpu_share']:.4%}",
                       thread["eventfd_writes"], thread["nonempty_drains"]]])
    return calls, idle


def memory_tables(r):
    rows = []
    for strategy in MEMORY_STRATEGIES:
        row = r.find("memory", strategy=strategy)
        if row is None:
            continue
        trimmed = row.get("trimmed_rss_delta", row["drained_rss_delta"])
        trim = f"{trimmed / 2**20:.1f} MiB" + (f" (trim() {fmt_ns(row['trim_ns'])})" if "trim_ns" in row else " (nothing to trim)")
        rows.append([ANCHORS[strategy], f"{row['n']:,}", f"{row['bytes_per_pending']:.1f}",
                     f"{row['burst_rss_delta'] / 2**20:.1f} MiB", f"{row['drained_rss_delta'] / 2**20:.1f} MiB",
                     trim])
    python = table(["strategy", "pending refs", "RSS bytes per pending ref", "RSS after the burst",
                    "RSS after draining", "RSS after trim()"], rows)
    rows = []
    pointers = None
    for strategy in QUEUE_STRATEGIES_CPP:
        bench = r.bench(rf"BM_HeapBytes/{strategy}/\d+/iterations:1")
        if bench is None:
            continue
        pointers = int(bench["run_name"].split("/")[2])
        rows.append([ANCHORS[strategy], f"{bench['bytes_per_pending']:.2f}",
                     f"{bench['bytes_per_item_after_drain']:.2f}",
                     f"{bench.get('bytes_per_item_after_trim', bench['bytes_per_item_after_drain']):.2f}"])
    cpp = table([f"strategy (C++, {count(pointers)} pointers, one thread)", "heap bytes per pending pointer",
                 "heap bytes per pointer still held after draining", "… after trim()"], rows)
    return python, cpp


def slower_rows(r):
    """Rows of this run where cuda-reclaim's p50 is worse than an anchor's: listed, not hidden."""
    notes = []
    within_clock = 0
    for main in ("idle", "busy"):
        for threads in (1, 2, 4):
            base = r.find("producer", main=main, threads=threads, strategy="cuda_reclaim")
            for strategy in ("mutex_vector", "mutex_deque", "cas_pending_call", "with_gil"):
                row = r.find("producer", main=main, threads=threads, strategy=strategy)
                if not (base and row and row["p50"] < base["p50"]):
                    continue
                if base["p50"] - row["p50"] <= CLOCK_RESOLUTION_NS:
                    within_clock += 1
                    continue
                quiet = r.find("producer", main=main, threads=threads, strategy="cuda_reclaim_no_drain")
                notes.append(f"producer p50, main {main}, {threads} thread(s): {ANCHORS[strategy]} "
                             f"{fmt_ns(row['p50'])} vs {fmt_ns(base['p50'])}"
                             + (f" ({fmt_ns(quiet['p50'])} with the automatic drain off)" if quiet else "")
                             + why("push"))
    if within_clock:
        notes.append(f"producer p50: an anchor is ahead by at most {CLOCK_RESOLUTION_NS} ns (one tick of the "
                     f"per-call clock) in {within_clock} (row, anchor) pairs" + why("push"))
    for main in ("busy", "sleep", "asyncio"):
        anchor = r.find("latency", main=main, strategy="cas_pending_call", drain="-")
        best = [row for row in r.rows if row["section"] == "latency" and row["main"] == main
                and (main, row["strategy"], row["drain"]) in LATENCY_KEYS and row["strategy"] == "cuda_reclaim"]
        if anchor and best:
            best_row = min(best, key=lambda row: row["p50"])
            if anchor["p50"] < best_row["p50"]:
                notes.append(f"release latency p50, main {main}: cuda.core's pending call {fmt_ns(anchor['p50'])} "
                             f"vs cuda-reclaim's best ({best_row['drain']}) {fmt_ns(best_row['p50'])}" + why("latency"))
    for fate in DRAIN_FATES:
        ours = r.find("drain", fate=fate, strategy="cuda_reclaim", batch="all")
        for strategy in ("mutex_vector", "mutex_deque", "cas_pending_call"):
            row = r.find("drain", fate=fate, strategy=strategy, batch="all")
            if ours and row and row["refs_per_s"] > ours["refs_per_s"]:
                notes.append(f"drain throughput ({fate}): {ANCHORS[strategy]} {row['refs_per_s'] / 1e6:.1f} "
                             f"vs {ours['refs_per_s'] / 1e6:.1f} M refs/s" + why("drain"))
    for threads, strategy, bench in cpp_push_rows(r):
        base = r.bench(rf"BM_Push/cuda_reclaim/iterations:\d+/real_time/threads:{threads}")
        if strategy != "cuda_reclaim" and base is not None and bench["cpu_time"] < base["cpu_time"]:
            notes.append(f"C++ push CPU time, {threads} thread(s): {ANCHORS[strategy]} "
                         f"{fmt_ns_close(bench['cpu_time'], base['cpu_time'])} "
                         f"vs {fmt_ns_close(base['cpu_time'], bench['cpu_time'])}" + why("push"))
    ours = r.bench(r"BM_Drain/cuda_reclaim/0/iterations:\d+")
    for strategy in ("mutex_vector", "mutex_deque", "cas_stack"):
        bench = r.bench(rf"BM_Drain/{strategy}/0/iterations:\d+")
        if ours is not None and bench is not None and bench["items_per_second"] > ours["items_per_second"]:
            notes.append(f"C++ drain (no-op release): {ANCHORS[strategy]} {bench['items_per_second'] / 1e6:.0f} "
                         f"vs {ours['items_per_second'] / 1e6:.0f} M items/s" + why("drain"))
    ours = r.find("memory", strategy="cuda_reclaim")
    for strategy in ("mutex_vector", "mutex_deque", "cas_pending_call"):
        row = r.find("memory", strategy=strategy)
        # Half a MiB of slack: RSS moves in pages, and the fresh storage's own reserve is allocated anew.
        if ours and row and row["drained_rss_delta"] + 2**19 < ours.get("trimmed_rss_delta", ours["drained_rss_delta"]):
            notes.append(f"RSS after draining (and trim()): {ANCHORS[strategy]} "
                         f"{row['drained_rss_delta'] / 2**20:.1f} MiB vs "
                         f"{ours.get('trimmed_rss_delta', ours['drained_rss_delta']) / 2**20:.1f} MiB" + why("memory"))
    return notes


# Instruction counts (bench/count_instructions.py): the methods in the drain table's order, and the parts of
# a method's own code in the order they run for cuda-reclaim.
INSTRUCTION_METHODS = ("plain_decref_loop", "plain_release_fn_loop", "cuda_reclaim", "mutex_vector", "cas_pending_call")
INSTRUCTION_PARTS = {
    "release_loop": "the release loop (bindings' release action for cuda-reclaim)",
    "copy": "moodycamel's copy into the batch",
    "drain_loop": "the drain loop (counts, signal)",
}


def instruction_results(data, path):
    """The drain section's instruction table from count_instructions.py's JSON, or a line saying there is none."""
    if data is None:
        return "No instruction counts given to this report (`--instructions`)."
    if data.get("skipped"):
        return f"No instruction counts in `{path}`: {data['skipped']}."
    methods = data["methods"]
    limit = methods["plain_decref_loop"]["per_ref"]
    rows = []
    for method in INSTRUCTION_METHODS:
        counted = methods.get(method)
        if counted is None:
            continue
        parts = counted["parts_per_ref"]
        chain = parts.get("release_chain", 0.0)
        label = ANCHORS[method] + (", `drain()` from Python" if method == "cuda_reclaim" else "")
        rows.append([label, f"{counted['per_ref']:.1f}", f"{chain:.1f}", f"{counted['per_ref'] - chain:.1f}",
                     f"{limit / counted['per_ref']:.0%}"])
    n = methods["plain_decref_loop"]["n"]
    ours = methods.get("cuda_reclaim")
    split = ""
    if ours is not None:
        split = " cuda-reclaim's own instructions per reference, by part: " + ", ".join(
            f"{INSTRUCTION_PARTS[part]} {ours['parts_per_ref'][part]:.1f}"
            for part in INSTRUCTION_PARTS if part in ours["parts_per_ref"]) + "."
    return "\n".join([
        f"Counted with Python {data['python']} (results: `{path}`; command: `bazel run -c opt "
        f"//bench:count_instructions -- --json OUT`): {n:,} objects that die, in address order, each method's "
        "drain function and everything it calls.",
        "",
        table(["drain (die)", "instructions per ref", "release chain (CPython, the deallocator)",
               "the method's own", "the limit's count over this"], rows),
        "",
        split.strip(),
    ])


def instruction_gap(data, r):
    """The drain bullet's account of the die gap in instructions (count_instructions.py's JSON, and this
    run's die rows to compare with), or ''."""
    if data is None or data.get("skipped"):
        return ""
    methods = data["methods"]
    loop, ours = methods["plain_decref_loop"], methods.get("cuda_reclaim")
    vector, stack = methods.get("mutex_vector"), methods.get("cas_pending_call")
    if ours is None:
        return ""
    own = ours["parts_per_ref"]
    loop_own = loop["parts_per_ref"].get("release_loop", 0.0)
    queue = own.get("copy", 0.0) + own.get("drain_loop", 0.0)
    without_extras = loop["per_ref"] + queue
    limit_row = r.find("drain", fate="die", strategy="plain_decref_loop", batch="all")
    ours_row = r.find("drain", fate="die", strategy="cuda_reclaim", batch="all")
    time_ratio = (f", the *die* row's time ratio in this run {ours_row['refs_per_s'] / limit_row['refs_per_s']:.0%}"
                  if limit_row and ours_row else "")
    anchors = ", ".join(f"{name} {m['per_ref']:.1f}" for name, m in
                        (("the PyO3-style vector", vector), ("cuda.core's stack", stack)) if m is not None)
    return (
        f"In instructions (section 3's count, Python {data['python']}): the limit's loop executes "
        f"{loop['per_ref']:.1f} per dying reference ({loop_own:.1f} of them its own), {anchors}; cuda-reclaim's "
        f"drain {ours['per_ref']:.1f}, {ours['per_ref'] - loop['per_ref']:.1f} more than the loop: its release action "
        f"{own.get('release_loop', 0.0):.1f} against the loop's {loop_own:.1f}, moodycamel's copy "
        f"{own.get('copy', 0.0):.1f}, the drain loop {own.get('drain_loop', 0.0):.1f}. The count ratio is {loop['per_ref'] / ours['per_ref']:.0%}"
        f"{time_ratio}. A drain whose release action were the bare loop would "
        f"execute {without_extras:.1f} ({loop['per_ref'] / without_extras:.0%} of the loop's count): "
        + _instruction_verdict(loop["per_ref"] / ours["per_ref"], loop["per_ref"] / without_extras)
    )


def _instruction_verdict(count_ratio, bare_action_ratio):
    """What the counts say against a 90% target."""
    if count_ratio >= 0.9:
        return ("by count the drain itself is within a 90% target; what it executes beyond the loop is the "
                "queue's own share (the copy above all) and the release action's few extras.")
    if bare_action_ratio >= 0.9:
        return ("the queue's own share (the copy and the drain loop) fits within a 90% target; the "
                "release action's extras do not.")
    return "the queue's own share (the copy and the drain loop) alone misses a 90% target."
