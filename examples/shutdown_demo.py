"""The shutdown demo: five ways to release a Python object from a native (CUDA-like) thread, tortured.

Short child interpreters end in ten different ways (normal end, sys.exit, uncaught exception, SIGINT,
daemon threads, fork, ...) while noexcept native threads keep releasing objects through one strategy.
Each run is classified: clean, crash, hang, Fatal Python error, wrong exit code, native thread killed or
stuck, failed fork child, and for cuda-reclaim a missing or non-conserving leak report. No GPU needed.

    bazel run //examples:shutdown_demo -- [--runs N] [--workers N]
"""

import argparse
import sys
import time

import torture

LEGEND = """\
  A  PyGILState_Ensure(); Py_DECREF(obj); PyGILState_Release()  (what Cython's `with gil:` does)
  B  A, skipped unless Py_IsInitialized()
  C  A, skipped unless Py_IsInitialized() and not finalizing
  D  push on a lock-free stack + one coalesced Py_AddPendingCall drain; stops once finalizing
  R  cuda-reclaim: host_destructor pushes, Python drains in safe places, late pushes are counted"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=16, help="runs per strategy and scenario")
    parser.add_argument("--workers", type=int, default=2, help="children at a time")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a child is a hang")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.workers < 1 or args.timeout <= 0:
        parser.error("--runs and --workers must be >= 1, --timeout > 0")

    jobs = torture.plan(torture.STRATEGIES, torture.SCENARIOS, args.runs, args.runs, seed=None)
    print(f"Python {sys.version.split()[0]}: {len(jobs)} child interpreters, "
          f"{len(torture.SCENARIOS)} ways to end x 5 strategies x {args.runs} runs\n{LEGEND}\n", flush=True)
    started = time.monotonic()
    results = torture.run_matrix(jobs, python=sys.executable, timeout=args.timeout, workers=args.workers)
    print(f"\n{len(results)} runs in {time.monotonic() - started:.0f}s\n")
    print(torture.summary(results, details=False))
    clean_r = not torture.gate(results, ["R"], sys.version.split()[0])
    print("\nR (cuda-reclaim): " + ("clean and conserving in every run." if clean_r else
                                   "NOT clean in every run: see above."))
    return 0 if clean_r else 1


if __name__ == "__main__":
    sys.exit(main())
