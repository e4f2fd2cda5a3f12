"""bench/bench_python.py — the interpreter-side benchmarks of cuda-reclaim against the anchor strategies.

Every number is measured in this one run, side by side with its anchor, so that ratios hold on a noisy
machine. Sections:

  producer  per-call cost of a hand-over from 1, 2, 4 native threads, main thread idle (blocked in C)
            or busy (running bytecode, so the GIL is contended); p50, p99, max.
  latency   push -> object actually released (a Probe's tp_dealloc stamps the time), with the main
            thread busy, sleeping in C (time.sleep), or idle in an asyncio loop.
  drain     references released per second vs a plain Py_DECREF loop, objects that die or survive, in
            address order, and objects that die in a scattered order.
  idle      an empty drain() vs a no-op C function; CPU time of the idle auto-drain thread.
  memory    RSS per pending reference after a burst of pushes, and after draining (child processes).

Usage (`//bench:python_bench` runs it with bindings/ and bench/ of Bazel's runfiles on PYTHONPATH):
    python bench_python.py [--quick] [--json OUT]
Writes every row as JSON (to OUT, else stdout). bench/make_report.py turns it into tables.
"""

import argparse
import array
import asyncio
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import timeit

import cuda_reclaim
import cuda_reclaim.asyncio as reclaim_asyncio
from cuda_reclaim import _auto

import _reclaim_bench as ext

# cuda_reclaim_no_drain: cuda-reclaim's push with the automatic drain off, so that nothing drains while the
# producers push (as for the mutex anchors, drained after the run): what the concurrent drain costs them.
PRODUCER_STRATEGIES = ("noop", "cuda_reclaim", "cuda_reclaim_no_drain", "mutex_vector", "mutex_deque",
                       "cas_pending_call", "with_gil")
QUEUEING_STRATEGIES = ("cuda_reclaim", "mutex_vector", "mutex_deque", "cas_pending_call")
# (main thread, strategy, how cuda-reclaim drains): the release-latency matrix.
LATENCY_SCENARIOS = (
    ("busy", "cuda_reclaim", "thread"),
    ("busy", "cas_pending_call", "-"),
    ("sleep", "cuda_reclaim", "thread"),
    ("sleep", "cas_pending_call", "-"),
    ("asyncio", "cuda_reclaim", "thread"),
    ("asyncio", "cuda_reclaim", "asyncio_fd"),
    ("asyncio", "cas_pending_call", "-"),
)
DRAIN_BATCHES = (64, 4096, None)  # None: drain() releases everything in one call


class Config:
    """Sizes of one run: the full run (about 2 minutes plus the 10 s idle measurement) or --quick."""

    def __init__(self, quick):
        self.quick = quick
        self.producer_calls = 2_000 if quick else 100_000  # per thread: long enough for threads to overlap
        self.gil_calls = 50 if quick else 400  # with_gil per thread: each may wait a switch interval
        self.producer_budget_s = 0.3 if quick else 1.0  # a run stops early when this passes
        self.producer_repeats = 1 if quick else 3
        self.latency_n = 20 if quick else 200
        self.latency_spacing_us = 1000
        self.latency_grace_s = 0.05  # time given after the last push before unreleased counts as never
        self.drain_n = 20_000 if quick else 1_000_000
        self.repeats = 1 if quick else 9
        self.idle_calls = 20_000 if quick else 1_000_000
        self.idle_thread_s = 0.2 if quick else 10.0
        self.memory_n = 20_000 if quick else 1_000_000


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list (inf entries allowed)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(values):
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "max": ordered[-1] if ordered else math.nan,
    }


def int64s(blob):
    values = array.array("q")
    values.frombytes(blob)
    return values


def busy_until(predicate):
    """Run bytecode until predicate(). Each iteration leaves one small reference cycle behind, as
    allocation-heavy code does, so that gc collections happen (a container freed at once would not count
    towards gc's threshold)."""
    i = 0
    while not predicate():
        cycle = [i]
        cycle.append(cycle)
        i += 1


def busy_for(seconds):
    deadline = time.perf_counter() + seconds
    busy_until(lambda: time.perf_counter() >= deadline)


def drain_everything():
    for strategy in QUEUEING_STRATEGIES:
        ext.drain(strategy)
    cuda_reclaim.drain()


# --- 1. producer cost --------------------------------------------------------------------------------


def bench_producer(cfg):
    cuda_reclaim.set_auto_drain("thread")  # the default: cuda-reclaim's own drain runs as it would
    runs = {}
    # Every (main thread, producers, strategy) runs cfg.producer_repeats times, the repeats interleaved,
    # and a row reports the medians of the runs' percentiles: one run's p50 moves by tens of nanoseconds
    # from one repeat to the next (where the threads land, what the machine does meanwhile).
    for _ in range(cfg.producer_repeats):
        for main in ("idle", "busy"):
            for threads in (1, 2, 4):
                for strategy in PRODUCER_STRATEGIES:
                    calls = cfg.gil_calls if strategy == "with_gil" else cfg.producer_calls
                    no_drain = strategy == "cuda_reclaim_no_drain"
                    if no_drain:
                        cuda_reclaim.set_auto_drain("off")
                    ext.start("cuda_reclaim" if no_drain else strategy, threads, calls, 0, cfg.producer_budget_s)
                    if main == "idle":
                        ext.wait()  # blocked in C with the GIL released, like time.sleep
                    else:
                        busy_until(ext.done)
                    cost, _, _ = ext.finish()
                    if no_drain:
                        cuda_reclaim.set_auto_drain("thread")
                    drain_everything()
                    runs.setdefault((main, threads, strategy), []).append(summarize(int64s(cost)))
    rows = []
    for (main, threads, strategy), summaries in runs.items():
        row = {"section": "producer", "main": main, "threads": threads, "strategy": strategy,
               "repeats": len(summaries)}
        row["n"] = int(statistics.median(s["n"] for s in summaries))
        for key in ("p50", "p99"):
            row[key] = statistics.median(s[key] for s in summaries)
        row["max"] = max(s["max"] for s in summaries)
        rows.append(row)
    return rows


# --- 2. release latency -------------------------------------------------------------------------------


def _run_latency(cfg, main):
    n, spacing = cfg.latency_n, cfg.latency_spacing_us
    window = n * spacing / 1e6 + cfg.latency_grace_s
    if main == "busy":
        busy_until(ext.done)
        busy_for(cfg.latency_grace_s)
    elif main == "sleep":
        time.sleep(window)  # one call: the main thread stays in C for the whole window
    return window


def bench_latency(cfg):
    rows = []
    for main, strategy, drain_mode in LATENCY_SCENARIOS:
        cuda_reclaim.set_auto_drain("thread" if drain_mode == "thread" else "off")
        start = (strategy, 1, cfg.latency_n, cfg.latency_spacing_us, 60.0, True)
        if main == "asyncio":

            async def idle_loop():
                handle = reclaim_asyncio.install() if drain_mode == "asyncio_fd" else None
                ext.start(*start)
                window = cfg.latency_n * cfg.latency_spacing_us / 1e6 + cfg.latency_grace_s
                await asyncio.sleep(window)  # the loop sits in epoll_wait unless an fd wakes it
                if handle is not None:
                    handle.cancel()

            asyncio.run(idle_loop())
        else:
            ext.start(*start)
            _run_latency(cfg, main)
        _, pushed, released = ext.finish()
        drain_everything()
        latencies = [(r - p) if r else math.inf for p, r in zip(int64s(pushed), int64s(released))]
        row = {"section": "latency", "main": main, "strategy": strategy, "drain": drain_mode,
               "spacing_us": cfg.latency_spacing_us, "grace_s": cfg.latency_grace_s}
        row.update(summarize(latencies))
        row["released_in_window"] = sum(1 for x in latencies if x != math.inf)
        rows.append(row)
    cuda_reclaim.set_auto_drain("thread")
    return rows


# --- 3. drain throughput -------------------------------------------------------------------------------


# The loops over a plain array that frame the drain rows: the limit, the same loop over an array that a
# native thread wrote (what any hand-over between threads reads), and bindings' release action.
LOOP_METHODS = ("plain_decref_loop", "plain_decref_loop_written_elsewhere", "plain_release_fn_loop")


# What happens to the objects when their reference is released, and the order of their addresses: *die*
# and *survive* in address order, *die, scattered* in one fixed shuffled order (bench/reclaim_bench_ext.cc's
# probes()).
DRAIN_FATES = ("die", "survive", "die, scattered")


def _time_drain_once(cfg, fate, method):
    """ns to release cfg.drain_n references by `method`; objects die or survive the release."""
    objects = ext.probes(cfg.drain_n, fate.endswith("scattered"))
    die = fate != "survive"
    if method in LOOP_METHODS:
        return ext.decref_loop(objects, die, method == "plain_release_fn_loop",
                               method == "plain_decref_loop_written_elsewhere")
    strategy, batch = method
    # cuda.core's pending call may run as soon as burst() returns to bytecode, before any drain here:
    # it times itself, and what it did is added in.
    _, before_released, before_ns = ext.pending_call_totals()
    ext.burst(strategy, objects, die)  # die: the strategy holds the only references
    released = 0
    start = time.perf_counter_ns()
    if strategy == "cuda_reclaim":
        while released < cfg.drain_n:
            released += cuda_reclaim.drain(batch)  # the public Python API
    else:
        released = ext.drain(strategy)
    elapsed = time.perf_counter_ns() - start
    if strategy == "cas_pending_call":
        _, after_released, after_ns = ext.pending_call_totals()
        released += after_released - before_released
        elapsed += after_ns - before_ns
        ext.free_nodes()
    assert released == cfg.drain_n, (method, released)
    return elapsed


def bench_drain(cfg):
    cuda_reclaim.set_auto_drain("off")
    methods = list(LOOP_METHODS) + [("cuda_reclaim", b) for b in DRAIN_BATCHES]
    methods += [(s, None) for s in QUEUEING_STRATEGIES if s != "cuda_reclaim"]
    rows = []
    for fate in DRAIN_FATES:
        # Round-robin over the methods, repeated: a burst of load on the machine hits every method alike.
        samples = {i: [] for i in range(len(methods))}
        for _ in range(cfg.repeats):
            for i, method in enumerate(methods):
                samples[i].append(_time_drain_once(cfg, fate, method))
        for i, method in enumerate(methods):
            # The best of the repeats: a throughput is what the code can do; interference only slows it.
            ns = min(samples[i])
            median_ns = statistics.median(samples[i])
            strategy, batch = (method, None) if isinstance(method, str) else method
            rows.append({
                "section": "drain",
                "fate": fate,
                "strategy": strategy,
                "batch": "all" if batch is None else batch,
                "n": cfg.drain_n,
                "ns": ns,
                "median_ns": median_ns,
                "refs_per_s": cfg.drain_n / (ns / 1e9),
            })
    cuda_reclaim.set_auto_drain("thread")
    return rows


# --- 4. idle overhead -------------------------------------------------------------------------------


def _schedstat_ns(native_id):
    """CPU time (ns) a thread has run, from /proc/self/task/<tid>/schedstat (first field)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            return int(f.read().split()[0])
    except OSError:  # no schedstat: utime + stime in clock ticks from stat
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def bench_idle(cfg):
    cuda_reclaim.drain()
    # The earlier sections' bursts grew the queue: give that back now, or the drain thread would do it a
    # second into the idle window (its one wake-up after a burst) and be measured doing so.
    cuda_reclaim.trim()
    rows = []
    for name, func in (("empty drain()", cuda_reclaim.drain), ("noop()", ext.noop)):
        timings = timeit.repeat(func, number=cfg.idle_calls, repeat=5)
        rows.append({"section": "idle_call", "call": name, "ns_per_call": min(timings) / cfg.idle_calls * 1e9,
                     "median_ns_per_call": sorted(timings)[2] / cfg.idle_calls * 1e9})
    cuda_reclaim.set_auto_drain("thread")
    _auto.note_handover()  # starts the drain thread if it is not running
    thread = _auto._thread
    before_stats = cuda_reclaim.stats()
    before = _schedstat_ns(thread.native_id)
    time.sleep(cfg.idle_thread_s)
    cpu_ns = _schedstat_ns(thread.native_id) - before
    after_stats = cuda_reclaim.stats()
    rows.append({
        "section": "idle_thread",
        "seconds": cfg.idle_thread_s,
        "cpu_ns": cpu_ns,
        "cpu_share": cpu_ns / (cfg.idle_thread_s * 1e9),
        "eventfd_writes": after_stats["eventfd_writes"] - before_stats["eventfd_writes"],
        "nonempty_drains": after_stats["nonempty_drains"] - before_stats["nonempty_drains"],
    })
    return rows


# --- 5. memory ---------------------------------------------------------------------------------------


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(strategy, n):
    """In a fresh process: RSS before, after a burst of n pushes of one shared object, after draining, and
    (cuda-reclaim) after cuda_reclaim.trim(); the anchors free their buffers as they drain."""
    cuda_reclaim.set_auto_drain("off")
    shared = object()
    objects = [shared] * n  # made before the baseline: only the strategy's memory is in the deltas
    _, before_released, _ = ext.pending_call_totals()
    before = _rss_bytes()
    ext.burst(strategy, objects)
    burst = _rss_bytes()  # cas_pending_call's nodes stay allocated until free_nodes(), drained or not
    released = cuda_reclaim.drain() if strategy == "cuda_reclaim" else ext.drain(strategy)
    if strategy == "cas_pending_call":
        released += ext.pending_call_totals()[1] - before_released
        ext.free_nodes()
    drained = _rss_bytes()
    trimmed = drained
    if strategy == "cuda_reclaim":
        trim_start = time.perf_counter_ns()
        gave_back = cuda_reclaim.trim()  # False below the reserved capacity (--quick): nothing to give back
        trim_ns = time.perf_counter_ns() - trim_start if gave_back else None
        trimmed = _rss_bytes()
    assert released == n, (strategy, released)
    row = {"section": "memory", "strategy": strategy, "n": n,
           "bytes_per_pending": (burst - before) / n,
           "burst_rss_delta": burst - before, "drained_rss_delta": drained - before,
           "trimmed_rss_delta": trimmed - before}
    if strategy == "cuda_reclaim" and trim_ns is not None:
        row["trim_ns"] = trim_ns
    return row


def bench_memory(cfg):
    rows = []
    for strategy in QUEUEING_STRATEGIES:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--memory-child", strategy, str(cfg.memory_n)],
            capture_output=True, text=True, check=True, timeout=120,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


# --- main ----------------------------------------------------------------------------------------------


def machine():
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "platform": platform.platform(),
        "loadavg": os.getloadavg(),
        "switch_interval_s": sys.getswitchinterval(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


SECTIONS = {
    "producer": bench_producer,
    "latency": bench_latency,
    "drain": bench_drain,
    "idle": bench_idle,
    "memory": bench_memory,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that every row is produced")
    parser.add_argument("--json", help="write the results here (default: stdout)")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    parser.add_argument("--memory-child", nargs=2, metavar=("STRATEGY", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))))
        return 0
    cfg = Config(args.quick)
    result = {"machine": machine(), "quick": cfg.quick, "command": " ".join([sys.executable] + sys.argv),
              "rows": []}
    for name, section in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        started = time.perf_counter()
        result["rows"].extend(section(cfg))
        print(f"[bench_python] {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    with open(args.json or "/dev/stdout", "w") as out:
        json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
