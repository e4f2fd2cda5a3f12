"""A pytest plugin: fail a test that leaves cuda_reclaim work behind. Off unless asked for.

Installed with the package (entry point ``cuda_reclaim`` in the ``pytest11`` group), so pytest loads it by
itself; from a source tree, pass ``-p cuda_reclaim.pytest_plugin``. Loaded and not enabled, it changes
nothing: no flush, no failure, no stats read. Importing it imports ``cuda_reclaim`` (no CUDA library: the
driver is loaded only when something is attached).

- ``pytest --reclaim-check`` (or ``reclaim_check = true`` in the ini file) enables the check: after each
  test, its function-scoped fixtures torn down, :func:`cuda_reclaim.flush` waits (``--reclaim-timeout``, ini
  ``reclaim_timeout``, default 5 s) for CUDA to hand back what the test attached and drains the queue. The
  test then errors at teardown if, counted as a delta over the test, something is still held by CUDA,
  pending (queued or in a drain) or outstanding (a ``launch_host_func()`` call neither run nor cancelled),
  or if a law of :func:`cuda_reclaim.stats` that held when the test began no longer holds. Fixtures of a
  wider scope are set up before the test's first reading, so a session fixture holding a graph fails no
  test.
- ``@pytest.mark.reclaim(allow_held=True, allow_pending=True, allow_outstanding=True, timeout=SECONDS)``
  allows a test's intended leftovers (each flag allows its own kind; a held host call is outstanding too)
  and sets its own flush timeout (``None``: for ever).
- The ``reclaim`` fixture (:class:`Reclaim`): ``flush()``, ``stats()`` and ``delta()``, the counters' change
  since the test began.
"""

import math as _math
import time as _time

import pytest

__all__ = ["DEFAULT_TIMEOUT", "Reclaim", "reclaim"]

#: Seconds the check's flush waits for CUDA to hand back what a test attached, unless configured.
DEFAULT_TIMEOUT = 5.0

# The marker's keywords: the leftovers it may allow, and its flush timeout.
_ALLOWANCES = ("allow_held", "allow_pending", "allow_outstanding")
_MARKER = "reclaim"
_BASELINE = pytest.StashKey()  # item -> stats() when the test began (set by the check, read by the fixture)

# What each source counter of stats() hands over, in words, for the failure message.
_KINDS = {
    "graph_user_objects": "graph user object (keep_alive, or a host node's function)",
    "stream_host_functions": "stream host function (keep_alive_until)",
    "host_calls": "host call (launch_host_func)",
    "host_node_calls": "host-node call (add_host_node)",
    "direct_pushes": "direct hand-over (defer_release, the C API)",
}


def _seconds(value, where):
    """`value` (an option, ini or marker value) as seconds >= 0; UsageError naming `where` otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = _math.nan
    if isinstance(value, bool) or not 0 <= seconds < _math.inf:
        raise pytest.UsageError(f"{where}: a number of seconds >= 0 is needed, not {value!r}")
    return seconds


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
        help=f"how long the check's flush waits for CUDA (ini: reclaim_timeout; default {DEFAULT_TIMEOUT:g})",
    )
    parser.addini("reclaim_check", help="default value for --reclaim-check", type="bool", default=False)
    parser.addini("reclaim_timeout", help="default value for --reclaim-timeout", default=str(DEFAULT_TIMEOUT))


def _enabled(config):
    value = config.getoption("reclaim_check")
    return config.getini("reclaim_check") if value is None else value


def _timeout(config):
    value = config.getoption("reclaim_timeout")
    if value is not None:
        return _seconds(value, "--reclaim-timeout")
    return _seconds(config.getini("reclaim_timeout"), "reclaim_timeout (ini)")


def pytest_configure(config):
    """pytest calls it: registers the ``reclaim`` marker, and the check where it is enabled."""
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(allow_held=False, allow_pending=False, allow_outstanding=False, timeout=None): "
        "with --reclaim-check, allow this test's leftovers of each kind, and set its flush timeout",
    )
    timeout = _timeout(config)  # a bad value is an error even with the check off
    if _enabled(config):
        config.pluginmanager.register(_Check(timeout), "cuda_reclaim-check")


def pytest_report_header(config):
    """pytest calls it: one header line while the check is enabled, none otherwise."""
    check = config.pluginmanager.get_plugin("cuda_reclaim-check")
    if check is not None:
        return f"cuda_reclaim: --reclaim-check on, flush timeout {check.timeout:g} s"
    return None


def _marker_settings(item, timeout):
    """(allowed kinds, timeout) for `item`, from its closest ``reclaim`` marker; UsageError on bad ones."""
    marker = item.get_closest_marker(_MARKER)
    if marker is None:
        return frozenset(), timeout
    where = f"@pytest.mark.{_MARKER} on {item.nodeid}"
    if marker.args:
        raise pytest.UsageError(f"{where}: takes keyword arguments only, not {marker.args!r}")
    unknown = sorted(set(marker.kwargs) - {*_ALLOWANCES, "timeout"})
    if unknown:
        known = ", ".join((*_ALLOWANCES, "timeout"))
        raise pytest.UsageError(f"{where}: unknown keyword {', '.join(unknown)}; it takes {known}")
    allowed = set()
    for name in _ALLOWANCES:
        value = marker.kwargs.get(name, False)
        if not isinstance(value, bool):
            raise pytest.UsageError(f"{where}: {name} must be True or False, not {value!r}")
        if value:
            allowed.add(name[len("allow_") :])
    if "timeout" in marker.kwargs:
        value = marker.kwargs["timeout"]
        timeout = None if value is None else _seconds(value, f"{where}: timeout")
    return frozenset(allowed), timeout


def _left(before, after, allowed):
    """What the test left, as {kind: count} over the kinds not allowed (held, pending, outstanding)."""
    left = {
        "held": after["held_by_cuda"] - before["held_by_cuda"],
        "pending": after["pending"] + after["in_drain"] - before["pending"] - before["in_drain"],
        "outstanding": after["calls_outstanding"] - before["calls_outstanding"],
    }
    return {kind: count for kind, count in left.items() if count > 0 and kind not in allowed}


def _laws(counters):
    """The names of the laws of stats() that `counters` breaks."""
    import cuda_reclaim

    broken = []
    if not cuda_reclaim.conserved(counters):
        broken.append("handed_over == " + " + ".join(cuda_reclaim.CONSERVATION_BUCKETS))
    if counters["attached_to_cuda"] != counters["handed_back_by_cuda"] + counters["held_by_cuda"]:
        broken.append("attached_to_cuda == handed_back_by_cuda + held_by_cuda")
    return broken


def _settle(before, mark, allowed, timeout):
    """Flush what the test attached (after `mark`), waiting up to `timeout` seconds (None: for ever) for CUDA
    to hand it back; returns (stats after, what is left, broken laws)."""
    import cuda_reclaim

    deadline = None if timeout is None else _time.monotonic() + timeout
    # The barrier wakes the flush when the test's own attachments are back: a fixture of a wider scope that
    # holds a graph is not waited for, and nothing polls.
    cuda_reclaim.flush(0 if "held" in allowed else timeout, since=mark)
    pause = 0.001
    while True:
        after = cuda_reclaim.stats()
        left = _left(before, after, allowed)
        # A law holds whenever nothing is in flight: read again while another thread is mid-hand-over.
        broken = [law for law in _laws(after) if law not in _laws(before)]
        remaining = None if deadline is None else max(0.0, deadline - _time.monotonic())
        if (not left and not broken) or "held" in left or remaining == 0:
            return after, left, broken
        # Only what a drain on another thread (the automatic one) has in hand, or a count read mid-update:
        # that drain finishes it in a moment; there is no signal for it, so look again shortly.
        _time.sleep(pause if remaining is None else min(pause, remaining))
        pause = min(pause * 2, 0.1)
        cuda_reclaim.drain()


def _describe(nodeid, before, after, left, broken, timeout):
    """The failure message: the counts left, the kinds handed over during the test, the laws broken."""
    shown = "for ever" if timeout is None else f"{timeout:g} s"
    what = "left work behind" if left else "broke a law of stats()"
    lines = [f"cuda_reclaim: {nodeid} {what} (after a flush that waited up to {shown}):"]
    if "held" in left:
        lines.append(
            f"  held by CUDA: {left['held']} attached during the test and not handed back "
            "(a graph or exec not destroyed, a stream not past the point)"
        )
    if "pending" in left:
        lines.append(f"  pending: {left['pending']} queued or in a drain, not released")
    if "outstanding" in left:
        calls = left["outstanding"]
        lines.append(f"  outstanding: {calls} host call(s) of launch_host_func() neither run nor cancelled")
    handed = [
        f"{after[key] - before[key]} {words}" for key, words in _KINDS.items() if after[key] - before[key] > 0
    ]
    if handed:
        lines.append("  handed over during the test, by kind: " + "; ".join(handed))
    for law in broken:
        lines.append(f"  law broken: {law}")
    if left:
        flags = ", ".join(f"allow_{kind}=True" for kind in left)
        lines.append(f"  intended? mark the test @pytest.mark.{_MARKER}({flags})")
    return "\n".join(lines)


class _Check:
    """The check, registered by pytest_configure only where it is enabled."""

    def __init__(self, timeout):
        self.timeout = timeout

    @pytest.fixture(autouse=True)
    def _reclaim_check(self, request):
        # Function scope, autouse: set up after every fixture of a wider scope, torn down after the test's
        # other function-scoped fixtures (pytest's order), so the delta covers the test and its own fixtures.
        import cuda_reclaim

        try:
            allowed, timeout = _marker_settings(request.node, self.timeout)
        except pytest.UsageError as error:
            pytest.fail(str(error), pytrace=False)
        mark = cuda_reclaim.hand_back_mark()  # what the test attaches counts from here
        before = cuda_reclaim.stats()
        request.node.stash[_BASELINE] = before
        yield
        after, left, broken = _settle(before, mark, allowed, timeout)
        if left or broken:
            pytest.fail(_describe(request.node.nodeid, before, after, left, broken, timeout), pytrace=False)


class Reclaim:
    """What the ``reclaim`` fixture gives a test: the counters since the test began, and a flush."""

    def __init__(self, baseline):
        self._baseline = dict(baseline)

    @property
    def baseline(self):
        """The :func:`cuda_reclaim.stats` dict read when the test began (a copy)."""
        return dict(self._baseline)

    def flush(self, timeout=None):
        """Any thread: :func:`cuda_reclaim.flush` (wait up to ``timeout`` seconds, ``None`` for ever, for CUDA
        to hand back what was attached, then drain); returns how many it released or ran."""
        import cuda_reclaim

        return cuda_reclaim.flush(timeout)

    def stats(self):
        """Any thread: :func:`cuda_reclaim.stats`, the counters now."""
        import cuda_reclaim

        return cuda_reclaim.stats()

    def delta(self):
        """Any thread: each counter of :func:`cuda_reclaim.stats` now minus its value when the test began
        (gauges such as ``pending`` and ``held_by_cuda`` may go negative)."""
        now = self.stats()
        return {key: value - self._baseline.get(key, 0) for key, value in now.items()}


@pytest.fixture
def reclaim(request):
    """A test requests it: a :class:`Reclaim` whose ``delta()`` counts from the test's start (with
    ``--reclaim-check``: the check's reading, before the test's function-scoped fixtures; otherwise: this
    fixture's setup). Enabling nothing, it works with the check off."""
    baseline = request.node.stash.get(_BASELINE, None)
    if baseline is None:
        import cuda_reclaim

        baseline = cuda_reclaim.stats()
    return Reclaim(baseline)
