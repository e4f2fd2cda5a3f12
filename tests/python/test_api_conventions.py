"""One convention per question, over every public name (the package docstring states the rules):
signatures readable by inspect, timeouts (None: for ever), counts (None: all, 0: none), and errors that name
the function the user called."""

import asyncio
import inspect
import math

import pytest

import cuda_reclaim
from cuda_reclaim import asyncio as reclaim_asyncio

PUBLIC = [("cuda_reclaim", name, getattr(cuda_reclaim, name)) for name in cuda_reclaim.__all__] + [
    ("cuda_reclaim.asyncio", name, getattr(reclaim_asyncio, name)) for name in reclaim_asyncio.__all__
]
CALLABLES = [entry for entry in PUBLIC if callable(entry[2])]


def ids(entries):
    return [f"{module}.{name}" for module, name, _ in entries]


# Every parameter of a public function that is a timeout or a count, by the function's qualified name.
TIMEOUTS = {
    ("cuda_reclaim.drain", "timeout"),
    ("cuda_reclaim.flush", "timeout"),
    ("cuda_reclaim.wait_handed_back", "timeout"),
}
COUNTS = {
    ("cuda_reclaim.drain", "max_items"),
    ("cuda_reclaim.asyncio.install", "max_items"),
    ("cuda_reclaim.asyncio.DrainHandle", "max_items"),
}


# Exception classes take BaseException's arguments, which inspect cannot read for any exception type.
SIGNED = [entry for entry in CALLABLES if not (isinstance(entry[2], type) and issubclass(entry[2], BaseException))]


@pytest.mark.parametrize("module,name,obj", SIGNED, ids=ids(SIGNED))
def test_every_public_callable_has_a_readable_signature(module, name, obj):
    signature = inspect.signature(obj)
    assert all(parameter.name for parameter in signature.parameters.values())


def test_every_timeout_and_count_parameter_is_listed_here():
    found_timeouts, found_counts = set(), set()
    for module, name, obj in SIGNED:
        for parameter in inspect.signature(obj).parameters:
            if "timeout" in parameter:
                found_timeouts.add((f"{module}.{name}", parameter))
            if parameter.endswith("items") or parameter in ("count", "limit"):
                found_counts.add((f"{module}.{name}", parameter))
    assert found_timeouts == TIMEOUTS and found_counts == COUNTS


class Payload:
    pass


def test_drain_timeout_none_waits_for_ever_until_work_is_there(drained):
    cuda_reclaim.defer_release(Payload())
    assert cuda_reclaim.drain(timeout=None) == 1  # pending already: no wait


@pytest.mark.parametrize("value", [0, 0.0, 0.001, 1e30, 10**400])
def test_drain_timeout_takes_ints_and_floats(drained, value):
    cuda_reclaim.defer_release(Payload())
    assert cuda_reclaim.drain(timeout=value) == 1


@pytest.mark.parametrize(
    "value, error, message",
    [
        (-1, ValueError, "must be >= 0 seconds or None, not -1"),
        (-0.5, ValueError, "must be >= 0 seconds"),
        (-(10**400), ValueError, "must be >= 0 seconds"),
        (math.nan, ValueError, "must be >= 0 seconds"),
        (True, TypeError, "must be a number of seconds or None, not bool"),
        ("1", TypeError, "must be a number of seconds or None, not str"),
        ([], TypeError, "must be a number of seconds or None, not list"),
    ],
)
def test_drain_timeout_rejects_what_is_not_a_duration(drained, value, error, message):
    with pytest.raises(error, match=r"^drain\(\): timeout " + message):
        cuda_reclaim.drain(timeout=value)


def call_with_count(qualified, value):
    """Calls the function `qualified` with its count parameter set to `value`; returns its result."""
    if qualified == "cuda_reclaim.drain":
        return cuda_reclaim.drain(max_items=value)
    if qualified == "cuda_reclaim.asyncio.DrainHandle":
        return on_new_loop(lambda loop: reclaim_asyncio.DrainHandle(loop, value, 0.05))
    return on_new_loop(lambda loop: reclaim_asyncio.install(loop, max_items=value).cancel() or True)


def on_new_loop(use):
    """use(loop) on a new event loop, closed afterwards; returns what it returns."""
    loop = asyncio.new_event_loop()
    try:
        return use(loop)
    finally:
        loop.close()


@pytest.mark.parametrize("qualified", sorted(name for name, _ in COUNTS))
@pytest.mark.parametrize("value", [None, 0, 1, 2**70])
def test_counts_take_none_zero_and_any_size(drained, qualified, value):
    assert call_with_count(qualified, value) is not None


def test_a_count_of_none_means_all_and_zero_none(drained):
    for _ in range(3):
        cuda_reclaim.defer_release(Payload())
    assert cuda_reclaim.drain(max_items=0) == 0
    assert cuda_reclaim.drain(max_items=None) == 3


@pytest.mark.parametrize("qualified", sorted(name for name, _ in COUNTS))
@pytest.mark.parametrize(
    "value, error, message",
    [
        (-1, ValueError, "must be >= 0 or None, not -1"),
        (-(2**70), ValueError, "must be >= 0 or None"),
        (True, TypeError, "must be an int or None, not bool"),
        (1.0, TypeError, "must be an int or None, not float"),
        ("3", TypeError, "must be an int or None, not str"),
    ],
)
def test_counts_reject_negative_values_bools_and_non_ints(drained, qualified, value, error, message):
    function = qualified.rsplit(".", 1)[1]
    with pytest.raises(error, match=rf"^{function}\(\): max_items {message}"):
        call_with_count(qualified, value)


def run(coroutine):
    return asyncio.run(coroutine)


# One call per public callable that its own checks refuse: the error must name the function called.
BAD_CALLS = {
    "cuda_reclaim.Attachment": None,  # not instantiable: Python's own TypeError names the type
    "cuda_reclaim.DriverError": None,  # an exception class: any arguments
    "cuda_reclaim.NodeHandle": lambda: cuda_reclaim.NodeHandle("0x10"),
    "cuda_reclaim.add_host_node": lambda: cuda_reclaim.add_host_node(None, print),
    "cuda_reclaim.close": lambda: cuda_reclaim.close(1),
    "cuda_reclaim.conserved": lambda: cuda_reclaim.conserved("x"),
    "cuda_reclaim.defer_release": lambda: cuda_reclaim.defer_release(),
    "cuda_reclaim.drain": lambda: cuda_reclaim.drain("all"),
    "cuda_reclaim.fileno": lambda: cuda_reclaim.fileno(1),
    "cuda_reclaim.flush": lambda: cuda_reclaim.flush(-1),
    "cuda_reclaim.get_auto_drain": lambda: cuda_reclaim.get_auto_drain(1),
    "cuda_reclaim.get_include": lambda: cuda_reclaim.get_include(1),
    "cuda_reclaim.hand_back_mark": lambda: cuda_reclaim.hand_back_mark(1),
    "cuda_reclaim.is_closed": lambda: cuda_reclaim.is_closed(1),
    "cuda_reclaim.keep_alive": lambda: cuda_reclaim.keep_alive(None, 1),
    "cuda_reclaim.keep_alive_until": lambda: cuda_reclaim.keep_alive_until(None, 1),
    "cuda_reclaim.launch_host_func": lambda: cuda_reclaim.launch_host_func(None, print),
    "cuda_reclaim.launch_host_func_ordered": lambda: cuda_reclaim.launch_host_func_ordered(None, print),
    "cuda_reclaim.add_host_node_ordered": lambda: cuda_reclaim.add_host_node_ordered(None, print),
    "cuda_reclaim.pending": lambda: cuda_reclaim.pending(1),
    "cuda_reclaim.set_auto_drain": lambda: cuda_reclaim.set_auto_drain("sometimes"),
    "cuda_reclaim.show_config": lambda: cuda_reclaim.show_config(1),
    "cuda_reclaim.stats": lambda: cuda_reclaim.stats(1),
    "cuda_reclaim.trim": lambda: cuda_reclaim.trim(1),
    "cuda_reclaim.wait_handed_back": lambda: cuda_reclaim.wait_handed_back("1"),
    "cuda_reclaim.asyncio.DrainHandle": lambda: on_new_loop(lambda loop: reclaim_asyncio.DrainHandle(loop, 1, "x")),
    "cuda_reclaim.asyncio.flush": lambda: run(reclaim_asyncio.flush(1)),
    "cuda_reclaim.asyncio.handed_back": lambda: run(reclaim_asyncio.handed_back(1)),
    "cuda_reclaim.asyncio.install": lambda: reclaim_asyncio.install("x"),
    "cuda_reclaim.asyncio.run_when_reached": lambda: run(reclaim_asyncio.run_when_reached(None, print)),
    "cuda_reclaim.asyncio.stream_reached": lambda: run(reclaim_asyncio.stream_reached(None)),
}


def test_every_public_callable_has_a_bad_call_here():
    assert sorted(BAD_CALLS) == sorted(ids(CALLABLES))


@pytest.mark.parametrize("qualified", sorted(name for name, call in BAD_CALLS.items() if call is not None))
def test_errors_name_the_function_called(drained, qualified):
    function = qualified.rsplit(".", 1)[1]
    with pytest.raises((TypeError, ValueError)) as error:
        BAD_CALLS[qualified]()
    assert f"{function}()" in str(error.value), str(error.value)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: cuda_reclaim.add_host_node(0x1234, print, dependencies=[True]), TypeError, "add_host_node(): dependencies"),
        (lambda: cuda_reclaim.add_host_node(0x1234, None), TypeError, "add_host_node(): fn must be callable"),
        (lambda: cuda_reclaim.launch_host_func(0, 3), TypeError, "launch_host_func(): fn must be callable"),
        (lambda: cuda_reclaim.launch_host_func(-1, print), ValueError, "launch_host_func(): stream -1"),
        (lambda: cuda_reclaim.launch_host_func_ordered(0, 3), TypeError, "launch_host_func_ordered(): fn must be"),
        (lambda: cuda_reclaim.launch_host_func_ordered(-1, print), ValueError, "launch_host_func_ordered(): stream -1"),
        (lambda: cuda_reclaim.keep_alive(True, 1), TypeError, "keep_alive() expects a graph"),
        (lambda: cuda_reclaim.keep_alive_until(2**64, 1), ValueError, "keep_alive_until(): stream"),
        (lambda: run(reclaim_asyncio.stream_reached(-1)), ValueError, "stream_reached(): stream -1"),
        (lambda: run(reclaim_asyncio.run_when_reached(0, 3)), TypeError, "run_when_reached(): fn must be callable"),
        (lambda: on_new_loop(lambda loop: reclaim_asyncio.install(loop, interval="x")), TypeError, "install(): interval"),
        (lambda: on_new_loop(lambda loop: reclaim_asyncio.install(loop, interval=-1.0)), ValueError, "install(): interval"),
        (lambda: on_new_loop(lambda loop: reclaim_asyncio.install(loop, interval=math.nan)), ValueError, "install(): interval"),
        (lambda: on_new_loop(lambda loop: reclaim_asyncio.install(loop, interval=True)), TypeError, "install(): interval"),
    ],
)
def test_handles_callables_and_periods_are_checked_by_the_same_rules(drained, call, error, message):
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)


def test_the_package_docstring_states_the_rules():
    doc = cuda_reclaim.__doc__
    for rule in ("``None`` waits for ever", "``None`` means all, ``0`` none", "TypeError", "ValueError"):
        assert rule in doc


def test_drain_timeout_none_waits_for_a_hand_over_and_returns_at_close():
    # In a child: close() is for good. The waits are bounded by the child's timeout, never by the test.
    from conftest import run_child_script

    result = run_child_script("api_conventions_drain_waits_for_ever.py", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[:3] == ["released 1", "after close 0", "done"], result.stdout
