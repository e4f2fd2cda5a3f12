"""python -m cuda_reclaim info: the report's sections, with the fake driver and with none, read only."""

import json
import os
import subprocess
import sys
import threading

import cuda_reclaim
from cuda_reclaim import _info

import fake_cuda

SECTIONS = ["cuda_reclaim", "python", "platform", "auto_drain", "environment", "driver", "libraries", "stats"]


def run_info(*args, libcuda):
    env = dict(os.environ, CUDA_RECLAIM_LIBCUDA=libcuda, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "cuda_reclaim", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_info_json_with_fake_driver():
    result = run_info("info", "--json", libcuda=fake_cuda.PATH)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert list(report) == SECTIONS
    assert report["cuda_reclaim"]["abi_version"] == cuda_reclaim.ABI_VERSION
    assert report["cuda_reclaim"]["version"] == cuda_reclaim.__version__
    assert report["cuda_reclaim"]["build"]
    assert report["python"]["version"] == sys.version
    assert report["auto_drain"] == {"mode": cuda_reclaim.get_auto_drain()}
    assert report["environment"]["CUDA_RECLAIM_LIBCUDA"] == fake_cuda.PATH
    assert report["driver"]["status"] == "ok"
    assert report["driver"]["library"] == fake_cuda.PATH
    assert set(report["libraries"]) == set(_info._OTHER_DISTRIBUTIONS)
    assert list(report["stats"]) == list(cuda_reclaim.STATS_DOCS)
    assert all(isinstance(value, int) for value in report["stats"].values())


def test_info_json_without_driver():
    result = run_info("info", "--json", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 0, result.stderr
    driver = json.loads(result.stdout)["driver"]
    assert driver["status"] == "library_missing"
    assert driver["library"] == "/nonexistent/libcuda.so.1"


def test_info_text_has_every_section():
    result = run_info("info", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 0, result.stderr
    headings = [line[:-1] for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert headings == SECTIONS
    assert f"  abi_version: {cuda_reclaim.ABI_VERSION}" in result.stdout.splitlines()


def test_no_or_unknown_command_prints_usage():
    for args in ([], ["nonsense"]):
        result = run_info(*args, libcuda="/nonexistent/libcuda.so.1")
        assert result.returncode == 2
        assert result.stderr.startswith("usage: python -m cuda_reclaim")
        assert result.stdout == ""


def test_collect_is_read_only():
    before = cuda_reclaim.stats()
    mode = cuda_reclaim.get_auto_drain()
    drain_threads = [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]
    report = _info.collect()
    assert [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"] == drain_threads
    assert cuda_reclaim.stats() == before
    assert cuda_reclaim.get_auto_drain() == mode
    assert report["stats"] == before
    assert not any("error" in section for section in report.values() if isinstance(section, dict))


def test_failing_section_is_reported(monkeypatch):
    def broken():
        raise RuntimeError("no counters")

    monkeypatch.setattr(_info, "_SECTIONS", (("stats", broken), ("python", _info._python)))
    report = _info.collect()
    assert report["stats"] == {"error": "RuntimeError: no counters"}
    assert report["python"]["version"] == sys.version
