"""Runs the peers' own callback tests on a GPU machine, with and without cuda-reclaim's integrations.

The peers and their tests (each test file is the peer's own, unmodified but for numba-cuda's skip):

- numba-cuda: ``TestCudaStream`` of ``numba/cuda/tests/cudadrv/test_streams.py``, read from the installed
  numba-cuda. Its class is switched off upstream by a ``@unittest.skip(...)`` decorator; the runner copies the
  file into a temporary folder without that one decorator (nothing else changes) and runs the seven tests
  with unittest. numba-cuda's test support imports ``filecheck``: a wheel of it in ``--wheels`` is put on
  ``sys.path`` (a pure-Python wheel imports as it is).
- CuPy: five tests of ``tests/cupy_tests/cuda_tests/test_stream.py`` and ``test_graph.py`` (CuPy's source
  distribution, in ``--cupy-tests``), with pytest.
- cuda.core: ``test_host_callback_contracts.py`` (cuda-python's ``cuda_core/tests/graph``, in
  ``--cuda-core-tests`` when given), with pytest and ``conftest_cuda_core.py`` of this folder for the two
  fixtures it takes (``init_cuda``, ``device_x2``).

Each peer runs in a fresh interpreter per mode (a crash or a hang costs that run only; ``--timeout`` bounds
it):

- ``upstream``: the peer as installed, cuda-reclaim not imported; the peer's callbacks run on CUDA's thread.
- ``idle``: the integration installed; the main thread waits, blocked, for the tests to end.
- ``busy``: the integration installed; the main thread runs pure Python until the tests end.

In both idle and busy the tests run on a worker thread and the main thread is the one that is idle or busy.
A busy loop on a second thread would leave the main thread idle: the main thread is where CPython runs
signal handlers and pending calls, and the thread a program's own computation usually holds the GIL in, so
the busy mode keeps the main thread itself in the interpreter loop (``while worker.is_alive(): n += 1``,
giving up the GIL only at CPython's switch interval), as a compute-bound program does while CUDA calls back.

Results: ``clients.json`` (every peer, test and mode: outcome ``passed``/``failed``/``error``/``skipped``/
``missing``/``timeout``, a message, seconds; and the versions) and ``clients.txt`` (a table) in ``--results``
(default ``$OUT`` when set, else ``results/`` beside this file). ``make_table.py`` writes docs/clients.md's
table from the JSON. Exit status 0 when every run ended (whatever the outcomes), 1 otherwise.

Usage: python run_clients.py [--peers numba-cuda,cupy,cuda.core] [--modes upstream,idle,busy]
       [--results DIR] [--cupy-tests DIR] [--cuda-core-tests DIR] [--wheels DIR] [--timeout S] [--list]
"""

import argparse
import glob
import importlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))

NUMBA_TESTS = [
    "test_add_callback",
    "test_add_callback_with_default_arg",
    "test_async_done",
    "test_parallel_tasks",
    "test_multiple_async_done",
    "test_multiple_async_done_multiple_streams",
    "test_cancelled_future",
]
CUPY_TESTS = [
    "test_stream.py::TestStream::test_get_and_add_callback",
    "test_stream.py::TestStream::test_launch_host_func",
    "test_stream.py::TestExternalStream::test_get_and_add_callback",
    "test_stream.py::TestExternalStream::test_launch_host_func",
    "test_graph.py::TestGraph::test_capture_launch_host_func",
]
CUDA_CORE_FILE = "test_host_callback_contracts.py"
CUDA_CORE_TESTS = [
    CUDA_CORE_FILE + "::test_python_callback_exception_is_reported_as_unraisable",
    CUDA_CORE_FILE + "::test_ctypes_callback_receives_caller_owned_user_data_pointer",
    CUDA_CORE_FILE + "::test_two_devices_keep_callback_parameters_separate",
]
PEERS = {
    "numba-cuda": ("numba_cuda", "numba-cuda"),
    "cupy": ("cupy", "cupy"),
    "cuda.core": ("cuda_core", "cuda.core"),
}
MODES = ("upstream", "idle", "busy")

# The decorator that switches TestCudaStream off upstream: one line, right above the class (or above its other
# decorators).
_SKIP = re.compile(r"^@unittest\.skip\([^\n]*\)\n(?=(?:@[^\n]*\n)*class TestCudaStream\b)", re.MULTILINE)


def unskipped_numba_tests(source):
    """numba-cuda's test_streams.py `source` without the skip decorator of TestCudaStream; ValueError when the
    file has no such class or the decorator is not there."""
    if not re.search(r"^class TestCudaStream\b", source, re.MULTILINE):
        raise ValueError("run_clients.py: numba-cuda's test_streams.py has no class TestCudaStream")
    rewritten, count = _SKIP.subn("", source)
    if count != 1:
        raise ValueError(
            f"run_clients.py: found {count} skip decorators of TestCudaStream in numba-cuda's test_streams.py, "
            "expected 1"
        )
    return rewritten


def numba_test_file():
    """The installed numba-cuda's test_streams.py."""
    spec = importlib.util.find_spec("numba.cuda.tests.cudadrv.test_streams")
    if spec is None or not spec.origin:
        raise FileNotFoundError(
            "run_clients.py: numba-cuda's numba/cuda/tests/cudadrv/test_streams.py is not installed"
        )
    return spec.origin


# ---- the child: one peer, one mode ------------------------------------------------------------------------------


def _message(text):
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _run_numba(record):
    import unittest

    with open(numba_test_file()) as f:
        source = unskipped_numba_tests(f.read())
    folder = tempfile.mkdtemp(prefix="numba_streams_")
    try:
        path = os.path.join(folder, "test_streams_unskipped.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location("test_streams_unskipped", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in NUMBA_TESTS:
            result = unittest.TestResult()
            started = time.monotonic()
            unittest.defaultTestLoader.loadTestsFromName(f"TestCudaStream.{name}", module).run(result)
            seconds = time.monotonic() - started
            if result.errors:
                record(f"TestCudaStream::{name}", "error", _message(result.errors[0][1]), seconds)
            elif result.failures:
                record(f"TestCudaStream::{name}", "failed", _message(result.failures[0][1]), seconds)
            elif result.skipped:
                record(f"TestCudaStream::{name}", "skipped", result.skipped[0][1], seconds)
            else:
                record(f"TestCudaStream::{name}", "passed", "", seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Collector:
    """A pytest plugin that records each test's outcome (the call phase's, or setup's when that failed)."""

    def __init__(self, record):
        self.record = record

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = {"passed": "passed", "failed": "failed", "skipped": "skipped"}[report.outcome]
            if report.when == "setup" and report.failed:
                outcome = "error"
            crash = getattr(report.longrepr, "reprcrash", None)  # the exception's own line, where pytest has it
            text = "" if report.passed else report.longreprtext
            if crash is not None and crash.message.strip():
                text = crash.message.strip().splitlines()[0]
            if report.skipped and isinstance(report.longrepr, tuple):
                text = str(report.longrepr[2])
            record_id = report.nodeid.split("/")[-1]
            self.record(record_id, outcome, _message(text), report.duration)


def _run_pytest(record, folder, tests, conftest=None):
    import pytest

    work = tempfile.mkdtemp(prefix="peer_tests_")
    try:
        for name in {test.split("::")[0] for test in tests}:
            shutil.copy(os.path.join(folder, name), work)
        if conftest:
            shutil.copy(conftest, os.path.join(work, "conftest.py"))
        args = ["-p", "no:cacheprovider", "-q", "-rs", "--rootdir", work, "-o", "addopts=", "-W", "default"]
        pytest.main(args + [os.path.join(work, test) for test in tests], plugins=[_Collector(record)])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _versions():
    versions = {"python": platform.python_version()}
    for name in ("numba_cuda", "numba", "cupy", "cuda.core", "cuda.bindings", "cuda_reclaim", "pytest"):
        if name == "cuda_reclaim" and name not in sys.modules:
            continue
        try:
            module = importlib.import_module(name)
            versions[name] = getattr(module, "__version__", "?")
        except Exception as error:  # noqa: BLE001 - a missing or broken peer is reported, not raised
            versions[name] = f"not usable: {error!r}"[:200]
    return versions


def child(peer, mode, out, options):
    """Run `peer`'s tests in `mode`; write {"tests": {...}, "versions": {...}, "error": ...} to `out`."""
    for wheel in sorted(glob.glob(os.path.join(options.wheels, "*.whl"))):
        sys.path.append(wheel)  # pure-Python wheels (filecheck) import from the zip
    results, failure = {}, None

    def record(name, outcome, message, seconds):
        results[name] = {"outcome": outcome, "message": message, "seconds": round(seconds, 3)}

    def run_tests():
        nonlocal failure
        try:
            if peer == "numba-cuda":
                _run_numba(record)
            elif peer == "cupy":
                _run_pytest(record, options.cupy_tests, CUPY_TESTS)
            else:
                conftest = os.path.join(HERE, "conftest_cuda_core.py")
                _run_pytest(record, options.cuda_core_tests, CUDA_CORE_TESTS, conftest)
        except BaseException:  # noqa: BLE001 - whatever stops the run is the run's result
            failure = traceback.format_exc()[-4000:]

    integration = None
    if mode != "upstream":
        integration = importlib.import_module("cuda_reclaim.integrations." + PEERS[peer][0])
        integration.install()
    worker = threading.Thread(target=run_tests, name="peer-tests")
    started = time.monotonic()
    worker.start()
    spins = 0
    if mode == "busy":
        while worker.is_alive():
            spins += 1
    worker.join()
    seconds = time.monotonic() - started
    reclaim = {}
    if integration is not None:
        integration.uninstall()
        import cuda_reclaim

        stats = cuda_reclaim.stats()  # the calls that went through cuda-reclaim: the integration was used
        reclaim = {key: stats[key] for key in ("calls_run", "calls_cancelled", "calls_outstanding") if key in stats}
    with open(out, "w") as f:
        json.dump(
            {"tests": results, "error": failure, "seconds": round(seconds, 3), "main_thread_spins": spins,
             "cuda_reclaim_stats": reclaim, "versions": _versions()},
            f,
            indent=1,
        )


# ---- the parent: every peer and mode ----------------------------------------------------------------------------


def expected_tests(peer):
    if peer == "numba-cuda":
        return [f"TestCudaStream::{name}" for name in NUMBA_TESTS]
    return CUPY_TESTS if peer == "cupy" else CUDA_CORE_TESTS


def _missing_reason(peer, options):
    if peer == "cupy" and not all(
        os.path.exists(os.path.join(options.cupy_tests, name)) for name in ("test_stream.py", "test_graph.py")
    ):
        return f"CuPy's test files are not in {options.cupy_tests}"
    if peer == "cuda.core" and not (
        options.cuda_core_tests and os.path.exists(os.path.join(options.cuda_core_tests, CUDA_CORE_FILE))
    ):
        return f"cuda.core's {CUDA_CORE_FILE} was not given (--cuda-core-tests)"
    return None


def _merge(peer_results, name, mode, entry):
    # A parametrized test reports one id per parameter set: each is kept under its own id.
    peer_results.setdefault(name, {})[mode] = entry


def run_all(options):
    results = {"peers": {}, "modes": list(options.modes), "versions": {}}
    ended = True
    for peer in options.peers:
        peer_results = {}
        reason = _missing_reason(peer, options)
        for mode in options.modes:
            if reason:
                for name in expected_tests(peer):
                    _merge(peer_results, name, mode, {"outcome": "missing", "message": reason, "seconds": 0})
                continue
            out = os.path.join(options.results, f"clients-{peer}-{mode}.json")
            command = [sys.executable, os.path.abspath(__file__), "--child", peer, mode, out, *options.forwarded]
            print(f"=== {peer}, {mode}", flush=True)
            started = time.monotonic()
            try:
                completed = subprocess.run(command, timeout=options.timeout, capture_output=True, text=True)
                log, timed_out = completed.stdout + completed.stderr, False
            except subprocess.TimeoutExpired as expired:
                log = b"".join(part or b"" for part in (expired.stdout, expired.stderr)).decode(errors="replace")
                timed_out = True
            with open(os.path.join(options.results, f"clients-{peer}-{mode}.log"), "w") as f:
                f.write(log)
            child_result = {}
            if os.path.exists(out) and not timed_out:
                with open(out) as f:
                    child_result = json.load(f)
                results["versions"].update(child_result.get("versions", {}))
                results.setdefault("runs", {})[f"{peer} {mode}"] = {
                    key: child_result.get(key) for key in ("seconds", "main_thread_spins", "cuda_reclaim_stats")
                }
            else:
                ended = False
            found = child_result.get("tests", {})
            for name in expected_tests(peer):
                ran = {key: value for key, value in found.items() if key == name or key.startswith(name + "[")}
                if ran:
                    for key, value in ran.items():
                        _merge(peer_results, key, mode, value)
                elif timed_out:
                    message = f"the run did not end within {options.timeout} s"
                    _merge(peer_results, name, mode, {"outcome": "timeout", "message": message, "seconds": 0})
                else:
                    message = _message(child_result.get("error") or log) or "the test did not run"
                    _merge(peer_results, name, mode, {"outcome": "error", "message": message, "seconds": 0})
            print(f"    {time.monotonic() - started:.1f} s", flush=True)
        results["peers"][peer] = peer_results
    with open(os.path.join(options.results, "clients.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = table(results)
    with open(os.path.join(options.results, "clients.txt"), "w") as f:
        f.write(text)
    print(text)
    return ended


def table(results):
    modes = results["modes"]
    lines = [f"{'peer':<11} {'test':<70} " + " ".join(f"{mode:<9}" for mode in modes)]
    for peer, tests in results["peers"].items():
        for name, by_mode in tests.items():
            outcomes = " ".join(f"{by_mode.get(mode, {}).get('outcome', '-'):<9}" for mode in modes)
            lines.append(f"{peer:<11} {name:<70} {outcomes}")
    counts = {}
    for tests in results["peers"].values():
        for by_mode in tests.values():
            for entry in by_mode.values():
                counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
    lines.append("outcomes: " + ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())))
    return "\n".join(lines) + "\n"


def list_plan(options):
    """What would run, and whether each peer's tests are found (numba-cuda's file rewritten as it would be)."""
    for peer in options.peers:
        reason = _missing_reason(peer, options)
        if peer == "numba-cuda":
            try:
                path = numba_test_file()
                with open(path) as f:
                    unskipped_numba_tests(f.read())
                reason = None
                print(f"numba-cuda: {path} (the skip decorator of TestCudaStream is removed in a copy)")
            except (ImportError, OSError, ValueError) as error:
                reason = str(error)
        for name in expected_tests(peer):
            print(f"  {peer} {name}: {'runs' if not reason else 'missing: ' + reason}")
    print("modes:", ", ".join(options.modes))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--modes", default=",".join(MODES))
    default_results = os.environ.get("OUT") or os.path.join(HERE, "results")
    parser.add_argument("--results", default=default_results)
    parser.add_argument("--cupy-tests", default=os.path.join(HERE, "peers", "cupy"))
    parser.add_argument("--cuda-core-tests", default=os.path.join(HERE, "peers", "cuda_core"))
    parser.add_argument("--wheels", default=os.path.join(HERE, "wheels"))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--list", action="store_true", help="say what would run, and run nothing")
    parser.add_argument("--child", nargs=3, metavar=("PEER", "MODE", "OUT"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    options.peers = [peer for peer in options.peers.split(",") if peer]
    options.modes = [mode for mode in options.modes.split(",") if mode]
    for peer in options.peers:
        if peer not in PEERS:
            parser.error(f"unknown peer {peer!r}: one of {', '.join(PEERS)}")
    for mode in options.modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
    options.forwarded = [
        "--cupy-tests", options.cupy_tests, "--cuda-core-tests", options.cuda_core_tests, "--wheels", options.wheels
    ]
    if options.child:
        child(*options.child, options)
        return 0
    if options.list:
        list_plan(options)
        return 0
    os.makedirs(options.results, exist_ok=True)
    return 0 if run_all(options) else 1


if __name__ == "__main__":
    sys.exit(main())
