"""run_clients.py without a GPU: the rewrite of numba-cuda's test file, the command line, and whole runs against
the stand-in peers of standins/ (numba-cuda's layout and CuPy's, with the fake driver): upstream's numba-cuda
errors before a callback runs, and with the integrations every test passes with the main thread idle and busy,
through cuda-reclaim."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNFILES = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import make_table  # noqa: E402
import run_clients  # noqa: E402

STANDINS = os.path.join(HERE, "standins")
FAKE_DRIVER = os.path.join(RUNFILES, "tests", "graph", "fake_libcuda.so")

# numba-cuda's layout around TestCudaStream, as text: the input of the rewrite under test.
with open(os.path.join(HERE, "numba_layout_example.py")) as _layout:
    NUMBA_LAYOUT = _layout.read()


def test_only_the_skip_decorator_of_test_cuda_stream_is_removed():
    rewritten = run_clients.unskipped_numba_tests(NUMBA_LAYOUT)
    assert rewritten == NUMBA_LAYOUT.replace('@unittest.skip("Disabled temporarily")\n', "", 1)
    assert '@skip_on_cudasim("CUDA Driver API unsupported in the simulator")\nclass TestCudaStream' in rewritten
    with open(os.path.join(STANDINS, "numba", "cuda", "tests", "cudadrv", "test_streams.py")) as f:
        standin = f.read()
    assert run_clients.unskipped_numba_tests(standin).count("@unittest.skip(") == standin.count("@unittest.skip(") - 1


def test_a_numba_file_without_the_class_or_the_decorator_is_refused():
    with pytest.raises(ValueError, match="no class TestCudaStream"):
        run_clients.unskipped_numba_tests("class TestOther:\n    pass\n")
    with pytest.raises(ValueError, match="found 0 skip decorators of TestCudaStream"):
        run_clients.unskipped_numba_tests(NUMBA_LAYOUT.replace('@unittest.skip("Disabled temporarily")\n', ""))


def _runner(*args, timeout=300):
    env = dict(os.environ, CUDA_RECLAIM_LIBCUDA=FAKE_DRIVER)
    env["PYTHONPATH"] = os.pathsep.join([STANDINS, *(p for p in sys.path if p)])
    env.pop("OUT", None)
    return subprocess.run(
        [sys.executable, os.path.join(HERE, "run_clients.py"), *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_the_command_line_refuses_an_unknown_peer_or_mode():
    result = _runner("--peers", "numba-cuda,torch")
    assert result.returncode == 2 and "unknown peer 'torch'" in result.stderr
    result = _runner("--modes", "idle,sometimes")
    assert result.returncode == 2 and "unknown mode 'sometimes'" in result.stderr


def test_list_says_what_runs_and_what_is_missing(tmp_path):
    result = _runner("--list", "--cupy-tests", str(tmp_path), "--cuda-core-tests", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "numba/cuda/tests/cudadrv/test_streams.py (the skip decorator of TestCudaStream is removed" in result.stdout
    assert "numba-cuda TestCudaStream::test_cancelled_future: runs" in result.stdout
    missing = f"test_graph.py::TestGraph::test_capture_launch_host_func: missing: CuPy's test files are not in {tmp_path}"
    assert missing in result.stdout
    assert "cuda.core's test_host_callback_contracts.py was not given" in result.stdout


def test_a_whole_run_against_the_stand_ins(tmp_path):
    if not os.path.exists(FAKE_DRIVER):
        pytest.skip(f"fake driver not built: {FAKE_DRIVER}")
    cupy_tests = os.path.join(STANDINS, "peer_tests", "cupy")
    result = _runner("--results", str(tmp_path), "--cupy-tests", cupy_tests, "--cuda-core-tests", str(tmp_path),
                     "--timeout", "120")
    assert result.returncode == 0, result.stdout + result.stderr
    with open(tmp_path / "clients.json") as f:
        results = json.load(f)
    numba = results["peers"]["numba-cuda"]
    assert sorted(numba) == sorted(f"TestCudaStream::{name}" for name in run_clients.NUMBA_TESTS)
    for name, by_mode in numba.items():
        assert by_mode["upstream"]["outcome"] == "error", (name, by_mode)
        assert "has no attribute 'value'" in by_mode["upstream"]["message"]
        assert by_mode["idle"]["outcome"] == by_mode["busy"]["outcome"] == "passed", (name, by_mode)
    cupy = results["peers"]["cupy"]
    assert "test_graph.py::TestGraph::test_capture_launch_host_func[True]" in cupy, "each parameter set kept"
    assert len(cupy) == 6
    for name, by_mode in cupy.items():
        assert {mode: entry["outcome"] for mode, entry in by_mode.items()} == dict.fromkeys(run_clients.MODES, "passed")
    for name, by_mode in results["peers"]["cuda.core"].items():
        assert {entry["outcome"] for entry in by_mode.values()} == {"missing"}
    runs = results["runs"]
    assert runs["numba-cuda busy"]["main_thread_spins"] > 0 and runs["numba-cuda idle"]["main_thread_spins"] == 0
    assert runs["numba-cuda idle"]["cuda_reclaim_stats"]["calls_run"] >= 7, "the callbacks went through cuda-reclaim"
    assert runs["cupy busy"]["cuda_reclaim_stats"]["calls_run"] >= 80
    assert runs["numba-cuda upstream"]["cuda_reclaim_stats"] == {}
    with open(tmp_path / "clients.txt") as f:
        assert f.read().splitlines()[-1] == "outcomes: 7 error, 9 missing, 32 passed"


def test_make_table_writes_the_results_between_the_markers(tmp_path):
    results = {
        "modes": ["upstream", "idle", "busy"],
        "peers": {"numba-cuda": {"TestCudaStream::test_add_callback": {
            "upstream": {"outcome": "error", "message": "AttributeError: 'CUstream' object has no attribute 'value'"},
            "idle": {"outcome": "passed", "message": ""},
            "busy": {"outcome": "passed", "message": ""},
        }}},
        "versions": {"python": "3.12.3", "numba_cuda": "0.30.4"},
    }
    (tmp_path / "clients.json").write_text(json.dumps(results))
    doc = tmp_path / "clients.md"
    doc.write_text(f"# Title\n\n{make_table.BEGIN}\nold\n{make_table.END}\n\nAfter.\n")
    assert make_table.main([str(tmp_path / "clients.json"), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Title\n\n" + make_table.BEGIN + "\n| peer | test | upstream |")
    row = "| numba-cuda | `TestCudaStream::test_add_callback` | error: `AttributeError: 'CUstream' object has no "
    assert row in text
    assert "| passed | passed |" in text and "Versions: python 3.12.3, numba_cuda 0.30.4." in text
    assert "old" not in text and text.endswith(make_table.END + "\n\nAfter.\n")
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="has no"):
        make_table.main([str(tmp_path / "clients.json"), "--write", str(doc)])
