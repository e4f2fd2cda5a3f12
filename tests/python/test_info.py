"""python -m cuda_reclaim info: the report's sections, with the fake driver and with none, read only."""

import io
import json
import os
import subprocess
import sys
import threading

import pytest

import cuda_reclaim
from cuda_reclaim import _info

import fake_cuda

SECTIONS = [
    "cuda_reclaim", "python", "platform", "auto_drain", "environment", "settings", "driver", "libraries", "stats"
]


def run_info(*args, libcuda, python_options=(), module="cuda_reclaim", **fake_env):
    env = dict(os.environ, CUDA_RECLAIM_LIBCUDA=libcuda, PYTHONPATH=os.pathsep.join(sys.path), **fake_env)
    command = [sys.executable, *python_options, "-m", module, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


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
    assert report["driver"]["version"] == "13.0"
    assert report["driver"]["library"] == fake_cuda.PATH
    assert report["driver"]["devices"] == [
        {"ordinal": 0, "name": "Fake CUDA Device 0", "compute_capability": "9.0", "total_memory": 80 << 30}
    ]
    assert report["driver"]["devices_error"] is None
    assert set(report["libraries"]) == set(_info._OTHER_DISTRIBUTIONS)
    assert list(report["stats"]) == list(cuda_reclaim.COUNTERS)
    assert all(isinstance(value, int) for value in report["stats"].values())


def test_info_json_without_driver():
    result = run_info("info", "--json", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 0, result.stderr
    driver = json.loads(result.stdout)["driver"]
    assert driver["status"] == "library_missing"
    assert driver["library"] == "/nonexistent/libcuda.so.1"
    assert driver["devices"] == []
    assert driver["devices_error"] == "no CUDA driver library could be loaded"


def test_info_text_has_every_section():
    result = run_info("info", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 0, result.stderr
    headings = [line[:-1] for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert headings == SECTIONS
    assert f"  abi_version: {cuda_reclaim.ABI_VERSION}" in result.stdout.splitlines()


def test_an_unknown_command_prints_usage():
    result = run_info("nonsense", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: python -m cuda_reclaim")
    assert result.stdout == ""


def test_without_a_command_it_prints_the_report_as_info_does():
    plain = run_info(libcuda=fake_cuda.PATH)
    assert plain.returncode == 0, plain.stderr
    headings = [line[:-1] for line in plain.stdout.splitlines() if line and not line.startswith(" ")]
    assert headings == SECTIONS
    assert "  version: 13.0" in section_lines(plain.stdout, "driver")
    as_json = run_info("--json", libcuda=fake_cuda.PATH)
    assert as_json.returncode == 0, as_json.stderr
    assert list(json.loads(as_json.stdout)) == SECTIONS
    # `info` stays, before or after --json.
    for args in (["info", "--json"], ["--json", "info"]):
        result = run_info(*args, libcuda=fake_cuda.PATH)
        assert result.returncode == 0, result.stderr
        assert list(json.loads(result.stdout)) == SECTIONS


def test_version_prints_the_package_version():
    result = run_info("--version", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"cuda_reclaim {cuda_reclaim.__version__}\n"


@pytest.mark.parametrize("number, shown", [("13000", "13.0"), ("12080", "12.8"), ("11030", "11.3")])
def test_the_driver_version_prints_as_major_dot_minor(number, shown):
    result = run_info(libcuda=fake_cuda.PATH, FAKE_CUDA_VERSION=number)
    assert result.returncode == 0, result.stderr
    assert f"  version: {shown}" in section_lines(result.stdout, "driver")
    result = run_info("--json", libcuda=fake_cuda.PATH, FAKE_CUDA_VERSION=number)
    assert json.loads(result.stdout)["driver"]["version"] == shown
    # A library that is no driver at all reports no version.
    result = run_info("--json", libcuda="/nonexistent/libcuda.so.1")
    assert json.loads(result.stdout)["driver"]["version"] == "unknown"


def test_show_config_prints_the_same_report():
    assert "show_config" in cuda_reclaim.__all__
    written = io.StringIO()
    assert cuda_reclaim.show_config(written) is None
    headings = [line[:-1] for line in written.getvalue().splitlines() if line and not line.startswith(" ")]
    assert headings == SECTIONS
    # To stdout by default, in a program as from the command line.
    result = subprocess.run(
        [sys.executable, "-c", "import cuda_reclaim; cuda_reclaim.show_config()"],
        env=dict(os.environ, CUDA_RECLAIM_LIBCUDA=fake_cuda.PATH, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    command = run_info(libcuda=fake_cuda.PATH)
    assert driver_lines(result.stdout) == driver_lines(command.stdout)
    assert section_lines(result.stdout, "settings") == ["  all understood"]


def test_a_library_path_that_is_not_utf8_is_shown_escaped():
    # os.environ holds the byte 0xff as a surrogate; the report shows it as \xff, in text and in JSON.
    library = "/nonexistent/\udcff/libcuda.so.1"
    result = run_info(libcuda=library)
    assert result.returncode == 0, result.stderr
    assert "  library: /nonexistent/\\xff/libcuda.so.1" in section_lines(result.stdout, "driver")
    assert "  CUDA_RECLAIM_LIBCUDA: /nonexistent/\\xff/libcuda.so.1" in section_lines(result.stdout, "environment")
    driver = json.loads(run_info("--json", libcuda=library).stdout)["driver"]
    assert driver["status"] == "library_missing"
    assert driver["library"] == "/nonexistent/\\xff/libcuda.so.1"
    assert "/nonexistent/\\xff/libcuda.so.1 could not be loaded" in driver["message"]


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


def driver_lines(stdout):
    """The lines of the text report's driver section, without its heading."""
    lines = stdout.splitlines()
    start = lines.index("driver:") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end]


def test_info_text_lists_each_device():
    result = run_info("info", libcuda=fake_cuda.PATH, FAKE_CUDA_DEVICE_COUNT="2")
    assert result.returncode == 0, result.stderr
    lines = driver_lines(result.stdout)
    start = lines.index("  devices: 2")
    assert lines[start + 1 : start + 3] == [
        "    0: Fake CUDA Device 0 (compute capability 9.0, 80.0 GiB)",
        "    1: Fake CUDA Device 1 (compute capability 9.0, 80.0 GiB)",
    ]
    assert not any("devices_error" in line for line in lines)


def test_info_without_device_says_why_and_exits_0():
    # What a machine with a driver and no GPU gives: cuInit fails with CUDA_ERROR_NO_DEVICE.
    result = run_info("info", libcuda=fake_cuda.PATH, FAKE_CUDA_INIT_ERROR="100")
    assert result.returncode == 0, result.stderr
    assert "  devices: none (cuInit failed: CUDA_ERROR_NO_DEVICE)" in driver_lines(result.stdout)
    result = run_info("info", "--json", libcuda=fake_cuda.PATH, FAKE_CUDA_INIT_ERROR="100")
    assert result.returncode == 0, result.stderr
    driver = json.loads(result.stdout)["driver"]
    assert driver["status"] == "init_failed"
    assert driver["devices"] == []
    assert driver["devices_error"] == "cuInit failed: CUDA_ERROR_NO_DEVICE"


def test_info_with_no_driver_an_old_one_or_no_device_entry_point_exits_0():
    result = run_info("info", libcuda="/nonexistent/libcuda.so.1")
    assert result.returncode == 0, result.stderr
    assert "  devices: none (no CUDA driver library could be loaded)" in driver_lines(result.stdout)
    # A driver that works for keep-alive but cannot name its devices: the report says which call is missing.
    result = run_info("info", "--json", libcuda=fake_cuda.PATH, FAKE_CUDA_HIDE="cuDeviceGetName")
    assert result.returncode == 0, result.stderr
    driver = json.loads(result.stdout)["driver"]
    assert driver["status"] == "ok"
    assert driver["devices_error"] == "the CUDA driver does not provide cuDeviceGetName"
    # A driver older than 11.3 is not asked at all.
    result = run_info("info", "--json", libcuda=fake_cuda.PATH, FAKE_CUDA_VERSION="11020")
    assert result.returncode == 0, result.stderr
    driver = json.loads(result.stdout)["driver"]
    assert driver["status"] == "driver_too_old"
    assert driver["devices"] == []
    assert driver["devices_error"] == "the CUDA driver cannot be asked: it is too old or not a CUDA driver"


def test_info_with_zero_devices_or_a_failing_device_call():
    result = run_info("info", libcuda=fake_cuda.PATH, FAKE_CUDA_DEVICE_COUNT="0")
    assert result.returncode == 0, result.stderr
    assert "  devices: none" in driver_lines(result.stdout)
    result = run_info("info", "--json", libcuda=fake_cuda.PATH, FAKE_CUDA_DEVICE_ERROR="101")
    assert result.returncode == 0, result.stderr
    driver = json.loads(result.stdout)["driver"]
    assert driver["devices"] == []
    assert driver["devices_error"] == "cuDeviceGetName failed for device 0: CUDA_ERROR_INVALID_DEVICE"


def test_driver_devices_in_a_child_with_the_fake():
    result = fake_cuda.run_script(
        "info_scenarios.py", "driver_devices_lists_the_fakes_three_devices", FAKE_CUDA_DEVICE_COUNT="3"
    )
    assert "devices ok" in result.stdout


def test_driver_devices_raises_driver_error_when_cuinit_fails():
    result = fake_cuda.run_script("info_scenarios.py", "driver_devices_raises_driver_error", FAKE_CUDA_INIT_ERROR="100")
    assert "raised: cuInit failed: CUDA_ERROR_NO_DEVICE" in result.stdout


def section_lines(stdout, heading):
    """The lines of the text report's section `heading`, without the heading."""
    lines = stdout.splitlines()
    start = lines.index(f"{heading}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


REPORT_ACCEPTED = "1, true, yes or on (write the exit report); unset, empty, 0, false, no or off (do not)"
CAPACITY_ACCEPTED = "an integer from 1 to 16777216 (pointers reserved up front)"


def not_understood(value, accepted):
    return f"{value!r} is not understood (import cuda_reclaim fails with ImportError): expected {accepted}"


@pytest.mark.parametrize(
    "variable, value, accepted",
    [
        ("CUDA_RECLAIM_REPORT", "maybe", REPORT_ACCEPTED),
        ("CUDA_RECLAIM_RESERVED_CAPACITY", "12k", CAPACITY_ACCEPTED),
    ],
)
def test_info_reports_a_bad_setting_as_a_line_of_its_report(variable, value, accepted):
    result = run_info("info", libcuda="/nonexistent/libcuda.so.1", **{variable: value})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert section_lines(result.stdout, "settings") == [f"  {variable}: {not_understood(value, accepted)}"]
    # Every other section is there, read with the setting's default in its place.
    headings = [line[:-1] for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert headings == SECTIONS
    assert f"  abi_version: {cuda_reclaim.ABI_VERSION}" in result.stdout.splitlines()
    # A program still gets an error that names the variable, its value and what is accepted.
    program = subprocess.run(
        [sys.executable, "-c", "import cuda_reclaim"],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **{variable: value}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert program.returncode == 1
    assert f"ImportError: cuda_reclaim: {variable}={value} is not understood: expected {accepted}" in program.stderr


def test_info_json_reports_every_bad_setting_however_the_module_is_named():
    bad = {"CUDA_RECLAIM_REPORT": "maybe", "CUDA_RECLAIM_RESERVED_CAPACITY": "0"}
    for options, module in [((), "cuda_reclaim.__main__"), (("-X", "utf8"), "cuda_reclaim")]:
        result = run_info("info", "--json", libcuda=fake_cuda.PATH, python_options=options, module=module, **bad)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        report = json.loads(result.stdout)
        assert report["settings"] == {
            "CUDA_RECLAIM_RESERVED_CAPACITY": not_understood("0", CAPACITY_ACCEPTED),
            "CUDA_RECLAIM_REPORT": not_understood("maybe", REPORT_ACCEPTED),
        }
        assert report["driver"]["status"] == "ok"
        assert list(report["stats"]) == list(cuda_reclaim.COUNTERS)


def test_info_says_every_setting_is_understood():
    result = run_info("info", libcuda="/nonexistent/libcuda.so.1", CUDA_RECLAIM_REPORT="off")
    assert result.returncode == 0, result.stderr
    assert section_lines(result.stdout, "settings") == ["  all understood"]
    assert _info.collect()["settings"] == {}
