"""Callbacks torture: child interpreters (callbacks_child.py) end in several ways while (fake) CUDA threads
keep firing host calls, keep_alive_until host functions and graph host nodes, through Py_Finalize and
exit(). Every run must be clean:

- exits as its scenario says (status or signal), within the time limit; no "Fatal Python error", no
  "terminate called";
- no callback runs after close() returned (no LATE-CALLBACK line);
- after the final close nothing is outstanding (every call CUDA had not handed back was cancelled);
- one exit report per process, conserved, with attached_to_cuda == handed_back_by_cuda + held_by_cuda:
  what fired after the close is counted (leaked_after_close), what never fired is held.

    python callbacks_torture.py --runs 5 --workers 2          # the CI pass (//tests/shutdown:callbacks_pass)

Needs cuda_reclaim, bench/exit_report.py and bench/shutdown/child_runs.py on sys.path, and --fake-libcuda (or CUDA_RECLAIM_LIBCUDA)
naming the fake driver.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import resource
import sys

import callbacks_child
import child_runs
import exit_report

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "callbacks_child.py")
AFTER_CLOSE = re.compile(r"^AFTER-CLOSE (.*)$", re.MULTILINE)


def fields(text):
    return {key: int(value) for key, value in (item.split("=", 1) for item in text.split())}


def problems(scenario, rc, stderr, timed_out):
    """Everything wrong with one run (empty: clean)."""
    if timed_out:
        return ["hang (timeout)"]
    found = []
    expected = callbacks_child.SCENARIOS[scenario]
    if rc != expected:
        found.append(f"exit status {rc}, expected {expected}")
    for marker in ("Fatal Python error", "terminate called", "LATE-CALLBACK", "Segmentation fault"):
        if marker in stderr:
            found.append(f"stderr says {marker!r}")
    processes = 2 if scenario == "fork" else 1
    try:
        reports = exit_report.find_reports(stderr)
    except ValueError as error:
        return found + [str(error)]
    if len(reports) != processes:
        found.append(f"{len(reports)} exit reports, expected {processes}")
    for report in reports:
        if report["conserved"] != "yes" or not exit_report.conserved(report):
            found.append(f"exit report not conserved: {report}")
        if report.get("attached_to_cuda") != report.get("handed_back_by_cuda", -1) + report.get("held_by_cuda", -1):
            found.append(f"exit report breaks attached == handed back + held: {report}")
    after_close = [fields(match) for match in AFTER_CLOSE.findall(stderr)]
    if len(after_close) != processes:
        found.append(f"{len(after_close)} AFTER-CLOSE lines, expected {processes}")
    for counters in after_close:
        if counters["calls_outstanding"] != 0:
            found.append(f"calls still outstanding after close: {counters}")
    return found


def run_one(scenario, seed, *, python, timeout, env):
    returncode, stderr, timed_out, seconds = child_runs.run_child(
        [python, CHILD, scenario, str(seed)], env=env, timeout=timeout
    )
    return {
        "scenario": scenario,
        "seed": seed,
        "problems": problems(scenario, returncode, stderr, timed_out),
        "seconds": seconds,
        "stderr": stderr,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per scenario")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per child")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--scenarios", nargs="*", default=list(callbacks_child.SCENARIOS))
    parser.add_argument("--fake-libcuda", default=os.environ.get("CUDA_RECLAIM_LIBCUDA"))
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    args.fake_libcuda = os.path.abspath(args.fake_libcuda) if args.fake_libcuda else None
    if not args.fake_libcuda or not os.path.exists(args.fake_libcuda):
        parser.error(f"the fake driver is needed (--fake-libcuda): {args.fake_libcuda!r}")
    unknown = set(args.scenarios) - set(callbacks_child.SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")

    # A crash must not spend seconds writing a core file per run.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["CUDA_RECLAIM_REPORT"] = "1"
    env["CUDA_RECLAIM_LIBCUDA"] = args.fake_libcuda
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    jobs = [(scenario, args.first_seed + run) for run in range(args.runs) for scenario in args.scenarios]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(lambda job: run_one(*job, python=args.python, timeout=args.timeout, env=env), jobs))

    by_scenario = collections.defaultdict(lambda: [0, 0])
    for result in results:
        by_scenario[result["scenario"]][0 if not result["problems"] else 1] += 1
    print(f"{'scenario':<22} {'clean':>6} {'failed':>7}")
    for scenario in args.scenarios:
        clean, failed = by_scenario[scenario]
        print(f"{scenario:<22} {clean:>6} {failed:>7}")
    late = [report for result in results for report in exit_report.find_reports(result["stderr"])]
    print(f"exit reports: {len(late)}; fired after close (leaked_after_close, summed): "
          f"{sum(r['leaked_after_close'] for r in late)}; held by CUDA at exit (summed): "
          f"{sum(r.get('held_by_cuda', 0) for r in late)}")
    failures = [result for result in results if result["problems"]]
    for result in failures:
        print(f"\nFAILED {result['scenario']} seed {result['seed']}: {'; '.join(result['problems'])}")
        print(result["stderr"][-3000:])
    print(f"\n{len(results) - len(failures)} clean, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
