"""The GPU sections of docs/benchmarks.md (6 and 7), from the JSON that bench/gpu_graph_bench.py and
bench/gpu_callbacks_bench.py write on a machine with a GPU."""

from report.tables import table


def gpu_results(gpu, path):
    """Section 6's table from bench/gpu_graph_bench.py's --json output, or a line saying there is none."""
    if gpu is None:
        return "No GPU results given to this report (`--gpu`)."
    cycles = max(row["cycles"] for row in gpu["rows"])
    rows = [[row["variant"], row["cycles"], f"{row['p50_ns'] / 1000:.2f} µs", f"{row['p99_ns'] / 1000:.2f} µs",
             f"{row['p50_vs_raw']:.2f}×", f"{row['p99_vs_raw']:.2f}×"] for row in gpu["rows"]]
    stats = gpu.get("stats", {})
    return "\n".join([
        f"Run on {gpu['device']}, Python {gpu['python']} (results: `{path}`; command: "
        f"`python bench/gpu_graph_bench.py --cycles {cycles} --json OUT` with the wheel installed, e.g. "
        "through `tests/gpu/make_bundle.sh`).",
        "",
        table(["variant", "cycles", "p50", "p99", "p50 / raw", "p99 / raw"], rows),
        "",
        f"References handed to cuda-reclaim: {gpu['handed_over']}, released: {gpu['released']}; "
        f"eventfd writes (`eventfd_writes`): {stats.get('eventfd_writes', '?')}, drains: {stats.get('nonempty_drains', '?')}.",
    ])


def _ms(value, digits=3):
    return "–" if value is None else f"{value:.{digits}f}"


def _passes_and_gate(data):
    """The sentence on passes and the gate, for results that record them (older ones do not)."""
    if "passes" not in data:
        return ""
    text = (f" Each row is the median of {data['passes']} passes; a pass ran its callbacks in segments of "
            f"{data['segment']}, each behind a {data['gate_ms']:.0f} ms gate kernel (the longest enqueueing of a "
            f"segment: {data['longest_enqueue_ms']:.1f} ms)")
    single = [f"{row['variant']}/{row['mode']}" for row in data["rows"] if row.get("passes") == 1]
    single += [f"second stream with {row['first_stream']}" for row in data.get("second_stream", [])
               if row.get("passes") == 1]
    if single and data["passes"] > 1:
        text += (f"; rows whose first pass took over {data['long_pass_s']:g} s ran once ({', '.join(single)}: GIL-taking callbacks "
                 "behind a busy main thread, whose stalls are hundreds of milliseconds each)")
    reruns = data.get("gate_reruns", 0)
    if reruns:
        text += (f"; {reruns} pass(es) outlasted their gate and ran again in shorter segments (that is how the "
                 "segment's length was found)")
    return text + "."


def gpu_callback_results(data, path):
    """Section 7's tables from bench/gpu_callbacks_bench.py's --json output, or a line saying there is none."""
    if data is None:
        return "No GPU results given to this report (`--gpu-callbacks`)."
    n = data["callbacks"]
    stall = [[row["variant"], row["mode"], _ms(row["stall_ms"]["p50"]), _ms(row["stall_ms"]["p99"]),
              _ms(row["stall_ms"]["max"]), f"{row['total_ms']:.1f} ms"] for row in data["rows"]]
    parts = [
        f"Run on {data['device']}, Python {data['python']}, switch interval {data['switch_interval_ms']:.1f} ms, "
        f"{n} callbacks per pass, each behind a {data['kernel_ms']} ms kernel (results: `{path}`; command: "
        f"`python bench/gpu_callbacks_bench.py --json OUT` with the wheel installed, e.g. through "
        "`tests/gpu/run_gpu_tests.sh`)." + _passes_and_gate(data),
        "",
        "How long each host function holds its stream up (CUDA events just before and after it), ms:",
        "",
        table(["variant", "main thread", "p50", "p99", "max", f"{n} callbacks, total"], stall),
    ]
    if any("cuda_thread_us" in row for row in data["rows"]):
        timing = [[row["variant"], row["mode"], _ms(row["cuda_thread_us"]["p50"], 1),
                   _ms(row["cuda_thread_us"]["p99"], 1), _ms(row["latency_us"]["p50"], 1),
                   _ms(row["latency_us"]["p99"], 1)] for row in data["rows"] if "cuda_thread_us" in row]
        parts += [
            "",
            "CUDA's callback thread per callback (native CLOCK_MONOTONIC stamps just before and after it), and "
            "the latency from the stream reaching the callback to the Python function starting, µs:",
            "",
            table(["variant", "main thread", "CUDA thread p50", "CUDA thread p99", "latency p50", "latency p99"],
                  timing),
        ]
    if data.get("second_stream"):
        second = [[row["first_stream"], _ms(row["stall_ms"]["p50"]), _ms(row["stall_ms"]["p99"]),
                   _ms(row["stall_ms"]["max"])] for row in data["second_stream"]]
        parts += [
            "",
            "A second stream's native host functions while the first stream runs Python callbacks and the "
            "main thread holds the GIL (busy in bytecode), ms of stall per host function:",
            "",
            table(["first stream's callbacks", "p50", "p99", "max"], second),
        ]
    target = data.get("target")
    if target and target.get("ratio") is not None:
        parts += [
            "",
            f"Target: cuda-reclaim's p99 stall with the main thread busy at most 1.5× its idle p99: "
            f"{target['busy_p99_ms']:.3f} ms vs {target['idle_p99_ms']:.3f} ms = {target['ratio']:.2f}× — "
            f"{'met' if target['met'] else 'not met'}.",
        ]
    return "\n".join(parts)
