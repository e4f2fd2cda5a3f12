"""The part of cuda_reclaim's pytest plugin that pytest loads at every start (entry point ``cuda_reclaim``
in the ``pytest11`` group): the options, the ini names, the ``reclaim`` marker and fixture, the header line.
A second entry point, ``cuda_reclaim_marker`` (:data:`marker_plugin`), registers the marker alone, so that
``--strict-markers`` accepts a marked test also under ``-p no:cuda_reclaim`` (``-p no:cuda_reclaim_marker``
removes the marker too).

A module of its own, outside the package: importing it imports neither ``cuda_reclaim`` nor its extension,
so a pytest run that neither enables the check nor requests the fixture never imports the library (a bad
``CUDA_RECLAIM_*`` setting, which makes ``import cuda_reclaim`` fail, then breaks no run). The check and the
fixture live in :mod:`cuda_reclaim.pytest_plugin`, imported when the check is enabled (at configure time) or
when a test requests the fixture; see that module for what they do.
"""

import math as _math

import pytest

__all__ = ["DEFAULT_TIMEOUT", "reclaim"]

#: Seconds the check's flush (and the fixture's, unless given a timeout) waits for CUDA to hand back what a
#: test attached, unless configured.
DEFAULT_TIMEOUT = 5.0

MARKER = "reclaim"
MARKER_LINE = (
    f"{MARKER}(allow_held=False, allow_pending=False, allow_outstanding=False, timeout=None): with "
    "--reclaim-check, allow this test's leftovers of each kind; and set its flush timeout (the check's, and the "
    "reclaim fixture's)"
)
# pytest 8.4 added the "float" ini type; before it, the value is read as a string and converted here.
_FLOAT_INI = tuple(getattr(pytest, "version_tuple", (0, 0))[:2]) >= (8, 4)
#: item -> (stats() when the test began, hand_back_mark() then); set by the check, read by the fixture.
BASELINE = pytest.StashKey()
#: config -> the configured flush timeout in seconds (--reclaim-timeout, else the ini's reclaim_timeout).
TIMEOUT = pytest.StashKey()
# The name the check is registered under while it is enabled.
CHECK_NAME = "cuda_reclaim-check"


def seconds(value, where):
    """`value` (an option, ini or marker value) as seconds >= 0; UsageError naming `where` otherwise."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = _math.nan
    if isinstance(value, bool) or not 0 <= number < _math.inf:
        raise pytest.UsageError(f"{where}: a number of seconds >= 0 is needed, not {value!r}")
    return number


def pytest_addoption(parser):
    """pytest calls it: adds ``--reclaim-check`` and ``--reclaim-timeout`` and their ini names."""
    group = parser.getgroup("reclaim", "cuda_reclaim: work left behind by a test")
    group.addoption(
        "--reclaim-check",
        dest="reclaim_check",
        action="store_true",
        default=None,
        help="after each test, flush cuda_reclaim and fail the test if it left anything held by CUDA, "
        "pending or outstanding (ini: reclaim_check)",
    )
    group.addoption(
        "--reclaim-timeout",
        dest="reclaim_timeout",
        default=None,
        metavar="SECONDS",
        help="how long the check's flush, and the reclaim fixture's, waits for CUDA (ini: reclaim_timeout; "
        f"default {DEFAULT_TIMEOUT:g})",
    )
    parser.addini("reclaim_check", help="default value for --reclaim-check", type="bool", default=False)
    parser.addini(
        "reclaim_timeout",
        help="default value for --reclaim-timeout (seconds)",
        type="float" if _FLOAT_INI else "string",
        default=DEFAULT_TIMEOUT if _FLOAT_INI else str(DEFAULT_TIMEOUT),
    )


def _enabled(config):
    value = config.getoption("reclaim_check")
    return config.getini("reclaim_check") if value is None else value


def _timeout(config):
    value = config.getoption("reclaim_timeout")
    if value is not None:
        return seconds(value, "--reclaim-timeout")
    try:
        value = config.getini("reclaim_timeout")
    except (pytest.UsageError, TypeError, ValueError) as error:  # pytest's conversion to float refused it
        raise pytest.UsageError(f"reclaim_timeout (ini): a number of seconds >= 0 is needed ({error})") from None
    return seconds(value, "reclaim_timeout (ini)")


def register_marker(config):
    """Registers the ``reclaim`` marker with `config`, unless a line for it is there already."""
    for line in config.getini("markers"):
        if line.split(":", 1)[0].split("(", 1)[0].strip() == MARKER:
            return
    config.addinivalue_line("markers", MARKER_LINE)


class _MarkerPlugin:
    """The plugin of the ``cuda_reclaim_marker`` entry point: the ``reclaim`` marker alone."""

    def pytest_configure(self, config):
        register_marker(config)


#: What the ``cuda_reclaim_marker`` entry point (``_cuda_reclaim_pytest:marker_plugin``) loads.
marker_plugin = _MarkerPlugin()


def pytest_configure(config):
    """pytest calls it: registers the ``reclaim`` marker, and the check where it is enabled (importing
    :mod:`cuda_reclaim.pytest_plugin`, and with it the library, only then)."""
    register_marker(config)
    timeout = _timeout(config)  # a bad value is an error even with the check off
    config.stash[TIMEOUT] = timeout
    if _enabled(config):
        try:
            from cuda_reclaim import pytest_plugin
        except ImportError as error:  # a bad CUDA_RECLAIM_* setting, above all: said without a traceback
            raise pytest.UsageError(f"--reclaim-check: cuda_reclaim cannot be imported: {error}") from error
        config.pluginmanager.register(pytest_plugin.Check(timeout), CHECK_NAME)


def pytest_report_header(config):
    """pytest calls it: one header line while the check is enabled, none otherwise."""
    check = config.pluginmanager.get_plugin(CHECK_NAME)
    if check is not None:
        return f"cuda_reclaim: --reclaim-check on, flush timeout {check.timeout:g} s"
    return None


@pytest.fixture
def reclaim(request):
    """A test requests it: a :class:`cuda_reclaim.pytest_plugin.Reclaim` whose ``delta()`` counts from the
    test's start and whose ``flush()`` waits for what was attached since then, up to the test's flush timeout
    (with ``--reclaim-check``: the check's reading, before the test's function-scoped fixtures; otherwise:
    this fixture's setup). Enabling nothing, it works with the check off."""
    from cuda_reclaim import pytest_plugin

    return pytest_plugin.fixture_value(request)
