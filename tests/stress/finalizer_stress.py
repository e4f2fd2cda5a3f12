"""Finalizer stress test: many runs of stress_child.py, each under a timeout, checked one by one.

A run passes when the process ends within the limit, with the exit status its ending gives (0, 1 for an
exception, SIGINT for a KeyboardInterrupt), with exactly one exit report that says conserved=yes, and
without a STRESS-FAILURE line (a fork child that found the law broken). Prints one line per failure (for a
hang, every thread's stack: the run is ended by SIGABRT under faulthandler) and a closing "N passed, N
failed" line; exits 1 if any run failed.

    python finalizer_stress.py --runs 300 --jobs 2 [--first-seed 0] [--timeout 60]
"""

import argparse
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time

import exit_report

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "stress_child.py")
EXPECTED_STATUS = {
    "return": {0},
    "sys_exit": {0},
    "close_then_return": {0},
    "exception": {1},
    "keyboard_interrupt": {-signal.SIGINT, 128 + signal.SIGINT},
}


def exit_report_problem(stderr):
    """What is wrong with a run's exit reports (there must be exactly one, saying conserved=yes), or None."""
    try:
        reports = exit_report.find_reports(stderr)
    except ValueError as malformed:
        return f"malformed exit report: {malformed}"
    if len(reports) != 1:
        return f"{len(reports)} exit reports"
    if reports[0]["conserved"] != "yes":
        return "exit report says conserved=no"
    return None


def run_one(seed, timeout):
    # faulthandler: a hung run is ended by SIGABRT, which makes it print every thread's stack.
    env = dict(
        os.environ, CUDA_RECLAIM_REPORT="1", PYTHONWARNINGS="ignore::DeprecationWarning", PYTHONFAULTHANDLER="1"
    )
    started = time.monotonic()
    # Its own process group: a hung run's fork children are ended with it (they hold its pipes open).
    child = subprocess.Popen(
        [sys.executable, CHILD, str(seed)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stderr = ""
        for ending in (signal.SIGABRT, signal.SIGKILL):
            try:
                os.killpg(child.pid, ending)
            except ProcessLookupError:
                pass
            try:
                _, stderr = child.communicate(timeout=10)
                break
            except subprocess.TimeoutExpired as late:
                stderr = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else ""
        problem = f"hang: no exit within {timeout} s; its stacks:\n    {indented_tail(stderr, 80)}"
        return seed, problem, time.monotonic() - started
    status = child.returncode
    ending = re.search(r"ending=(\w+)", stdout)
    problem = None
    if ending is None:
        problem = f"did not reach its ending (status {status})"
    elif status not in EXPECTED_STATUS[ending.group(1)]:
        problem = f"status {status} for ending {ending.group(1)}"
    elif (report_problem := exit_report_problem(stderr)) is not None:
        problem = report_problem
    elif "STRESS-FAILURE" in stderr:
        problem = "a check inside the run failed"
    if problem is not None:
        problem = f"{problem}\n    stderr tail:\n    {indented_tail(stderr, 30)}"
    return seed, problem, time.monotonic() - started


def indented_tail(text, lines):
    """The last `lines` lines of `text`, joined for a failure line (indented by four after the first)."""
    return "\n".join(text.strip().splitlines()[-lines:]).replace("\n", "\n    ")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    passed = failed = 0
    slowest = 0.0
    seeds = range(args.first_seed, args.first_seed + args.runs)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for seed, problem, seconds in pool.map(lambda s: run_one(s, args.timeout), seeds):
            slowest = max(slowest, seconds)
            if problem is None:
                passed += 1
            else:
                failed += 1
                print(f"seed {seed}: {problem}", flush=True)
    print(f"finalizer stress: seeds {args.first_seed}..{args.first_seed + args.runs - 1}, slowest run {slowest:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
