"""A pytest plugin: fail a test that leaves cuda_reclaim work behind. Off unless asked for.

Installed with the package: its entry point (``cuda_reclaim`` in the ``pytest11`` group) loads the start-up
part, the module ``_cuda_reclaim_pytest`` (options, ini names, marker, fixture), which imports neither
``cuda_reclaim`` nor its extension: this module, and with it the library, is imported only when the check is
enabled or a test requests the ``reclaim`` fixture. From a source tree, pass ``-p cuda_reclaim.pytest_plugin``
(this module, with the same hooks; it imports the package). Loaded and not enabled, the plugin changes
nothing: no flush, no failure, no stats read. No CUDA library is loaded until something is attached.
``-p no:cuda_reclaim`` blocks it; the ``reclaim`` marker stays registered (a second entry point,
``cuda_reclaim_marker``, registers it alone), so that ``--strict-markers`` still accepts a marked test.

- ``pytest --reclaim-check`` (or ``reclaim_check = true`` in the ini file) enables the check: after each
  test, its function-scoped fixtures torn down, :func:`cuda_reclaim.flush` waits (``--reclaim-timeout``, ini
  ``reclaim_timeout``, a float, default 5 s) for CUDA to hand back what the test attached and drains the queue. The
  test then errors at teardown if, counted as a delta over the test, something is still held by CUDA,
  pending (queued or in a drain) or outstanding (a ``launch_host_func()`` call neither run nor cancelled),
  or if a law of :func:`cuda_reclaim.stats` that held when the test began no longer holds. Fixtures of a
  wider scope are set up before the test's first reading, so a session fixture holding a graph fails no
  test.
- ``@pytest.mark.reclaim(allow_held=True, allow_pending=True, allow_outstanding=True, timeout=SECONDS)``
  allows a test's intended leftovers (each flag allows its own kind; a held host call is outstanding too)
  and sets the test's own flush timeout (``None``: for ever), the check's and the fixture's.
- The ``reclaim`` fixture (:class:`Reclaim`): ``flush()`` (of what was attached since the test began, up to
  the test's flush timeout), ``stats()`` and ``delta()``, the counters' change since the test began.
"""

import time as _time

import pytest

from _cuda_reclaim_pytest import BASELINE as _BASELINE
from _cuda_reclaim_pytest import DEFAULT_TIMEOUT
from _cuda_reclaim_pytest import MARKER as _MARKER
from _cuda_reclaim_pytest import TIMEOUT as _TIMEOUT
from _cuda_reclaim_pytest import pytest_addoption, pytest_configure, pytest_report_header, reclaim
from _cuda_reclaim_pytest import seconds as _seconds

__all__ = ["DEFAULT_TIMEOUT", "Reclaim", "reclaim"]

# The start-up hooks, for pytest where this module is the plugin (-p cuda_reclaim.pytest_plugin).
_HOOKS = (pytest_addoption, pytest_configure, pytest_report_header)

# The marker's keywords: the leftovers it may allow, and its flush timeout.
_ALLOWANCES = ("allow_held", "allow_pending", "allow_outstanding")

# What each source counter of stats() hands over, in words, for the failure message.
_KINDS = {
    "graph_user_objects": "graph user object (keep_alive, or a host node's function)",
    "stream_host_functions": "stream host function (keep_alive_until)",
    "host_calls": "host call (launch_host_func)",
    "host_node_calls": "host-node call (add_host_node)",
    "direct_pushes": "direct hand-over (defer_release, the C API)",
}


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
        broken.append("handed_over == " + " + ".join(cuda_reclaim._reclaim._CONSERVATION_BUCKETS))
    if counters["attached_to_cuda"] != counters["handed_back_by_cuda"] + counters["held_by_cuda"]:
        broken.append("attached_to_cuda == handed_back_by_cuda + held_by_cuda")
    return broken


def _flush_and_check(before, mark, allowed, timeout):
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


class Check:
    """The check, registered by pytest_configure (``_cuda_reclaim_pytest``) only where it is enabled."""

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
        request.node.stash[_BASELINE] = (before, mark)
        yield
        after, left, broken = _flush_and_check(before, mark, allowed, timeout)
        if left or broken:
            pytest.fail(_describe(request.node.nodeid, before, after, left, broken, timeout), pytrace=False)


# Reclaim.flush()'s default: the test's flush timeout.
_TEST_TIMEOUT = object()


class Reclaim:
    """What the ``reclaim`` fixture gives a test: the counters since the test began, and a flush of what
    was attached since then."""

    def __init__(self, baseline, *, since=None, timeout=DEFAULT_TIMEOUT):
        """`baseline`: a :func:`cuda_reclaim.stats` dict; `since`: a :func:`cuda_reclaim.hand_back_mark`
        (``None``: flush waits for everything attached before it); `timeout`: flush's default wait, in
        seconds (``None``: for ever)."""
        self._baseline = dict(baseline)
        self._since = since
        self._timeout = timeout

    @property
    def baseline(self):
        """The :func:`cuda_reclaim.stats` dict read when the test began (a copy)."""
        return dict(self._baseline)

    def flush(self, timeout=_TEST_TIMEOUT):
        """Any thread but CUDA's callback thread: :func:`cuda_reclaim.flush` with ``since=`` the test's start:
        waits for CUDA to hand back what was attached since the test began (never for what a fixture of a
        wider scope attached before), then drains; returns how many it released or ran. It waits up to
        ``timeout`` seconds (``None``: for ever); by default the test's flush timeout: the ``reclaim``
        marker's ``timeout``, else ``--reclaim-timeout`` (ini ``reclaim_timeout``, default 5 s). What CUDA
        still holds then stays held: :meth:`delta` shows it."""
        import cuda_reclaim

        return cuda_reclaim.flush(self._timeout if timeout is _TEST_TIMEOUT else timeout, since=self._since)

    def stats(self):
        """Any thread: :func:`cuda_reclaim.stats`, the counters now."""
        import cuda_reclaim

        return cuda_reclaim.stats()

    def delta(self):
        """Any thread: each counter of :func:`cuda_reclaim.stats` now minus its value when the test began
        (gauges such as ``pending`` and ``held_by_cuda`` may go negative)."""
        now = self.stats()
        return {key: value - self._baseline.get(key, 0) for key, value in now.items()}


def fixture_value(request):
    """The ``reclaim`` fixture's value for `request` (``_cuda_reclaim_pytest.reclaim`` calls it): it counts
    from the check's reading and mark where the check is enabled, else from now."""
    import cuda_reclaim

    started = request.node.stash.get(_BASELINE, None)
    if started is None:
        mark = cuda_reclaim.hand_back_mark()
        started = (cuda_reclaim.stats(), mark)
    baseline, mark = started
    try:
        _, timeout = _marker_settings(request.node, request.config.stash.get(_TIMEOUT, DEFAULT_TIMEOUT))
    except pytest.UsageError as error:
        pytest.fail(str(error), pytrace=False)
    return Reclaim(baseline, since=mark, timeout=timeout)
