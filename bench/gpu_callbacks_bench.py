"""bench/gpu_callbacks_bench.py — Python callbacks from CUDA: cuda-reclaim's launch_host_func (CUDA's thread
only pushes; the call runs in a drain) against CuPy's Stream.launch_host_func (the callback runs on CUDA's
thread and takes the GIL there).

Needs a GPU, cuda.core 1.x (kernels, streams, events), cuda-reclaim installed, and a C compiler (cc or gcc:
a two-line native host function that stamps CLOCK_MONOTONIC, for the host-side timings). CuPy is optional
(without it only cuda-reclaim's rows are measured). Where the GPU or cuda.core is missing it prints
``SKIP: <why>`` and exits 0.

Measurements, each over N callbacks (default 200), every callback behind its own 0.5 ms spin kernel on the
stream, in segments, each held behind a gate kernel so that its enqueueing is over before it starts, and
waited for in the pass's mode before the next segment is enqueued. CUDA stops taking a stream's launches
while its queue of pending work is full (each launch then returns only once the GPU has taken older work),
so behind a gate the enqueueing of a long batch lasts as long as the gate and beyond, and its first
callbacks would wait for the main thread to finish enqueueing (in asyncio mode, where only the loop
drains, their latency would measure the enqueueing). The warm-up passes start with one segment of N
behind a 100 ms gate and halve the segment until its enqueueing ends before its gate; the measured passes
keep that segment, behind a gate of three times the warm-up's longest enqueueing (at least 20 ms), and
halve it again should a segment outlast its gate. Each row is run in several passes (default 3) and
reports the median of the passes' p50, p99, max and total (the segments' totals added up); a row whose
first pass took longer than 5 s (CuPy's callbacks behind a busy main thread) runs once:

1. stall — CUDA events recorded just before and just after each host function: how long the host function
   holds the stream up (CUDA's host-function round trip plus the callback's time on CUDA's thread). p50,
   p99 and the batch's total (first event to last). The issue's measurement.
2. occupancy and latency — a native host function stamps CLOCK_MONOTONIC just before and just after each
   measured host function: the time CUDA's callback thread spends on it (after - before), and the latency
   from the stream reaching the point to the Python function starting (its own time.monotonic_ns()).
3. second stream — stream 1 gets N Python callbacks (none / CuPy / cuda-reclaim), stream 2 gets N native
   host functions with events around them, both behind 0.5 ms kernels, the main thread busy in bytecode
   (holding the GIL): the stall of stream 2's host functions, i.e. what a GIL-taking callback on one stream
   costs every other stream's host functions.

Main thread modes: ``idle`` (sleeping in 1 ms steps: the GIL is free), ``busy`` (pure-Python loop: the GIL
is contended), ``asyncio`` (an event loop running 1 ms chunks of bytecode between awaits, with
cuda_reclaim.asyncio.install(): cuda-reclaim's calls run on the loop's own thread from its reader).

Variants: ``native`` (a native host function that does nothing Python: CUDA's own floor), ``cupy``,
``reclaim`` (launch_host_func: CUDA's thread only pushes) and ``reclaim-ordered`` (launch_host_func_ordered:
CUDA's thread pushes, then waits without the GIL until a drain has run the call, so the stall includes the
drain's latency and the call; it is what cuda_reclaim.integrations gives numba-cuda's and CuPy's
callbacks). In asyncio mode ``reclaim`` is drained by the loop alone, ``reclaim-ordered`` by the drain thread
(an ordered call needs a drain when it is launched; the loop's drain runs only while the pass waits).
Target (the issue's): reclaim's p99 stall with the main thread busy is at most 1.5x its idle p99; the same
ratio is reported for reclaim-ordered.

    python bench/gpu_callbacks_bench.py [--callbacks 200] [--kernel-ms 0.5] [--passes 3] [--json OUT]
"""

import argparse
import asyncio
import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

STAMP_SOURCE = r"""
#include <stdint.h>
#include <time.h>
void stamp(void* slot) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  *(int64_t*)slot = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}
"""

SPIN_SOURCE = r"""
extern "C" __global__ void spin(unsigned long long cycles) {
  long long start = clock64();
  while (clock64() - start < (long long)cycles) {}
}
"""

MODES = ("idle", "busy", "asyncio")
GATE_MS = 100.0  # the warm-up's gate
MIN_GATE_MS = 20.0  # the measured passes' gate, at least
# A row whose first pass takes longer than this runs once: that is a GIL-taking callback (CuPy's) behind a
# main thread that holds the GIL, whose stalls are hundreds of milliseconds each (and their p99 seconds):
# further passes would add minutes of GPU time and change nothing the table shows.
LONG_PASS_S = 5.0


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(0)


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, int(round(q / 100.0 * len(ordered))) - 1)]


def summary(values, scale=1.0):
    values = [v * scale for v in values if v is not None]
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None, "mean": None}
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99), "max": max(values),
            "mean": sum(values) / len(values)}


def run_passes(passes, run_once, long_pass_s=LONG_PASS_S, clock=time.perf_counter):
    """Calls run_once() `passes` times, or once when that first pass took longer than `long_pass_s`; returns
    how many passes ran."""
    start = clock()
    run_once()
    if clock() - start > long_pass_s:
        return 1
    for _ in range(passes - 1):
        run_once()
    return passes


def median_summary(summaries):
    """Each statistic of several passes' summaries: its median over the passes (None where a pass has none)."""
    merged = {}
    for key in ("n", "p50", "p99", "max", "mean"):
        values = [s[key] for s in summaries if s[key] is not None]
        merged[key] = statistics.median(values) if values else None
    return merged


def build_stamp_library(directory):
    """The native stamp host function, compiled here; None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None
    source = os.path.join(directory, "stamp.c")
    library = os.path.join(directory, "libstamp.so")
    with open(source, "w") as f:
        f.write(STAMP_SOURCE)
    result = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", library, source], capture_output=True)
    if result.returncode != 0:
        print(f"note: {compiler} failed, no host-side timings: {result.stderr.decode()[-300:]}")
        return None
    return ctypes.CDLL(library)


class Bench:
    def __init__(self, args):
        try:
            from cuda.core import Device, EventOptions, LaunchConfig, Program, ProgramOptions, launch
        except ImportError as error:
            skip(f"cuda.core is not installed ({error})")
        try:
            import cuda_reclaim
            import cuda_reclaim.asyncio as reclaim_asyncio
        except ImportError as error:
            skip(f"cuda_reclaim is not installed ({error})")
        if not hasattr(cuda_reclaim, "launch_host_func"):
            skip("this cuda_reclaim has no launch_host_func")
        try:
            self.device = Device()
            self.device.set_current()
        except Exception as error:  # noqa: BLE001 - no driver, no device: no GPU here
            skip(f"no usable GPU: {error!r}")
        try:
            import cupy

            self.cupy = cupy
        except ImportError:
            self.cupy = None
            print("note: CuPy is not installed; only cuda-reclaim's rows are measured")
        self.reclaim = cuda_reclaim
        self.reclaim_asyncio = reclaim_asyncio
        self.args = args
        self.launch = launch
        self.config = LaunchConfig(grid=1, block=1)
        try:
            self.timing = EventOptions(timing_enabled=True)
        except TypeError:  # older cuda.core spelling
            self.timing = EventOptions(enable_timing=True)
        options = ProgramOptions(arch=f"sm_{self.device.arch}")
        self.spin = Program(SPIN_SOURCE, code_type="c++", options=options).compile("cubin").get_kernel("spin")
        self.cycles_per_ms = int(self.device.properties.clock_rate)  # kHz = cycles per ms
        self.libcuda = ctypes.CDLL("libcuda.so.1")
        self.gate_ms = GATE_MS
        self.segment = args.callbacks  # callbacks per gated segment (gated() shortens it)
        self.enqueue_ms = 0.0  # the last pass's longest enqueueing of a segment, gate's launch to last launch
        self.longest_enqueue_ms = 0.0
        self.gate_reruns = 0
        self.libcuda.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.libcuda.cuLaunchHostFunc.restype = ctypes.c_int
        self.tmp = tempfile.mkdtemp(prefix="cuda-reclaim-bench-")
        self.stamp_library = build_stamp_library(self.tmp)
        self.stamp = (ctypes.cast(self.stamp_library.stamp, ctypes.c_void_p).value
                      if self.stamp_library is not None else None)
        self.dummy = ctypes.c_int64(0)
        self.cupy_streams = {}

    # --- building blocks ------------------------------------------------------------------------------

    def gate(self, stream):
        """Launches the gate kernel on `stream`; returns the perf_counter() time just before the launch."""
        start = time.perf_counter()
        self.kernel(stream, self.gate_ms)
        return start

    def enqueued(self, start):
        """A segment's last launch is done: its enqueueing since `start` (gate()'s time) counts in enqueue_ms."""
        self.enqueue_ms = max(self.enqueue_ms, (time.perf_counter() - start) * 1e3)

    def gated(self, run, *args):
        """run(*args), again in segments half as long while the enqueueing of a segment outlasted its gate
        (CUDA holds a stream's launches up once its queue of pending work is full, which a gated segment of
        200 callbacks overfills); returns its result. Records the longest enqueueing of a segment."""
        while True:
            self.enqueue_ms = 0.0
            result = run(*args)
            self.longest_enqueue_ms = max(self.longest_enqueue_ms, self.enqueue_ms)
            if self.enqueue_ms <= self.gate_ms or self.segment == 1:
                return result
            print(f"note: enqueueing {self.segment} callbacks took {self.enqueue_ms:.1f} ms, longer than the "
                  f"{self.gate_ms:.0f} ms gate; the pass runs again in segments of {max(1, self.segment // 2)}")
            self.segment = max(1, self.segment // 2)
            self.gate_reruns += 1
            self.longest_enqueue_ms = 0.0  # what counts is the longest of the segments kept

    def kernel(self, stream, ms):
        self.launch(stream, self.config, self.spin, ctypes.c_ulonglong(int(self.cycles_per_ms * ms)))

    def native(self, stream, slot_address):
        if self.stamp is None:
            raise RuntimeError("no native host function without a C compiler")
        result = self.libcuda.cuLaunchHostFunc(int(stream.handle), self.stamp, slot_address)
        if result != 0:
            raise RuntimeError(f"cuLaunchHostFunc failed: CUresult {result}")

    def python_callback(self, variant, stream, fn, i, futures):
        if variant == "reclaim":
            futures.append(self.reclaim.launch_host_func(stream, fn, i))
        elif variant == "reclaim-ordered":
            futures.append(self.reclaim.launch_host_func_ordered(stream, fn, i))
        elif variant == "cupy":
            self.cupy_stream(stream).launch_host_func(fn, i)
        elif variant == "native":
            self.native(stream, ctypes.addressof(self.dummy))
        else:
            raise ValueError(variant)

    def cupy_stream(self, stream):
        """CuPy's view of a cuda.core stream (one wrapper per stream, made once)."""
        handle = int(stream.handle)
        wrapper = self.cupy_streams.get(handle)
        if wrapper is None:
            wrapper = self.cupy_streams[handle] = self.cupy.cuda.ExternalStream(handle, self.device.device_id)
        return wrapper

    def wait(self, mode, done):
        """Waits until done() with the main thread in `mode` (idle: GIL free; busy: bytecode)."""
        if mode == "idle":
            while not done():
                time.sleep(0.001)
        elif mode == "busy":
            x = 0
            while not done():
                for _ in range(2000):
                    x += 1
        elif mode == "asyncio":
            async def main():
                handle = self.reclaim_asyncio.install()
                try:
                    while not done():
                        end = time.perf_counter() + 0.001
                        while time.perf_counter() < end:  # 1 ms of bytecode, then the loop's turn
                            pass
                        await asyncio.sleep(0)
                finally:
                    handle.cancel()

            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

    # --- passes ---------------------------------------------------------------------------------------
    # A pass measures N callbacks in segments of self.segment, each behind its own gate and waited for in
    # the pass's mode before the next is enqueued (see the module's docstring).

    def segments(self):
        n = self.args.callbacks
        return [range(first, min(first + self.segment, n)) for first in range(0, n, self.segment)]

    def pass_stall(self, variant, mode):
        """Events around each host function; returns per-callback stalls (ms) and the segments' total (ms)."""
        n, kernel_ms = self.args.callbacks, self.args.kernel_ms
        stream = self.device.create_stream()
        ran = [None] * n
        futures = []

        def fn(i):
            ran[i] = time.monotonic_ns()

        python = variant != "native"
        stalls, total = [], 0.0
        for segment in self.segments():
            start = self.gate(stream)  # enqueueing is over before the measured part starts
            events = []
            for i in segment:
                self.kernel(stream, kernel_ms)
                before = stream.record(options=self.timing)
                self.python_callback(variant, stream, fn, i, futures)
                after = stream.record(options=self.timing)
                events.append((before, after))
            self.enqueued(start)
            last = events[-1][1]
            self.wait(mode, lambda: last.is_done and (not python or all(ran[i] is not None for i in segment)))
            stream.sync()
            stalls += [after - before for before, after in events]
            total += events[-1][1] - events[0][0]
        return stalls, total

    def pass_timing(self, variant, mode):
        """Native stamps around each host function: CUDA thread occupancy and start latency (ns)."""
        n, kernel_ms = self.args.callbacks, self.args.kernel_ms
        stream = self.device.create_stream()
        before = (ctypes.c_int64 * n)()
        after = (ctypes.c_int64 * n)()
        ran = [None] * n
        futures = []

        def fn(i):
            ran[i] = time.monotonic_ns()

        python = variant != "native"
        for segment in self.segments():
            start = self.gate(stream)
            for i in segment:
                self.kernel(stream, kernel_ms)
                self.native(stream, ctypes.addressof(before) + 8 * i)
                self.python_callback(variant, stream, fn, i, futures)
                self.native(stream, ctypes.addressof(after) + 8 * i)
            self.enqueued(start)
            done = stream.record()
            self.wait(mode, lambda: done.is_done and (not python or all(ran[i] is not None for i in segment)))
            stream.sync()
        occupancy = [after[i] - before[i] for i in range(n)]
        latency = [ran[i] - before[i] for i in range(n)] if python else []
        return occupancy, latency

    def pass_second_stream(self, first_variant):
        """Stream 2's native host-function stalls (ms) while stream 1 runs `first_variant` callbacks and
        the main thread is busy in bytecode."""
        n, kernel_ms = self.args.callbacks, self.args.kernel_ms
        first, second = self.device.create_stream(), self.device.create_stream()
        ran = [None] * n
        futures = []

        def fn(i):
            ran[i] = time.monotonic_ns()

        python = first_variant not in ("none", "native")
        stalls = []
        for segment in self.segments():
            start = self.gate(first)
            self.kernel(second, self.gate_ms)
            events = []
            for i in segment:
                self.kernel(first, kernel_ms)
                if first_variant != "none":
                    self.python_callback(first_variant, first, fn, i, futures)
                self.kernel(second, kernel_ms)
                before = second.record(options=self.timing)
                self.native(second, ctypes.addressof(self.dummy))
                after = second.record(options=self.timing)
                events.append((before, after))
            self.enqueued(start)
            end_first = first.record()
            last = events[-1][1]
            self.wait("busy", lambda: last.is_done and end_first.is_done
                      and (not python or all(ran[i] is not None for i in segment)))
            first.sync()
            second.sync()
            stalls += [after - before for before, after in events]
        return stalls


def drain_in_asyncio_mode(variant):
    """The automatic drain for `variant`'s asyncio rows: reclaim's calls run on the loop's thread, from its
    reader (no drain thread); an ordered call needs a drain when it is launched, so reclaim-ordered keeps
    the drain thread; the other variants run no cuda-reclaim call."""
    return "off" if variant == "reclaim" else "thread"


def busy_against_idle(rows, variant):
    """The target's numbers for `variant`: its p99 stall with the main thread busy against idle, the ratio,
    and whether it is at most 1.5; None when either row is missing."""
    by = {(row["variant"], row["mode"]): row for row in rows}
    if (variant, "idle") not in by or (variant, "busy") not in by:
        return None
    idle = by[(variant, "idle")]["stall_ms"]["p99"]
    busy = by[(variant, "busy")]["stall_ms"]["p99"]
    return {"idle_p99_ms": idle, "busy_p99_ms": busy, "ratio": busy / idle if idle else None,
            "met": bool(idle) and busy is not None and busy <= 1.5 * idle}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callbacks", type=int, default=200, help="callbacks per pass")
    parser.add_argument("--kernel-ms", type=float, default=0.5, help="spin kernel ahead of each callback")
    parser.add_argument("--passes", type=int, default=3, help="passes per row (the row reports their medians)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.callbacks < 10:
        parser.error("--callbacks must be at least 10")
    if args.passes < 1:
        parser.error("--passes must be at least 1")

    bench = Bench(args)
    reclaim = bench.reclaim
    reclaim.set_auto_drain("thread")
    variants = ["native", "reclaim", "reclaim-ordered"] + (["cupy"] if bench.cupy is not None else [])
    if bench.stamp is None:
        variants.remove("native")
    device_name = bench.device.name
    print(f"GPU: {device_name}; Python {platform.python_version()}; cuda-reclaim {reclaim.__version__}; "
          f"switch interval {sys.getswitchinterval() * 1e3:.1f} ms; {args.callbacks} callbacks per pass, "
          f"each behind a {args.kernel_ms} ms kernel")

    # Warm-up: first launches, the drain thread, CuPy's stream wrapper; and how long enqueueing a pass takes
    # here, which sets the gate.
    for variant in variants:
        bench.gated(bench.pass_stall, variant, "idle")
        if bench.stamp is not None:
            bench.gated(bench.pass_timing, variant, "idle")
    bench.gate_ms = max(MIN_GATE_MS, 3 * bench.longest_enqueue_ms)
    print(f"segments of {bench.segment} callbacks behind a {bench.gate_ms:.0f} ms gate (longest enqueueing of a "
          f"segment in the warm-up: {bench.longest_enqueue_ms:.1f} ms); {args.passes} passes per row, medians")

    rows = []
    for mode in MODES:
        for variant in variants:
            if mode == "asyncio":
                reclaim.set_auto_drain(drain_in_asyncio_mode(variant))
            stall_passes, totals, occupancy_passes, latency_passes = [], [], [], []

            def one_pass():
                stalls, total = bench.gated(bench.pass_stall, variant, mode)
                stall_passes.append(summary(stalls))
                totals.append(total)
                if bench.stamp is not None:
                    occupancy, latency = bench.gated(bench.pass_timing, variant, mode)
                    occupancy_passes.append(summary(occupancy, 1e-3))
                    latency_passes.append(summary(latency, 1e-3))

            passes = run_passes(args.passes, one_pass)
            row = {"variant": variant, "mode": mode, "passes": passes, "stall_ms": median_summary(stall_passes),
                   "total_ms": statistics.median(totals)}
            if bench.stamp is not None:
                row["cuda_thread_us"] = median_summary(occupancy_passes)
                row["latency_us"] = median_summary(latency_passes)
            rows.append(row)
            reclaim.set_auto_drain("thread")

    second = []
    if bench.stamp is not None:
        for first_variant in ["none"] + [v for v in variants if v != "native"]:
            stall_passes = []
            passes = run_passes(args.passes, lambda: stall_passes.append(
                summary(bench.gated(bench.pass_second_stream, first_variant))))
            second.append({"first_stream": first_variant, "passes": passes,
                           "stall_ms": median_summary(stall_passes)})

    def fmt(value, digits=3):
        return "–" if value is None else f"{value:.{digits}f}"

    print("\n#### Stall of the stream per host function (CUDA events around it), ms")
    print(f"| variant | main thread | p50 | p99 | max | {args.callbacks} callbacks total |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        s = row["stall_ms"]
        print(f"| {row['variant']} | {row['mode']} | {fmt(s['p50'])} | {fmt(s['p99'])} | {fmt(s['max'])} | "
              f"{fmt(row['total_ms'], 1)} ms |")
    if bench.stamp is not None:
        print("\n#### CUDA's callback thread per callback, and latency from the stream reaching it to the "
              "Python function starting, µs")
        print("| variant | main thread | thread p50 | thread p99 | latency p50 | latency p99 |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            o, l = row["cuda_thread_us"], row["latency_us"]
            print(f"| {row['variant']} | {row['mode']} | {fmt(o['p50'], 1)} | {fmt(o['p99'], 1)} | "
                  f"{fmt(l['p50'], 1)} | {fmt(l['p99'], 1)} |")
        print("\n#### Stream 2's native host functions while stream 1 runs Python callbacks, main thread "
              "busy, ms")
        print("| stream 1 callbacks | p50 | p99 | max |")
        print("|---|---|---|---|")
        for row in second:
            s = row["stall_ms"]
            print(f"| {row['first_stream']} | {fmt(s['p50'])} | {fmt(s['p99'])} | {fmt(s['max'])} |")

    target = busy_against_idle(rows, "reclaim")
    target_ordered = busy_against_idle(rows, "reclaim-ordered")
    for variant, result in (("reclaim", target), ("reclaim-ordered", target_ordered)):
        if result is not None:
            ratio = "–" if result["ratio"] is None else f"{result['ratio']:.2f}x"
            print(f"\ntarget: {variant} busy p99 {result['busy_p99_ms']:.3f} ms vs idle p99 "
                  f"{result['idle_p99_ms']:.3f} ms = {ratio} (at most 1.5x: {'met' if result['met'] else 'NOT met'})")
    stats = reclaim.stats()
    print(f"stats: {stats}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "python": platform.python_version(),
                       "cuda_reclaim": reclaim.__version__, "callbacks": args.callbacks,
                       "kernel_ms": args.kernel_ms, "switch_interval_ms": sys.getswitchinterval() * 1e3,
                       "passes": args.passes, "long_pass_s": LONG_PASS_S, "gate_ms": bench.gate_ms, "segment": bench.segment,
                       "longest_enqueue_ms": bench.longest_enqueue_ms, "gate_reruns": bench.gate_reruns,
                       "rows": rows, "second_stream": second, "target": target,
                       "target_ordered": target_ordered, "stats": stats}, f, indent=1)
    shutil.rmtree(bench.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
