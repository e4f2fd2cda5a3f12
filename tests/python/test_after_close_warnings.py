"""After close(), the caller is told: each Python-level hand-over (keep_alive, keep_alive_until, defer_release,
launch_host_func, add_host_node) gives a ResourceWarning the first time in a process, get_auto_drain() says
"closed", and an await of a stream point gets a CancelledError whose message says why. close() is for good,
so every scenario runs in a child interpreter whose driver is the fake."""

import pytest

import fake_cuda

# The child's check: `call()` (one hand-over) warns once with `expected` at the start of the message, pointing
# at the caller (this program, not the package), and neither a second call nor another function warns again in this process.
CHECK = """
import warnings

def hand_over_after_close(call, expected, again):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
        call()
        again()
    assert [w.category for w in caught] == [ResourceWarning], [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert message.startswith(expected + "() after cuda_reclaim.close(): "), message
    assert message.endswith("(said once per process)"), message
    assert caught[0].filename == "<string>", caught[0].filename
    print("warned:", message)
    return result

def before_close_nothing_warns():
    graph = fake.fake_cuda_graph_create()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cuda_reclaim.keep_alive(graph, P())
        cuda_reclaim.keep_alive_until(0, P())
        cuda_reclaim.defer_release(P())
        cuda_reclaim.launch_host_func(0, print)
        cuda_reclaim.add_host_node(graph, print)
    assert caught == [], [str(w.message) for w in caught]

before_close_nothing_warns()
assert cuda_reclaim.get_auto_drain() == "off"
cuda_reclaim.close()
assert cuda_reclaim.get_auto_drain() == "closed"
"""

SCENARIOS = {
    "keep_alive": (
        "graph = fake.fake_cuda_graph_create()\n"
        "attachment = hand_over_after_close(lambda: cuda_reclaim.keep_alive(graph, P()), 'keep_alive', "
        "lambda: cuda_reclaim.defer_release(P()))\n"
        "assert not attachment.done()  # still attached: CUDA may still use it\n"
        "fake.fake_cuda_graph_destroy(graph)\n"
        "wait_until(lambda: cuda_reclaim.stats()['leaked_after_close'] == 3)\n"
    ),
    "keep_alive_until": (
        "hand_over_after_close(lambda: cuda_reclaim.keep_alive_until(0, P()), 'keep_alive_until', "
        "lambda: cuda_reclaim.launch_host_func(0, print))\n"
    ),
    "defer_release": (
        "assert hand_over_after_close(lambda: cuda_reclaim.defer_release(P()), 'defer_release', "
        "lambda: cuda_reclaim.keep_alive_until(0, P())) is False\n"
        "assert cuda_reclaim.stats()['leaked_after_close'] >= 2\n"
    ),
    "launch_host_func": (
        "future = hand_over_after_close(lambda: cuda_reclaim.launch_host_func(0, print), 'launch_host_func', "
        "lambda: cuda_reclaim.defer_release(P()))\n"
        "assert future.cancelled()\n"
    ),
    "add_host_node": (
        "graph = fake.fake_cuda_graph_create()\n"
        "node = hand_over_after_close(lambda: cuda_reclaim.add_host_node(graph, print), 'add_host_node', "
        "lambda: cuda_reclaim.defer_release(P()))\n"
        "assert isinstance(node, cuda_reclaim.NodeHandle) and not node.done()\n"
    ),
}


@pytest.mark.parametrize("function", sorted(SCENARIOS))
def test_a_hand_over_after_close_warns_once_per_process(function):
    result = fake_cuda.run(CHECK + SCENARIOS[function])
    assert f"warned: {function}() after cuda_reclaim.close(): " in result.stdout


def test_the_warning_is_an_error_where_the_filters_say_so():
    # -W error::ResourceWarning: the caller gets the exception; the reference is counted all the same.
    result = fake_cuda.run(
        """
import warnings
warnings.simplefilter("error", ResourceWarning)
cuda_reclaim.close()
try:
    cuda_reclaim.defer_release(P())
except ResourceWarning as error:
    print("raised:", error)
assert cuda_reclaim.stats()["leaked_after_close"] == 1
assert cuda_reclaim.defer_release(P()) is False  # said once: no second warning, no exception
"""
    )
    assert "raised: defer_release() after cuda_reclaim.close(): the reference is never released" in result.stdout


def test_get_auto_drain_says_closed_after_close_whatever_the_mode():
    result = fake_cuda.run(
        """
cuda_reclaim.set_auto_drain("gc")
assert cuda_reclaim.get_auto_drain() == "gc"
cuda_reclaim.close()
assert cuda_reclaim.get_auto_drain() == "closed"
# set_auto_drain() returns the mode, one it accepts back: the one set before the close.
assert cuda_reclaim.set_auto_drain("thread") == "gc"
assert cuda_reclaim.set_auto_drain("off") == "thread"
assert cuda_reclaim.get_auto_drain() == "closed"
from cuda_reclaim import _info
assert _info.collect()["auto_drain"] == {"mode": "closed"}
print("closed ok")
"""
    )
    assert "closed ok" in result.stdout


@pytest.mark.parametrize("function", ["stream_reached", "run_when_reached"])
def test_an_await_after_close_is_cancelled_with_a_message_saying_why(function):
    call = "stream_reached(0)" if function == "stream_reached" else "run_when_reached(0, print)"
    result = fake_cuda.run(
        f"""
import asyncio
import cuda_reclaim.asyncio as reclaim_asyncio

async def main():
    try:
        await reclaim_asyncio.{call}
    except asyncio.CancelledError as error:
        return error.args

cuda_reclaim.close()
print("args:", asyncio.run(main()))
"""
    )
    assert f"args: ('{function}(): cuda_reclaim is closed: the call never runs',)" in result.stdout
