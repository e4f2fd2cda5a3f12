"""The plot of docs/benchmarks.md: producer cost p99 and release latency, from one run (needs matplotlib:
pip install -r bench/requirements.txt)."""

import math
import sys

from report.tables import ANCHORS, LATENCY_KEYS, PRODUCER_STRATEGIES, QUEUE_STRATEGIES_CPP, Results, cpp_push_rows


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


def plot_scaling(scaling, path):
    """Producer scaling: total pushes per second and CPU time per push against the number of producer
    threads, every strategy, from queue_bench's --threads run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    r = Results({"rows": []}, scaling)
    series = {}
    for threads, strategy, bench in cpp_push_rows(r):
        series.setdefault(strategy, []).append((threads, bench["items_per_second"] / 1e6, bench["cpu_time"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for strategy in QUEUE_STRATEGIES_CPP:
        points = series.get(strategy)
        if not points:
            continue
        label = ANCHORS[strategy].replace("**", "")
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        right.plot([p[0] for p in points], [p[2] for p in points], marker="o", label=label)
    for axis, title, unit in ((left, "All producers together", "M pushes/s (wall time)"),
                              (right, "CPU time per push", "ns (log)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("producer threads")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.legend(fontsize=7)
    right.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
