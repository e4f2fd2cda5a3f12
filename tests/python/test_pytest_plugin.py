"""The pytest plugin (cuda_reclaim.pytest_plugin, and _cuda_reclaim_pytest, its start-up part that the entry
point loads), run by pytest's own pytester in child processes whose driver is the fake libcuda: off unless
asked for; --reclaim-check (or the ini) fails a test that leaves work behind; the timeout; the marker that
allows leftovers; the `reclaim` fixture; a session fixture that holds a graph across tests; a run that never
uses cuda_reclaim imports none of it, even with a bad setting. The entry point itself is checked where the
package is installed (wheel_install_test.sh, tests/packaging/sdist_install_test.sh). The test modules and the
conftest that pytester runs are files of children/ (pytest_plugin_*.py), copied into pytester's folder."""

import os
import sys

import pytest

import fake_cuda
from conftest import CHILDREN, run_child_script

pytest_plugins = ["pytester"]


def child_text(name):
    """The text of children/`name`: a test module or conftest that a test writes into pytester's folder."""
    with open(os.path.join(CHILDREN, name)) as f:
        return f.read()


# The children's conftest: the fake driver's few controls these tests use, a payload class, no auto drain.
CHILD_CONFTEST = "pytest_plugin_conftest.py"

# The module the entry point (pyproject.toml's [project.entry-points.pytest11]) names: it imports neither
# cuda_reclaim nor its extension.
START_UP_PLUGIN = "_cuda_reclaim_pytest"

# One test that leaves a graph holding its payload.
LEAKS_A_GRAPH = "pytest_plugin_leaks_a_graph.py"


@pytest.fixture
def run(pytester, monkeypatch):
    """run(*args) runs pytest with the plugin (-p, as from a source tree) in a child whose driver is the fake;
    returns pytester's RunResult."""
    if not os.path.exists(fake_cuda.PATH):
        pytest.skip(f"fake driver not built: {fake_cuda.PATH}")
    monkeypatch.setenv("CUDA_RECLAIM_LIBCUDA", fake_cuda.PATH)
    # The plugin by -p alone: where the package is installed, its entry point would load it a second time.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("CUDA_RECLAIM_REPORT", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path for path in sys.path if path))  # as conftest's children
    pytester.makeconftest(child_text(CHILD_CONFTEST))

    def run(*args):
        return pytester.runpytest_subprocess(
            "-p", "cuda_reclaim.pytest_plugin", "-p", "no:cacheprovider", *args, timeout=fake_cuda.HANG_LIMIT
        )

    return run


def test_off_unless_asked_for_it_changes_nothing(pytester, run):
    # Left held and left pending, and the next test sees both: no flush, no failure, no header line.
    pytester.makepyfile(child_text("pytest_plugin_off_unless_asked_for.py"))
    result = run("-v")
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*cuda_reclaim: --reclaim-check*")


def test_a_test_that_leaves_nothing_behind_passes(pytester, run):
    # What CUDA hands back within the timeout and what is queued is flushed: neither is left behind.
    pytester.makepyfile(child_text("pytest_plugin_leaves_nothing_behind.py"))
    result = run("--reclaim-check", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["cuda_reclaim: --reclaim-check on, flush timeout 5 s"])


def test_a_test_that_leaves_a_graph_holding_its_payload_errors_and_says_what(pytester, run):
    pytester.makepyfile(child_text(LEAKS_A_GRAPH))
    result = run("--reclaim-check", "--reclaim-timeout=0.1")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaks*",
            "*cuda_reclaim: *::test_leaks left work behind (after a flush that waited up to 0.1 s):",
            "*held by CUDA: 1 attached during the test and not handed back*",
            "*mark the test @pytest.mark.reclaim(allow_held=True)",
        ]
    )


def test_a_host_call_left_on_a_stream_is_held_and_outstanding(pytester, run):
    pytester.makepyfile(child_text("pytest_plugin_leaves_a_host_call.py"))
    result = run("--reclaim-check", "--reclaim-timeout=0")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*held by CUDA: 1 *",
            "*outstanding: 1 host call(s) of launch_host_func() neither run nor cancelled*",
            "*@pytest.mark.reclaim(allow_held=True, allow_outstanding=True)",
        ]
    )


def test_the_ini_file_enables_the_check_and_sets_the_timeout(pytester, run):
    pytester.makeini("[pytest]\nreclaim_check = true\nreclaim_timeout = 0.1\n")
    pytester.makepyfile(child_text(LEAKS_A_GRAPH))
    result = run()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*left work behind (after a flush that waited up to 0.1 s):"])


def test_the_timeout_option_is_how_long_the_flush_waits_for_cuda(pytester, run):
    # The ini says 0.1 s; the option, which wins, leaves CUDA time to hand the payload back.
    pytester.makeini("[pytest]\nreclaim_check = true\nreclaim_timeout = 0.1\n")
    pytester.makepyfile(child_text("pytest_plugin_hands_back_after_half_a_second.py"))
    result = run("--reclaim-timeout=60")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_a_bad_timeout_is_a_usage_error_naming_the_option(pytester, run, value):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run("--reclaim-check", f"--reclaim-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--reclaim-timeout: a number of seconds >= 0 is needed, not '{value}'"])


def test_the_marker_allows_what_the_test_intends_to_leave(pytester, run):
    pytester.makepyfile(child_text("pytest_plugin_marker_allows_leftovers.py"))
    result = run("--reclaim-check", "--reclaim-timeout=0.1", "-rE")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_allowed_held_only left work behind*",
            "*outstanding: 1 host call(s)*",
            "*mark the test @pytest.mark.reclaim(allow_outstanding=True)",
            "ERROR *::test_allowed_held_only*",
        ]
    )
    result.stdout.no_fnmatch_line("*held by CUDA*")


def test_what_a_drain_on_another_thread_has_not_finished_is_pending_unless_allowed(pytester, run):
    # A release that blocks on another thread's drain: in_drain, which the check's flush cannot finish.
    pytester.makepyfile(child_text("pytest_plugin_unfinished_drain.py"))
    result = run("--reclaim-check", "--reclaim-timeout=0.1", "-rE")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        ["*pending: 1 queued or in a drain, not released*", "ERROR *::test_leaves_a_drain_unfinished*"]
    )


@pytest.mark.parametrize(
    "marker, message",
    [
        ("reclaim(True)", "takes keyword arguments only, not (True,)"),
        ("reclaim(allow_hold=True)", "unknown keyword allow_hold; it takes allow_held, allow_pending"),
        ("reclaim(allow_held=1)", "allow_held must be True or False, not 1"),
        ("reclaim(timeout=-2)", "timeout: a number of seconds >= 0 is needed, not -2"),
    ],
)
def test_a_bad_marker_is_an_error_naming_it(pytester, run, marker, message):
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.{marker}\ndef test_marked():\n    pass\n")
    result = run("--reclaim-check")
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*@pytest.mark.reclaim on *::test_marked: {message}*"])


def test_the_marker_sets_a_tests_own_timeout(pytester, run):
    pytester.makepyfile(child_text("pytest_plugin_marker_timeout.py"))
    run("--reclaim-check", "--reclaim-timeout=0").assert_outcomes(passed=1)


def test_a_bad_timeout_is_an_error_with_the_check_off_too(pytester, run):
    pytester.makeini("[pytest]\nreclaim_timeout = later\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*reclaim_timeout (ini): a number of seconds >= 0 is needed (*'later'*)"])
    pytester.makeini("[pytest]\nreclaim_timeout = -1\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*reclaim_timeout (ini): a number of seconds >= 0 is needed, not -1*"])


# Its test asserts getini("reclaim_timeout") == EXPECTED_RECLAIM_TIMEOUT (a literal), of the same type unless
# EXPECTED_RECLAIM_TIMEOUT_TYPE is "any".
READS_THE_TIMEOUT = "pytest_plugin_reads_the_timeout.py"


def test_reclaim_timeout_is_a_float_typed_ini(pytester, monkeypatch, run_start_up):
    # Registered with pytest's "float" ini type (pytest 8.4 and later): getini() gives a float.
    if pytest.version_tuple[:2] < (8, 4):
        pytest.skip("pytest before 8.4 has no float ini type: the value is a string, converted by the plugin")
    pytester.makepyfile(child_text(READS_THE_TIMEOUT))
    monkeypatch.setenv("EXPECTED_RECLAIM_TIMEOUT", "5.0")
    run_start_up("-v").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nreclaim_timeout = 0.25\n")
    monkeypatch.setenv("EXPECTED_RECLAIM_TIMEOUT", "0.25")
    run_start_up("-v").assert_outcomes(passed=1)


def test_reclaim_timeout_takes_a_toml_number(pytester, monkeypatch, run_start_up):
    # pytest 9's native TOML configuration ([tool.pytest]) checks the value's type against the registered one.
    if pytest.version_tuple[:2] < (9, 0):
        pytest.skip("native TOML configuration needs pytest 9")
    pytester.makepyprojecttoml("[tool.pytest]\nreclaim_timeout = 0.5\n")
    pytester.makepyfile(child_text(READS_THE_TIMEOUT))
    monkeypatch.setenv("EXPECTED_RECLAIM_TIMEOUT", "0.5")
    run_start_up("-v").assert_outcomes(passed=1)
    pytester.makepyprojecttoml("[tool.pytest]\nreclaim_timeout = 2\n")
    monkeypatch.setenv("EXPECTED_RECLAIM_TIMEOUT", "2")
    monkeypatch.setenv("EXPECTED_RECLAIM_TIMEOUT_TYPE", "any")
    run_start_up("-v").assert_outcomes(passed=1)


def test_a_session_fixture_holding_a_graph_fails_no_test_and_a_leak_beside_it_is_still_found(pytester, run):
    pytester.makepyfile(child_text("pytest_plugin_session_fixture_and_a_leak.py"))
    result = run("--reclaim-check", "--reclaim-timeout=0.2", "-rE")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*held by CUDA: 1 attached during the test*", "ERROR *::test_leaks_beside_them*"])


def test_the_reclaim_fixture_counts_from_the_start_of_the_test(pytester, run):
    pytester.makepyfile(child_text("pytest_plugin_fixture_counts_from_the_start.py"))
    run().assert_outcomes(passed=2)
    run("--reclaim-check").assert_outcomes(passed=2)


def test_a_law_broken_during_a_test_errors_once(pytester, run):
    # stats() made to report one reference handed over and in no bucket: the law breaks in the first test
    # and stays broken; the tests after it did not break it.
    pytester.makepyfile(child_text("pytest_plugin_breaks_a_law.py"))
    result = run("--reclaim-check", "--reclaim-timeout=0.1")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*::test_breaks_the_law broke a law of stats() (after a flush*", "*law broken: handed_over == released + pending + *"]
    )


def test_importing_the_plugin_loads_no_cuda_library():
    if not os.path.exists(fake_cuda.PATH):
        pytest.skip(f"fake driver not built: {fake_cuda.PATH}")
    result = run_child_script(
        "pytest_plugin_imports_no_cuda_library.py", env={"CUDA_RECLAIM_LIBCUDA": fake_cuda.PATH}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] []"


def installed_distribution():
    """The cuda-reclaim distribution whose package is the one imported here, or None (a source tree)."""
    import importlib.metadata

    import cuda_reclaim

    try:
        distribution = importlib.metadata.distribution("cuda-reclaim")
    except importlib.metadata.PackageNotFoundError:
        return None
    installed_init = str(distribution.locate_file("cuda_reclaim/__init__.py"))
    if os.path.isfile(installed_init) and os.path.samefile(installed_init, cuda_reclaim.__file__):
        return distribution
    return None


def test_pytest_loads_the_installed_plugin_by_its_entry_point_and_leaves_it_off(pytester, monkeypatch):
    # Where the suite runs against an installed wheel (tests/packaging): no -p, the entry point loads it.
    distribution = installed_distribution()
    if distribution is None:
        pytest.skip("cuda_reclaim runs from the source tree here: no entry point to load it")
    plugins = [(point.name, point.value) for point in distribution.entry_points if point.group == "pytest11"]
    assert sorted(plugins) == ENTRY_POINTS
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path for path in sys.path if path))
    pytester.makepyfile(child_text("pytest_plugin_queues_one.py"))
    off = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    off.assert_outcomes(passed=1)
    off.stdout.no_fnmatch_line("cuda_reclaim: --reclaim-check*")
    on = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--reclaim-check")
    on.assert_outcomes(passed=1)
    on.stdout.fnmatch_lines(["cuda_reclaim: --reclaim-check on, flush timeout 5 s"])
    # Blocked by its entry point's name, its option is gone; its marker stays (--strict-markers).
    blocked = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:cuda_reclaim", "--reclaim-check")
    assert blocked.ret == pytest.ExitCode.USAGE_ERROR
    pytester.makepyfile(child_text(MARKED))
    check_the_marker_under_no_cuda_reclaim(pytester)


def test_the_reclaim_fixture_flushes_what_the_test_attached_beside_a_session_graph(pytester, run):
    # The guide's example beside a graph that a session fixture keeps: the fixture's flush waits for what
    # was attached since the test began (by default up to the test's flush timeout, with None for ever),
    # never for the session's graph.
    pytester.makepyfile(child_text("pytest_plugin_flush_beside_a_session_graph.py"))
    run("-v").assert_outcomes(passed=1)
    run("--reclaim-check", "-v").assert_outcomes(passed=1)


def test_the_reclaim_fixtures_flush_waits_up_to_the_configured_timeout(pytester, run):
    # What the test attached and CUDA keeps: the fixture's flush gives up after the test's flush timeout
    # (--reclaim-timeout, the ini's reclaim_timeout, the marker's timeout), or an explicit one.
    pytester.makepyfile(child_text("pytest_plugin_flush_gives_up_after_the_timeout.py"))
    run("--reclaim-timeout=0.1", "-v").assert_outcomes(passed=2)
    run("--reclaim-check", "--reclaim-timeout=0.1", "-v").assert_outcomes(passed=2)
    pytester.makeini("[pytest]\nreclaim_timeout = 0.1\n")
    run("-v").assert_outcomes(passed=2)




@pytest.fixture
def run_start_up(pytester, monkeypatch):
    """run_start_up(*args) runs pytest in a child with the plugin's start-up module alone (as its entry
    point loads it), no conftest, and the fake driver; returns pytester's RunResult."""
    if not os.path.exists(fake_cuda.PATH):
        pytest.skip(f"fake driver not built: {fake_cuda.PATH}")
    monkeypatch.setenv("CUDA_RECLAIM_LIBCUDA", fake_cuda.PATH)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("CUDA_RECLAIM_REPORT", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path for path in sys.path if path))

    def run_start_up(*args):
        return pytester.runpytest_subprocess(
            "-p", START_UP_PLUGIN, "-p", "no:cacheprovider", *args, timeout=fake_cuda.HANG_LIMIT
        )

    return run_start_up


@pytest.mark.parametrize(
    "variable, value", [("CUDA_RECLAIM_REPORT", "maybe"), ("CUDA_RECLAIM_RESERVED_CAPACITY", "12k"), (None, None)]
)
def test_a_run_that_never_uses_cuda_reclaim_imports_none_of_it_even_with_a_bad_setting(
    pytester, monkeypatch, run_start_up, variable, value
):
    if variable is not None:
        monkeypatch.setenv(variable, value)
    pytester.makepyfile(child_text("pytest_plugin_never_uses_it.py"))
    result = run_start_up("-v")
    result.assert_outcomes(passed=1)
    # The options and the marker are registered all the same.
    result = run_start_up("--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["@pytest.mark.reclaim(allow_held=False, *"])
    result = run_start_up("--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--reclaim-check*", "*--reclaim-timeout=SECONDS*"])
    result = run_start_up("--reclaim-timeout=soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reclaim-timeout: a number of seconds >= 0 is needed, not 'soon'*"])


def test_with_a_bad_setting_the_check_and_the_fixture_say_so_and_other_tests_pass(
    pytester, monkeypatch, run_start_up
):
    monkeypatch.setenv("CUDA_RECLAIM_REPORT", "maybe")
    pytester.makepyfile(child_text("pytest_plugin_never_uses_it_beside_the_fixture.py"))
    result = run_start_up("-v")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ImportError: cuda_reclaim: CUDA_RECLAIM_REPORT=maybe is not understood*"])
    result = run_start_up("--reclaim-check")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--reclaim-check: cuda_reclaim cannot be imported: cuda_reclaim: CUDA_RECLAIM_REPORT=maybe is not*"]
    )
    assert "Traceback" not in result.stderr.str()


def test_the_start_up_plugin_runs_the_check_and_the_fixture(pytester, run_start_up):
    # Loaded as the entry point loads it: the check (imported at configure time) and the fixture work.
    pytester.makeconftest(child_text(CHILD_CONFTEST))
    pytester.makepyfile(child_text("pytest_plugin_start_up_check_and_fixture.py"))
    result = run_start_up("--reclaim-check", "--reclaim-timeout=0.1")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["cuda_reclaim: --reclaim-check on, flush timeout 0.1 s", "*ERROR at teardown of test_leaks*"]
    )


# The entry points pyproject.toml declares ([project.entry-points.pytest11]): the plugin, and the marker alone.
ENTRY_POINTS = [("cuda_reclaim", START_UP_PLUGIN), ("cuda_reclaim_marker", f"{START_UP_PLUGIN}:marker_plugin")]

# One test with the reclaim marker.
MARKED = "pytest_plugin_marked.py"


def test_strict_markers_accept_the_marker_also_under_no_cuda_reclaim(pytester, monkeypatch):
    # As where the package is installed: a distribution on sys.path declaring the two entry points, which
    # pytest loads by itself (no -p).
    if installed_distribution() is not None:
        pytest.skip("the installed distribution's own entry points load the plugin (the test below checks them)")
    site = pytester.mkdir("site")
    dist_info = site / "cuda_reclaim_entry_points-0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: cuda-reclaim-entry-points\nVersion: 0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in ENTRY_POINTS)
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("CUDA_RECLAIM_LIBCUDA", fake_cuda.PATH)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *(path for path in sys.path if path)]))
    pytester.makepyfile(child_text(MARKED))
    check_the_marker_under_no_cuda_reclaim(pytester)


def check_the_marker_under_no_cuda_reclaim(pytester):
    """Runs pytest (entry points loaded by pytest) on MARKED, with and without -p no:cuda_reclaim."""

    def run(*args):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", *args)

    run().assert_outcomes(passed=1)
    markers = run("--markers")
    assert markers.ret == 0
    markers.stdout.fnmatch_lines(["@pytest.mark.reclaim(allow_held=False, *"])
    assert sum(line.startswith("@pytest.mark.reclaim(") for line in markers.stdout.lines) == 1  # registered once
    # The plugin blocked: its option is gone, its marker stays.
    run("-p", "no:cuda_reclaim").assert_outcomes(passed=1)
    assert run("-p", "no:cuda_reclaim", "--reclaim-check").ret == pytest.ExitCode.USAGE_ERROR
    # Both blocked: the marker is unknown, as for any plugin that is not loaded.
    blocked = run("-p", "no:cuda_reclaim", "-p", "no:cuda_reclaim_marker")
    assert blocked.ret != pytest.ExitCode.OK
    blocked.stdout.fnmatch_lines(["*'reclaim' not found in `markers` configuration option*"])
