"""bench/make_report.py — turns one benchmark run into docs/benchmarks.md (tables, ratios, a plot).

    python make_report.py --python PY.json --cpp CPP.json [--out docs/benchmarks.md] [--plot docs/x.png]
    python make_report.py --python PY.json --cpp CPP.json --check    # only: is every row there?

PY.json comes from bench/bench_python.py, CPP.json from `queue_bench --benchmark_format=json`. Every
ratio compares numbers of the same run. --check exits 1 naming the missing rows (the smoke test's only
assertion: no timing is ever asserted).
"""

import argparse
import json
import math
import os
import re
import sys

PRODUCER_STRATEGIES = ("noop", "cuda_reclaim", "mutex_vector", "mutex_deque", "cas_pending_call", "with_gil")
ANCHORS = {
    "noop": "no hand-over (timer floor)",
    "cuda_reclaim": "**cuda-reclaim** (capsule host_destructor)",
    "mutex_vector": "mutex + vector (PyO3 pool)",
    "mutex_deque": "mutex + deque (jaxlib)",
    "cas_pending_call": "CAS stack + coalesced Py_AddPendingCall (cuda.core)",
    "cas_stack": "CAS stack, preallocated nodes (cuda.core)",
    "with_gil": "`with gil: Py_DECREF`",
    "plain_decref_loop": "plain Py_DECREF loop over an array (limit)",
    "plain_release_fn_loop": "plain loop calling bindings' release action (Py_DECREF + PyErr_Occurred, via pointer)",
    "plain_loop": "plain loop over an array (limit)",
}
QUEUE_STRATEGIES_CPP = ("cuda_reclaim", "mutex_vector", "mutex_deque", "cas_stack")
LATENCY_KEYS = (
    ("busy", "cuda_reclaim", "thread"), ("busy", "cuda_reclaim", "gc"), ("busy", "cas_pending_call", "-"),
    ("sleep", "cuda_reclaim", "thread"), ("sleep", "cuda_reclaim", "gc"), ("sleep", "cas_pending_call", "-"),
    ("asyncio", "cuda_reclaim", "thread"), ("asyncio", "cuda_reclaim", "asyncio_fd"),
    ("asyncio", "cuda_reclaim", "gc"), ("asyncio", "cas_pending_call", "-"),
)
DRAIN_METHODS = (("plain_decref_loop", "all"), ("plain_release_fn_loop", "all"), ("cuda_reclaim", 64), ("cuda_reclaim", 4096), ("cuda_reclaim", "all"),
                 ("mutex_vector", "all"), ("mutex_deque", "all"), ("cas_pending_call", "all"))
CPP_DRAIN = (("plain_loop", 0), ("cuda_reclaim", 64), ("cuda_reclaim", 4096), ("cuda_reclaim", 0),
             ("mutex_vector", 0), ("mutex_deque", 0), ("cas_stack", 0))
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


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- loading ----------------------------------------------------------------------------------------


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


def cpp_push_table(r):
    rows = []
    for threads in (1, 2, 4):
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
        how = {"thread": "auto-drain thread", "gc": "gc callback", "asyncio_fd": "asyncio fd (add_reader)",
               "-": "its pending call"}[drain]
        out.append([main, ANCHORS[strategy], how, f"{row['released_in_window']}/{row['n']}", fmt_ns(row["p50"]),
                    fmt_ns(row["p99"]), fmt_ns(row["max"]),
                    fmt_ratio(row["p50"], anchor["p50"]) if anchor else "–"])
    return table(["main thread", "strategy", "drained by", "released in window", "p50", "p99", "max",
                  "p50 / cuda.core's"], out)


def drain_tables(r):
    rows = []
    for fate in ("die", "survive"):
        limit = r.find("drain", fate=fate, strategy="plain_decref_loop", batch="all")
        for strategy, batch in DRAIN_METHODS:
            row = r.find("drain", fate=fate, strategy=strategy, batch=batch)
            if row is None or limit is None:
                continue
            label = ANCHORS[strategy] + (f", `drain({batch})` from Python" if strategy == "cuda_reclaim" else "")
            rows.append([fate, label, f"{row['refs_per_s'] / 1e6:.1f}", fmt_ns(row["ns"] / row["n"]),
                         f"{row['refs_per_s'] / limit['refs_per_s']:.0%}"])
    python = table(["objects", "drain", "M refs/s", "per ref", "of the limit"], rows)
    rows = []
    limit = r.bench(r"BM_Drain/plain_loop/0/iterations:\d+")
    for strategy, batch in CPP_DRAIN:
        bench = r.bench(rf"BM_Drain/{strategy}/{batch}/iterations:\d+")
        if bench is None or limit is None:
            continue
        rows.append([ANCHORS[strategy] + (f", max_items={batch or 'all'}" if strategy == "cuda_reclaim" else ""),
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
                       thread["wakeups"], thread["drain_calls"]]])
    return calls, idle


def memory_tables(r):
    rows = []
    for strategy in MEMORY_STRATEGIES:
        row = r.find("memory", strategy=strategy)
        if row is None:
            continue
        rows.append([ANCHORS[strategy], f"{row['n']:,}", f"{row['bytes_per_pending']:.1f}",
                     f"{row['burst_rss_delta'] / 2**20:.1f} MiB", f"{row['drained_rss_delta'] / 2**20:.1f} MiB"])
    python = table(["strategy", "pending refs", "RSS bytes per pending ref", "RSS after the burst",
                    "RSS after draining"], rows)
    rows = []
    for strategy in QUEUE_STRATEGIES_CPP:
        bench = r.bench(rf"BM_HeapBytes/{strategy}/\d+/iterations:1")
        if bench is None:
            continue
        rows.append([ANCHORS[strategy], f"{bench['bytes_per_pending']:.2f}",
                     f"{bench['bytes_per_item_after_drain']:.2f}"])
    cpp = table(["strategy (C++, 10⁶ pointers, one thread)", "heap bytes per pending pointer",
                 "heap bytes per pointer still held after draining"], rows)
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
                notes.append(f"producer p50, main {main}, {threads} thread(s): {ANCHORS[strategy]} "
                             f"{fmt_ns(row['p50'])} vs {fmt_ns(base['p50'])}")
    if within_clock:
        notes.append(f"producer p50: an anchor is ahead by at most {CLOCK_RESOLUTION_NS} ns (one tick of the "
                     f"per-call clock) in {within_clock} (row, anchor) pairs")
    for main in ("busy", "sleep", "asyncio"):
        anchor = r.find("latency", main=main, strategy="cas_pending_call", drain="-")
        best = [row for row in r.rows if row["section"] == "latency" and row["main"] == main
                and row["strategy"] == "cuda_reclaim"]
        if anchor and best:
            best_row = min(best, key=lambda row: row["p50"])
            if anchor["p50"] < best_row["p50"]:
                notes.append(f"release latency p50, main {main}: cuda.core's pending call {fmt_ns(anchor['p50'])} "
                             f"vs cuda-reclaim's best ({best_row['drain']}) {fmt_ns(best_row['p50'])}")
    for fate in ("die", "survive"):
        ours = r.find("drain", fate=fate, strategy="cuda_reclaim", batch="all")
        for strategy in ("mutex_vector", "mutex_deque", "cas_pending_call"):
            row = r.find("drain", fate=fate, strategy=strategy, batch="all")
            if ours and row and row["refs_per_s"] > ours["refs_per_s"]:
                notes.append(f"drain throughput ({fate}): {ANCHORS[strategy]} {row['refs_per_s'] / 1e6:.1f} "
                             f"vs {ours['refs_per_s'] / 1e6:.1f} M refs/s")
    return notes


# --- the document -------------------------------------------------------------------------------------

WHY = """\
### Why cuda-reclaim loses where it loses (and what would win those rows)

- **Producer cost, p50.** In the Python-hosted rows the difference is 10–20 ns, at the resolution of
  the clock used for the per-call stamps (the no-op row shows the floor). The C++ rows show where it
  goes: a cuda-reclaim push is two read-modify-writes on process-wide counters (`push_admissions_`
  seq_cst and `push_completions_` release, which make `close()` race-free and every hand-over
  countable), a seq_cst fence for the wake-up handshake (an `mfence` on x86) and a moodycamel enqueue,
  which first finds the calling thread's implicit producer by a hash lookup on the thread id; cuda.core's
  push is one CAS. A `perf` profile of a 10⁶-push burst puts the lookup and the fence at about a fifth
  of the push each. With 2–4 producers the shared counter lines also move between cores on every push.
  What would narrow it (each to be measured with this benchmark): sharded admission/completion counters
  (one cache line per producer slot or per CPU), summed by `close()` and `snapshot()`, which keeps the
  close race exact; and a per-thread cache of the producer lookup (moodycamel's implicit producers are
  already per thread; a `thread_local` pointer would skip the hash).
- **Producer cost, p99 with an idle owner.** When the auto-drain thread keeps up, it empties the queue
  after almost every push, so the next push is an empty→non-empty edge and pays one `write(2)` to the
  eventfd (a few hundred ns). The anchors never signal anyone from the producer (the mutex anchors are
  drained on their library's next entry; cuda.core's pending call stays scheduled while the main thread
  is blocked). Done since the first run of this report: the drain thread *lingers* — a drain that found
  work keeps the signal set (the fd itself goes quiet) and the thread looks again after 1 ms, so pushes
  in that time skip the write; the first drain that finds nothing clears the signal and the thread blocks
  again. A steady stream costs at most one write per millisecond, for at most 1 ms added latency on a
  push that arrives meanwhile (pinned by
  `test_drain_thread_lingers_under_steady_traffic_so_producers_skip_most_eventfd_writes`: 4000 pushes
  50 µs apart made 3972 writes before, far fewer than 1000 now; on the H200, section 6, 1 write for
  40100 hand-overs instead of 20485).
- **Release latency, busy main thread.** The auto-drain thread must take the GIL from a thread that runs
  bytecode; CPython hands it over after the switch interval (5 ms), so p50 is a few ms (gc mode does
  better on allocation-heavy code: it drains at every collection). cuda.core's pending call never ran in
  the window on CPython 3.10–3.12 (see the note) but runs within about 10 µs on 3.13. Done on 3.13+:
  when the drain thread wakes, it also schedules one bounded drain with `Py_AddPendingCall` (it is a
  Python-owned thread, so the producer path still never touches Python), then waits for the GIL as
  before; whichever runs first drains (pinned by
  `test_busy_main_thread_releases_through_the_nudge_without_waiting_for_the_gil`). On 3.10–3.12 that
  gains nothing, for the same reason cuda.core's call does not run, so it is not done there.
- **Drain throughput.** Two costs, both visible in the tables: bindings' release action (a call through a
  function pointer per reference plus a `PyErr_Occurred()` call, so that a finalizer's exception goes to
  `sys.unraisablehook` and never stops the drain; the "plain loop calling bindings' release action" row),
  and the dequeue itself (moodycamel's bulk dequeue runs at about half the speed of a loop over an array
  in the C++ table, where the anchors' swapped-out vector or detached list are plain arrays or lists). What
  would narrow it: a batch release action (`void release(void** items, size_t n, void* context)`) so
  that bindings runs one tight `Py_DECREF` loop per 128-item batch, fetching the thread state once and
  checking the error indicator inline, and prefetching the next objects' headers while it releases.
- **Memory after draining.** moodycamel keeps its blocks for reuse and never returns them, so the queue's
  high-water mark stays resident after a burst; the anchors free their buffers when they are swapped
  out. Bytes per pending reference are on par with the mutex anchors (8 bytes + block overhead) and half
  of cuda.core's node. Not worth a design change for CUDA's steady streams; a process that expects rare
  huge bursts can see its high-water mark in `stats()["max_pending"]`.

¹ *never*: not released before the run's window closed (the last push plus 50 ms). A gc-mode drain
needs a collection, which a main thread sleeping in C or idle in an event loop never triggers; cuda.core's
pending call needs the main thread to run bytecode *and* to notice the call.
"""

NOTE_PENDING = """\
**Note on cuda.core's pending call with a busy main thread.** On CPython 3.10–3.12, a pending call added
from a thread other than the main thread is recorded, but the main thread's eval breaker is not set (the
breaker is computed on the calling thread, which cannot run pending calls): the main thread runs it only
when something else makes it re-check — another thread asking for the GIL, a signal, or the main thread
itself blocking and re-taking the GIL. Nothing else asks for the GIL during the cuda.core rows here, so
with a busy main thread its objects are not released within the window; in an application with other
Python threads it would run within about one switch interval. CPython 3.13 signals the main thread
directly. Checked with `--quick` runs on 3.10.13, 3.11.7 and 3.12.1 (never within the window) and 3.13.0
(released within about 10 µs).
"""


def document(r, args, plot_name):
    m = r.py["machine"]
    drain_py, drain_cpp = drain_tables(r)
    idle_calls, idle_thread = idle_tables(r)
    memory_py, memory_cpp = memory_tables(r)
    slower = slower_rows(r)
    parts = [
        "# Benchmarks: cuda-reclaim against the anchor strategies",
        "",
        "Generated by `bash bench/run_benchmarks.sh` (issue 7). Every ratio compares numbers measured in the "
        "same run, side by side; absolute times depend on the machine and its load, ratios much less. "
        "Speed is never asserted by a test; the smoke test `//bench:bench_smoke_test` only checks that every "
        "row below is produced.",
        "",
        f"- **Run:** {m['date']}{' (--quick: tiny sizes, not meaningful)' if r.py.get('quick') else ''}; "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['loadavg'])}",
        f"- **Machine:** {m['cpu']}, {m['cores']} cores; {m['platform']}",
        f"- **Python:** {m['python_impl']} {m['python']} (switch interval {m['switch_interval_s'] * 1e3:.0f} ms)",
        f"- **Command:** `{args.command}`",
        "",
    ]
    if args.caveat:
        parts += [f"> {args.caveat}", ""]
    parts += [
        "The anchors (bench/anchors.h, written from their descriptions, no code copied): PyO3's reference "
        "pool (mutex + vector, swapped out on the next GIL acquire), jaxlib's PythonRefManager (mutex + "
        "deque), cuda.core's deferred cleanup (lock-free CAS stack of preallocated nodes, `Py_IsInitialized()` "
        "gate, one coalesced `Py_AddPendingCall` per batch), and `with gil: Py_DECREF` "
        "(`PyGILState_Ensure`; `Py_DECREF`; `PyGILState_Release`). cuda-reclaim is driven through its public "
        "path: the capsule's `host_destructor`.",
        "",
        "## 1. Producer cost per hand-over",
        "",
        "Native `std::thread`s (not created by Python, like CUDA's callback thread) hand over one new "
        "reference per call, back to back; a `steady_clock` timestamp is taken around every call inside the "
        "thread. cuda-reclaim runs with its default automatic drain (a thread). The anchors' drains run "
        "after the run (as on their libraries' next GIL acquisition / API entry); cuda.core's pending call "
        "runs whenever the main thread lets it. The `noop` row is the cost of the timestamps themselves. "
        "On this 2-core machine, 4 producers are oversubscribed.",
        "",
        producer_tables(r),
        "",
        "The same push without Python (Google Benchmark, `//bench:queue_bench`, fake pointers, nobody "
        "draining during the run):",
        "",
        cpp_push_table(r),
        "",
        "## 2. Release latency (push → object released)",
        "",
        "One native thread hands over a `Probe` object every 1 ms; the Probe's `tp_dealloc` stamps the time "
        "of its release. The main thread is busy (running bytecode that leaves one small reference cycle per iteration, so gc "
        "collections happen), "
        "sleeping in C (`time.sleep` for the whole window), or idle in an asyncio loop (`await "
        "asyncio.sleep`).",
        "",
        latency_table(r),
        "",
        NOTE_PENDING,
        f"![producer cost and release latency]({plot_name})" if plot_name else "",
        "",
        "## 3. Drain throughput",
        "",
        "References released per second: 10⁶ references (fewer with --quick) handed over by a native thread, "
        "then released on the main thread; *die*: the queue held the only reference (each release "
        "deallocates); *survive*: the object lives on. The limit is a plain loop of `Py_DECREF` over a C "
        "array. cuda-reclaim's row is the public `cuda_reclaim.drain(max_items)` called from Python in a "
        "loop, so small batches include the Python call per batch.",
        "",
        drain_py,
        "",
        drain_cpp,
        "",
        "## 4. Idle overhead",
        "",
        idle_calls,
        "",
        idle_thread,
        "",
        "An empty `drain()` is one atomic load before any argument parsing: it costs what any C function "
        "call costs. The idle auto-drain thread blocks in `poll(2)` on the eventfd and is never scheduled.",
        "",
        "## 5. Memory",
        "",
        "RSS delta in a fresh process after 10⁶ pending references (the same object handed over 10⁶ times, so "
        "only the strategy's own memory counts), and after draining them:",
        "",
        memory_py,
        "",
        memory_cpp,
        "",
        "cuda-reclaim reserves 64 Ki pointer slots at start-up (`CUDA_RECLAIM_RESERVED_CAPACITY`), so a "
        "burst below that costs no new memory; beyond it, blocks of 256 pointers are added and kept for "
        "reuse.",
        "",
        "## Where cuda-reclaim is slower in this run",
        "",
    ]
    parts += ["Listed mechanically from this run's p50s and throughputs:", ""]
    parts += [f"- {note}" for note in slower] or ["- nowhere"]
    parts += ["", WHY, ""] + gpu_section(args.gpu)
    return "\n".join(parts)


def gpu_section(path):
    """Section 6 from bench/gpu_graph_bench.py's --json output (run on a GPU machine), if there is one."""
    parts = [
        "## 6. GPU: graph create/retain/destroy",
        "",
        "`bench/gpu_graph_bench.py` measures the cost a cuda-reclaim user object adds to a CUDA graph's "
        "create / retain / destroy cycle (cuGraphCreate, attach one user object, cuGraphDestroy), against a "
        "raw user object with an empty C destructor, all variants interleaved in one run. It needs a GPU, "
        "`cuda-bindings` 13 and the installed wheel, and skips with a message elsewhere.",
        "",
    ]
    if not path or not os.path.exists(path):
        return parts + ["No GPU results given to this report (`--gpu`).", ""]
    with open(path) as f:
        gpu = json.load(f)
    parts += [
        f"Run on {gpu['device']}, Python {gpu['python']} (results: `{path}`; command: "
        "`python bench/gpu_graph_bench.py --cycles 20000 --json OUT` with the wheel installed, e.g. "
        "through `tests/gpu/make_bundle.sh`).",
        "",
        "| variant | cycles | p50 | p99 | p50 / raw | p99 / raw |",
        "|---|---|---|---|---|---|",
    ]
    for row in gpu["rows"]:
        parts.append(
            f"| {row['variant']} | {row['cycles']} | {row['p50_ns'] / 1000:.2f} µs | {row['p99_ns'] / 1000:.2f} µs "
            f"| {row['p50_vs_raw']:.2f}× | {row['p99_vs_raw']:.2f}× |"
        )
    stats = gpu.get("stats", {})
    parts += [
        "",
        f"References handed to cuda-reclaim: {gpu['handed_over']}, released: {gpu['released']}; "
        f"eventfd writes (`wakeups`): {stats.get('wakeups', '?')}, drains: {stats.get('drain_calls', '?')}.",
        "",
    ]
    return parts


def plot(r, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("make_report: matplotlib is not installed (pip install -r bench/requirements.txt): no plot",
              file=sys.stderr)
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / (len(PRODUCER_STRATEGIES) - 1)
    for i, strategy in enumerate(s for s in PRODUCER_STRATEGIES if s != "noop"):
        values = []
        for main in ("idle", "busy"):
            for threads in (1, 2, 4):
                row = r.find("producer", main=main, threads=threads, strategy=strategy)
                values.append(row["p99"] if row else math.nan)
        left.bar([x + i * width for x in range(6)], values, width, label=ANCHORS[strategy].replace("**", ""))
    left.set_xticks([x + 0.4 - width / 2 for x in range(6)])
    left.set_xticklabels([f"{m}\n{t} thr" for m in ("idle", "busy") for t in (1, 2, 4)])
    left.set_yscale("log")
    left.set_ylabel("ns (log)")
    left.set_title("Producer cost per hand-over, p99")
    left.legend(fontsize=7)
    labels, p50s, p99s, never = [], [], [], []
    for main, strategy, drain in LATENCY_KEYS:
        row = r.find("latency", main=main, strategy=strategy, drain=drain)
        if row is None:
            continue
        name = "cuda.core" if strategy == "cas_pending_call" else f"reclaim:{drain}"
        labels.append(f"{main}\n{name}")
        p50s.append(row["p50"])
        p99s.append(row["p99"])
    finite = [v for v in p50s + p99s if v != math.inf] or [1.0]
    ceiling = max(finite) * 10
    for i, (a, b) in enumerate(zip(p50s, p99s)):
        if a == math.inf:
            never.append(i)
    xs = range(len(labels))
    right.bar([x - 0.2 for x in xs], [ceiling if v == math.inf else v for v in p50s], 0.4, label="p50")
    right.bar([x + 0.2 for x in xs], [ceiling if v == math.inf else v for v in p99s], 0.4, label="p99")
    for i in never:
        right.text(i, ceiling, "never", ha="center", va="bottom", fontsize=7)
    right.set_xticks(list(xs))
    right.set_xticklabels(labels, fontsize=6.5, rotation=60)
    right.set_yscale("log")
    right.set_ylabel("ns (log)")
    right.set_title("Release latency, push → released")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="bench_python.py's JSON")
    parser.add_argument("--cpp", required=True, help="queue_bench's JSON")
    parser.add_argument("--out", help="markdown file to write (default: stdout)")
    parser.add_argument("--plot", help="PNG to write next to --out (needs matplotlib)")
    parser.add_argument("--command", default="bash bench/run_benchmarks.sh", help="the command to cite")
    parser.add_argument("--caveat", default="", help="a line quoted under the run's facts")
    parser.add_argument("--check", action="store_true", help="only check that every row is present")
    parser.add_argument("--gpu", default="docs/benchmarks-gpu.json",
                        help="gpu_graph_bench.py's JSON from a GPU machine (section 6), if present")
    args = parser.parse_args(argv)
    with open(args.python) as f:
        py = json.load(f)
    with open(args.cpp) as f:
        cpp = json.load(f)
    r = Results(py, cpp)
    plot_name = None
    if args.plot and not args.check and plot(r, args.plot):
        plot_name = args.plot.rsplit("/", 1)[-1]
    text = document(r, args, plot_name)
    if r.missing:
        print("make_report: missing rows:\n  " + "\n  ".join(sorted(set(r.missing))), file=sys.stderr)
        return 1
    if args.check:
        print(f"make_report: all rows present ({len(r.rows)} Python rows, {len(r.cpp_rows)} C++ rows)")
        return 0
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
