"""bench/make_report.py — turns one benchmark run into docs/benchmarks.md (tables, ratios, a plot).

    python make_report.py --python PY.json --cpp CPP.json [--out docs/benchmarks.md] [--plot docs/x.png]
    python make_report.py --python PY.json --cpp CPP.json --check    # only: is every row there?

PY.json comes from bench/bench_python.py, CPP.json from `queue_bench --benchmark_format=json`. The prose
is bench/report/template.md; its tables (report/tables.py, report/gpu_tables.py) and every number in it
(report/facts.py) come from the run, and every ratio compares numbers of the same run; the result is
hard-wrapped (report/wrap.py). --check exits 1 naming the missing rows (the smoke test's only assertion:
no timing is ever asserted).
"""

import argparse
import json
import os
import string
import sys

from report import facts, gpu_tables, tables, wrap

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report", "template.md")


def load_json(path):
    with open(path) as f:
        return json.load(f)


def short_lived_threads(path):
    """Section 7: bench/short_lived_threads.py's output as committed, or a line saying there is none."""
    if not path or not os.path.exists(path):
        return "No short-lived-threads results given to this report (`--short-lived`)."
    with open(path) as f:
        return f"Results: `{path}`.\n\n" + f.read().strip()


def document(r, gpu, args, plot_name, gpu_callbacks=None, scaling=None, scaling_plot_name=None, instructions=None):
    """The report: the template filled with this run's tables and facts."""
    drain_python, drain_cpp = tables.drain_tables(r)
    idle_calls, idle_thread = tables.idle_tables(r)
    memory_python, memory_cpp = tables.memory_tables(r)
    values = facts.all_facts(r, gpu, args.command, scaling)
    values.update(
        caveat=f"\n> {args.caveat}\n" if args.caveat else "",
        producer_tables=tables.producer_tables(r),
        cpp_push_table=tables.cpp_push_table(r),
        push_parts_table=tables.push_parts_table(r),
        scaling_table=tables.scaling_table(scaling),
        scaling_plot=(f"![producer scaling]({scaling_plot_name})" if scaling_plot_name else ""),
        latency_table=tables.latency_table(r),
        plot=f"![producer cost and release latency]({plot_name})" if plot_name else "",
        drain_python=drain_python,
        drain_cpp=drain_cpp,
        instruction_results=tables.instruction_results(instructions, args.instructions),
        instruction_gap=tables.instruction_gap(instructions, r),
        idle_calls=idle_calls,
        idle_thread=idle_thread,
        memory_python=memory_python,
        memory_cpp=memory_cpp,
        slower_rows="\n".join(f"- {note}" for note in tables.slower_rows(r) + tables.scaling_slower_rows(scaling))
        or "- nowhere",
        gpu_results=gpu_tables.gpu_results(gpu, args.gpu),
        short_lived_threads=short_lived_threads(args.short_lived),
        gpu_callback_results=gpu_tables.gpu_callback_results(gpu_callbacks, args.gpu_callbacks),
    )
    with open(TEMPLATE) as f:
        template = f.read()
    # Every row of the "slower" list points at the bullet that explains it: those bullets must exist.
    r.missing += [f"template: the bullet \"{name}\" that the slower list points at"
                  for name in tables.WHY_SLOWER.values() if f"- **{name}.**" not in template]
    # Facts and tables land inside the template's paragraphs: wrap what they make, as the other docs are
    # (tests/docs checks the committed result).
    return wrap.wrap(string.Template(template).substitute(values))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="bench_python.py's JSON")
    parser.add_argument("--cpp", required=True, help="queue_bench's JSON")
    parser.add_argument("--out", help="markdown file to write (default: stdout)")
    parser.add_argument("--plot", help="PNG to write next to --out (needs matplotlib)")
    parser.add_argument("--command", default="bash bench/run_benchmarks.sh", help="the command to cite")
    parser.add_argument("--caveat", default="", help="a line quoted under the run's facts")
    parser.add_argument("--check", action="store_true", help="only check that every row is present")
    parser.add_argument("--short-lived", default="docs/benchmarks-short-lived-threads.md",
                        help="bench/short_lived_threads.py's table (section 7), if present")
    parser.add_argument("--gpu", default="docs/benchmarks-gpu.json",
                        help="gpu_graph_bench.py's JSON from a GPU machine (section 6), if present")
    parser.add_argument("--scaling", default="docs/benchmarks-scaling.json",
                        help="queue_bench's JSON with --threads=1,2,4,8,16 from a many-core host, if present")
    parser.add_argument("--gpu-callbacks", default="docs/benchmarks-gpu-callbacks.json",
                        help="gpu_callbacks_bench.py's JSON from a GPU machine (section 7), if present")
    parser.add_argument("--instructions", default="docs/benchmarks-instructions.json",
                        help="count_instructions.py's JSON (instructions per released reference), if present")
    args = parser.parse_args(argv)
    r = tables.Results(load_json(args.python), load_json(args.cpp))
    gpu = load_json(args.gpu) if args.gpu and os.path.exists(args.gpu) else None
    gpu_callbacks = (load_json(args.gpu_callbacks)
                     if args.gpu_callbacks and os.path.exists(args.gpu_callbacks) else None)
    scaling = load_json(args.scaling) if args.scaling and os.path.exists(args.scaling) else None
    instructions = (load_json(args.instructions)
                    if args.instructions and os.path.exists(args.instructions) else None)
    plot_name = scaling_plot_name = None
    if args.plot and not args.check:
        from report import plot  # matplotlib is needed only here

        if plot.plot(r, args.plot):
            plot_name = os.path.basename(args.plot)
        scaling_path = args.plot[: -len(".png")] + "-scaling.png" if args.plot.endswith(".png") else None
        if scaling is not None and scaling_path and plot.plot_scaling(scaling, scaling_path):
            scaling_plot_name = os.path.basename(scaling_path)
    if instructions is not None and not instructions.get("skipped"):
        r.missing += [f"instructions: {method}" for method in tables.INSTRUCTION_METHODS
                      if method not in instructions["methods"]]
    text = document(r, gpu, args, plot_name, gpu_callbacks, scaling, scaling_plot_name, instructions)
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
