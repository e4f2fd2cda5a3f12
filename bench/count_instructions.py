"""Instructions per released reference, counted by callgrind: where a drain's time goes, without noise.

The drain table of docs/benchmarks.md times each method; on one machine its ratios move by several percent
from run to run. An instruction count does not: callgrind (valgrind) counts every instruction the release
of 10^6 dying objects executes, restricted to the method's own drain function, and attributes each to the
function that executed it. The *die* rows are dominated by the release chain every method shares
(`_Py_Dealloc`, the object's deallocator, pymalloc's free); what differs between methods is their own code
around it, and this says how many instructions that is, split by part for cuda-reclaim's drain.

    bazel run -c opt //bench:count_instructions -- --json docs/benchmarks-instructions.json

Needs valgrind (`apt-get install valgrind`); without it, it says so and writes a JSON that says so. A run
takes about a minute (each method runs once under callgrind, roughly fifty times slower than natively).
bench/make_report.py renders the JSON into the drain section of the report.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Each method: how the child releases the references, and the functions whose calls callgrind counts (with
# everything they call). The loop and the action are bench/reclaim_bench_ext.cc's; cuda-reclaim's drain is
# the public drain() from the point where it enters the module's drain; the anchors' drains are the
# bench's (cuda.core's runs in its pending call, or in the explicit drain should that come first).
METHODS = {
    "plain_decref_loop": ("*decref_each*",),
    "plain_release_fn_loop": ("*release_like_bindings*",),
    "cuda_reclaim": ("*drain_safely*",),
    "mutex_vector": ("*drain_strategy*",),
    "cas_pending_call": ("*PendingCallStack::pending_call*", "*drain_strategy*"),
}

# Where an instruction of cuda-reclaim's drain belongs, by the function that ran it (callgrind's names).
# Anything not named here inside the extension is the drain loop (counts, signal). moodycamel's copy is
# take_bulk (cleanup/reclaim_queue.cc), into which its try_dequeue_bulk is flattened, or its producers'
# dequeue_bulk where a build keeps that out of line.
PARTS = (
    ("release_loop", re.compile(r"release_references|release_batch<|release_batch_like_bindings|decref_each|drain_strategy|pending_call")),
    ("copy", re.compile(r"take_bulk|dequeue_bulk")),
)
RELEASE_CHAIN = "release_chain"
DRAIN_LOOP = "drain_loop"


def run_child(method, n):
    """Releases n dying references by `method` (run under callgrind by the parent)."""
    import _reclaim_bench as ext
    import cuda_reclaim

    cuda_reclaim.set_auto_drain("off")
    objects = ext.probes(n)
    if method in ("plain_decref_loop", "plain_release_fn_loop"):
        ext.decref_loop(objects, True, method == "plain_release_fn_loop", True)
        return
    ext.burst(method, objects, True)  # the strategy now holds the only references
    if method == "cuda_reclaim":
        released = 0
        while released < n:
            released += cuda_reclaim.drain()
    else:
        ext.drain(method)
        if method == "cas_pending_call":
            ext.free_nodes()


def part_of(function, obj):
    """The part of a drain that an instruction of `function` (in the object file `obj`) belongs to."""
    for name, pattern in PARTS:
        if pattern.search(function):
            return name
    if "_reclaim." in obj and "_reclaim_bench" not in obj:
        return DRAIN_LOOP
    return RELEASE_CHAIN  # CPython, the C library, the objects' deallocator (the bench's probe type)


# One function's line of callgrind_annotate: "1,234 (12.34%)  file:function [object]".
ANNOTATE_LINE = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(.*?)(?:\s+\[(.*)\])?\s*$")


def count(method, n, valgrind, annotate, work):
    """Instructions of `method`'s drain of n dying references, per part (callgrind's exclusive counts)."""
    out = os.path.join(work, f"{method}.callgrind")
    command = [valgrind, "--tool=callgrind", *(f"--toggle-collect={name}" for name in METHODS[method]),
               f"--callgrind-out-file={out}", sys.executable, os.path.abspath(__file__), "--child", method, str(n)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listing = subprocess.run([annotate, "--threshold=100", out], check=True, capture_output=True, text=True).stdout
    parts = {}
    total = None
    for line in listing.splitlines():
        match = ANNOTATE_LINE.match(line)
        if not match:
            continue
        instructions = int(match.group(1).replace(",", ""))
        where = match.group(2)
        if where.startswith("PROGRAM TOTALS"):
            total = instructions
            continue
        function = where.split(":", 1)[-1]
        part = part_of(function, match.group(3) or where)
        parts[part] = parts.get(part, 0) + instructions
    if not total:
        raise RuntimeError(f"callgrind counted nothing for {method} (are {METHODS[method]} still its functions?)")
    return {"n": n, "instructions": total, "per_ref": total / n,
            "parts_per_ref": {part: value / n for part, value in sorted(parts.items())}}


def python_version():
    return "%d.%d.%d" % sys.version_info[:3]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results here (default: stdout)")
    parser.add_argument("--n", type=int, default=1_000_000, help="references per method (default 10^6)")
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_child(args.child[0], int(args.child[1]))
        return 0
    if args.n < 1:
        parser.error("--n must be at least 1")
    result = {"python": python_version(), "fate": "die", "methods": {}}
    valgrind, annotate = shutil.which("valgrind"), shutil.which("callgrind_annotate")
    if valgrind is None or annotate is None:
        result["skipped"] = "valgrind (with callgrind_annotate) is not installed: apt-get install valgrind"
        print(f"count_instructions: skipped: {result['skipped']}", file=sys.stderr)
    else:
        with tempfile.TemporaryDirectory() as work:
            for method in METHODS:
                result["methods"][method] = count(method, args.n, valgrind, annotate, work)
                print(f"{method}: {result['methods'][method]['per_ref']:.1f} instructions per reference",
                      file=sys.stderr)
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
