"""Shutdown torture harness: many short child interpreters (torture_child.py), each ending one way while
native threads keep handing objects to one release strategy; every run is classified and tallied.

    python torture.py --runs 20 --runs-r 1000 --workers 2          # see docs/shutdown.md
    python torture.py --runs 5 --runs-r 50 --require-clean R       # the CI quick pass

Strategies: A `PyGILState_Ensure; Py_DECREF; PyGILState_Release`, B = A gated on Py_IsInitialized(),
C = B also gated on the finalizing flag, D = coalesced Py_AddPendingCall drain of an intrusive stack,
R = cuda-reclaim's host_destructor. Needs `_torture`, `exit_report` (and for R `cuda_reclaim`) on
sys.path; children get this process's sys.path as PYTHONPATH.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

import _torture
import child_runs
import exit_report
import torture_child

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "torture_child.py")

STRATEGIES = ("A", "B", "C", "D", "R")
SCENARIOS = tuple(torture_child.SCENARIOS)
EXPECTED_RC = {name: rc for name, (_, rc) in torture_child.SCENARIOS.items()}

# Outcomes, in the order a run is classified (the first that applies), with their table headings.
OUTCOMES = collections.OrderedDict(
    [
        ("clean", "clean"),
        ("crash", "crash (signal)"),
        ("crash_idle", "crash, no release call in flight"),
        ("hang", "hang (timeout)"),
        ("fatal", "Fatal Python error"),
        ("exit_code", "wrong exit code"),
        ("threads", "native thread killed/stuck"),
        ("fork_child", "fork child failed"),
        ("not_conserved", "R: report missing/not conserved"),
    ]
)

# Interpreter crashes that are CPython's own, where the gate of --require-clean tolerates a
# "crash, no release call in flight" (still counted and printed). CPython 3.10: a daemon Python thread
# that wins the GIL after Py_Finalize has freed the interpreter state segfaults in take_gil()
# (RESET_GIL_DROP_REQUEST on the freed interpreter); the longer exit() takes after Py_Finalize (C atexit
# handlers, library destructors — CUDA's context teardown in real programs), the likelier it is.
KNOWN_INTERPRETER_CRASHES = {("3.10", "daemon_threads")}


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def expected_reports(scenario):
    # One report per process that ran Py_Finalize: the KeyboardInterrupt exit (which re-raises SIGINT
    # after Py_Finalize, skipping exit()) writes its report at the end of Py_Finalize instead. The fork
    # scenario's child writes its own report.
    return {"fork": 2}.get(scenario, 1)


def reports_or_none(stderr):
    """The exit reports in stderr, or [] when one is malformed (classify() names that run's problem)."""
    try:
        return exit_report.find_reports(stderr)
    except ValueError:
        return []


def classify(strategy, scenario, rc, stderr, shared, timed_out):
    """Return (outcome, detail) for one run; detail says what was seen."""
    expected = EXPECTED_RC[scenario]
    terminate = "terminate called" in stderr
    fatal = "Fatal Python error" in stderr
    if timed_out:
        return "hang", "timeout"
    if rc < 0 and rc != expected:
        detail = signal_name(-rc)
        # The shared record is as of the moment of death: when every native call had returned, the crash
        # was not in a release path (e.g. a daemon Python thread touching a freed interpreter).
        idle = (shared["entered"] == shared["returned"] and
                shared["burst_entered"] == shared["burst_returned"])
        if terminate:
            detail += ", terminate called"
        if fatal:
            detail += ", Fatal Python error"
        return ("crash_idle" if idle else "crash"), detail
    if fatal:
        return "fatal", f"rc={rc}"
    if rc != expected:
        return "exit_code", f"rc={rc}, expected {expected}"
    if shared["killed"] or shared["stuck"]:
        return "threads", f"killed={shared['killed']} stuck={shared['stuck']}"
    fork_status = shared["fork_child_status"]
    if fork_status is not None and os.waitstatus_to_exitcode(fork_status) != 0:
        code = os.waitstatus_to_exitcode(fork_status)
        return "fork_child", (f"child {signal_name(-code)}" if code < 0 else f"child rc={code}")
    if strategy == "R":
        try:
            reports = exit_report.find_reports(stderr)
        except ValueError as error:
            return "not_conserved", str(error)
        if len(reports) != expected_reports(scenario):
            return "not_conserved", f"{len(reports)} exit reports, expected {expected_reports(scenario)}"
        for report in reports:
            if report["conserved"] != "yes" or not exit_report.conserved(report):
                return "not_conserved", "exit report: " + " ".join(f"{k}={v}" for k, v in report.items())
        finalized = shared["finalized_stats"]
        if finalized is None or not exit_report.conserved(finalized):
            return "not_conserved", f"end of Py_Finalize: {finalized}"
    return "clean", ""


def run_one(strategy, scenario, *, python, timeout, env):
    """Run one child; return a result dict (strategy, scenario, outcome, detail, rc, seconds, shared)."""
    with tempfile.NamedTemporaryFile(prefix="torture-", suffix=".shm") as shm:
        returncode, stderr, timed_out, seconds = child_runs.run_child(
            [python, CHILD, strategy, scenario], env=dict(env, TORTURE_SHM=shm.name), timeout=timeout
        )
        shared = _torture.read_shared(shm.name)
    outcome, detail = classify(strategy, scenario, returncode, stderr, shared, timed_out)
    return {
        "strategy": strategy,
        "scenario": scenario,
        "outcome": outcome,
        "detail": detail,
        "rc": returncode,
        "seconds": round(seconds, 3),
        "shared": shared,
        "reports": reports_or_none(stderr) if strategy == "R" else [],
        "stderr_tail": stderr[-2000:] if outcome != "clean" else "",
    }


class Progress:
    """A one-line progress bar on a terminal; a line every 10% otherwise (CI logs)."""

    def __init__(self, total, stream=sys.stderr, enabled=True):
        self.total, self.stream, self.enabled = total, stream, enabled
        self.done = 0
        self.failed = collections.Counter()
        self.started = time.monotonic()
        self.tty = stream.isatty()
        self.next_line = 0.1

    def update(self, result):
        self.done += 1
        if result["outcome"] != "clean":
            self.failed[result["strategy"]] += 1
        if not self.enabled:
            return
        fraction = self.done / self.total
        elapsed = time.monotonic() - self.started
        failed = " ".join(f"{s}:{self.failed[s]}" for s in sorted(self.failed)) or "-"
        text = (f"{self.done}/{self.total} runs, {elapsed:.0f}s, not clean: {failed}, "
                f"last {result['strategy']}/{result['scenario']}")
        if self.tty:
            filled = int(30 * fraction)
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}\x1b[K")
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif fraction >= self.next_line or self.done == self.total:
            self.stream.write(f"[{100 * fraction:3.0f}%] {text}\n")
            self.stream.flush()
            while self.next_line <= fraction:
                self.next_line += 0.1


def plan(strategies, scenarios, runs, runs_r, seed):
    jobs = [
        (strategy, scenario)
        for strategy in strategies
        for scenario in scenarios
        for _ in range(runs_r if strategy == "R" else runs)
    ]
    random.Random(seed).shuffle(jobs)  # mixed load, and the progress bar shows every strategy early
    return jobs


def run_matrix(jobs, *, python, timeout, workers, progress=True, env=None):
    """Run every (strategy, scenario) job on `workers` parallel children; return the result dicts."""
    # A crash must not spend seconds writing a core file per run.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if env is None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["CUDA_RECLAIM_REPORT"] = "1"
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    bar = Progress(len(jobs), enabled=progress)
    lock = threading.Lock()
    results = []

    def one(job):
        result = run_one(*job, python=python, timeout=timeout, env=env)
        with lock:
            results.append(result)
            bar.update(result)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(one, job) for job in jobs]:
            future.result()
    return results


def tally(results):
    """{strategy: Counter(outcome)} and {(strategy, scenario): Counter(outcome)}."""
    by_strategy = collections.defaultdict(collections.Counter)
    by_cell = collections.defaultdict(collections.Counter)
    for r in results:
        by_strategy[r["strategy"]][r["outcome"]] += 1
        by_cell[(r["strategy"], r["scenario"])][r["outcome"]] += 1
    return by_strategy, by_cell


def format_table(header, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*row) for row in rows])


def silent_drops(results, strategy):
    """Mean calls per run that gave up on their object without releasing or counting it (B, C, D skip
    once Python is finalizing or gone; R counts its late pushes in the exit report instead)."""
    runs = [r["shared"]["skipped"] for r in results if r["strategy"] == strategy]
    return f"{sum(runs) / len(runs):.0f}" if runs else "-"


def counted_leaks(results, strategy):
    """R: mean late hand-overs per run that the exit reports counted as leaked_after_close."""
    runs = [sum(rep["leaked_after_close"] for rep in r["reports"])
            for r in results if r["strategy"] == strategy and "reports" in r]
    return f"{sum(runs) / len(runs):.0f}" if strategy == "R" and runs else "-"


def summary(results, *, markdown=False, by_scenario=True, details=True):
    """The strategy x outcome table, then (optionally) what each scenario did to each strategy."""
    by_strategy, by_cell = tally(results)
    strategies = [s for s in STRATEGIES if s in by_strategy]
    outcomes = [o for o in OUTCOMES if o == "clean" or any(by_strategy[s][o] for s in strategies)]
    header = ["strategy", "runs"] + [OUTCOMES[o] for o in outcomes] + ["silent drops/run",
                                                                             "counted leaks/run"]
    rows = [[s, sum(by_strategy[s].values())] + [by_strategy[s][o] for o in outcomes] +
            [silent_drops(results, s), counted_leaks(results, s)] for s in strategies]
    text = [format_table(header, rows, markdown)]
    if by_scenario:
        failures = collections.defaultdict(collections.Counter)
        for r in results:
            if r["outcome"] != "clean":
                failures[(r["strategy"], r["scenario"])][r["detail"]] += 1
        scenarios = [s for s in SCENARIOS if any((st, s) in by_cell for st in strategies)]
        header = ["scenario"] + [f"{s} clean/runs" for s in strategies]
        rows = []
        for scenario in scenarios:
            row = [scenario]
            for s in strategies:
                cell = by_cell.get((s, scenario))
                row.append(f"{cell['clean']}/{sum(cell.values())}" if cell else "")
            rows.append(row)
        text += ["", format_table(header, rows, markdown)]
        if details and failures:
            text += ["", "Not clean, most common details:"]
            for (s, scenario), counter in sorted(failures.items(), key=lambda kv: (kv[0][0],
                                                 SCENARIOS.index(kv[0][1]))):
                seen = "; ".join(f"{n}x {d}" for d, n in counter.most_common(3))
                text.append(f"{'- ' if markdown else '  '}{s} {scenario}: {seen}")
    return "\n".join(text)


def gate(results, strategies, version):
    """The runs of `strategies` that are not clean, less known CPython crashes outside any release call
    (KNOWN_INTERPRETER_CRASHES), which are reported on stdout."""
    minor = ".".join(version.split(".")[:2])

    def known(r):
        return r["outcome"] == "crash_idle" and (minor, r["scenario"]) in KNOWN_INTERPRETER_CRASHES

    chosen = [r for r in results if r["strategy"] in strategies and r["outcome"] != "clean"]
    tolerated = sum(1 for r in chosen if known(r))
    if tolerated:
        print(f"\n{tolerated} run(s) of {', '.join(strategies)} hit a known CPython {minor} crash outside "
              "any release call (see KNOWN_INTERPRETER_CRASHES); not counted against them")
    return [r for r in chosen if not known(r)]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="interpreter for the children")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--scenarios", default="all", help="comma-separated, or 'all': " +
                        ", ".join(SCENARIOS))
    parser.add_argument("--runs", type=int, default=5, help="runs per scenario for A-D")
    parser.add_argument("--runs-r", type=int, default=50, help="runs per scenario for R")
    parser.add_argument("--workers", type=int, default=2, help="children at a time")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a child is a hang")
    parser.add_argument("--require-clean", default="", help="strategies that must be clean in every "
                        "run, else exit status 1 (e.g. R)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--json", help="write every run's result to this file")
    parser.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.scenarios = list(SCENARIOS) if args.scenarios == "all" else args.scenarios.split(",")
    args.require_clean = [s for s in args.require_clean.split(",") if s]
    for name, allowed in (("strategy", STRATEGIES), ("scenario", SCENARIOS)):
        chosen = args.strategies if name == "strategy" else args.scenarios
        unknown = [c for c in chosen if c not in allowed]
        if unknown:
            parser.error(f"unknown {name}: {', '.join(unknown)} (choose from {', '.join(allowed)})")
    if args.runs < 0 or args.runs_r < 0 or args.workers < 1 or args.timeout <= 0:
        parser.error("--runs/--runs-r must be >= 0, --workers >= 1, --timeout > 0")
    return args


def version_of(python):
    return subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main(argv=None):
    args = parse_args(argv)
    jobs = plan(args.strategies, args.scenarios, args.runs, args.runs_r, args.seed)
    version = version_of(args.python)
    print(f"Python {version}: {len(jobs)} child runs ({args.runs_r}/scenario for R, {args.runs}/scenario "
          f"for A-D), {args.workers} at a time, {args.timeout:g}s timeout", flush=True)
    started = time.monotonic()
    results = run_matrix(jobs, python=args.python, timeout=args.timeout, workers=args.workers,
                         progress=not args.no_progress)
    elapsed = time.monotonic() - started
    print(f"\nPython {version}, {len(results)} runs in {elapsed:.0f}s\n")
    print(summary(results, markdown=args.markdown))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"python": version, "seconds": elapsed, "results": results}, out)
    failures = gate(results, args.require_clean, version)
    for r in failures[:5]:
        print(f"\nFAILED {r['strategy']}/{r['scenario']}: {r['outcome']} ({r['detail']}), rc={r['rc']}\n"
              f"shared: {r['shared']}\nstderr tail:\n{r['stderr_tail']}", file=sys.stderr)
    if failures:
        print(f"\n{len(failures)} run(s) of {', '.join(args.require_clean)} were not clean", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
