"""Child of test_after_close_warnings.py, run against the fake driver (fake_cuda.run_script): one scenario per
run, named by the first argument. The hand_over_* scenarios close the package first (close_after_a_quiet_start)
and check that one hand-over warns once, pointing at this program."""

import warnings

from fake_driver_child import P, cuda_reclaim, fake, wait_until

import scenario


def hand_over_after_close(call, expected, again):
    """Calls `call()` (one hand-over) twice, then `again()` (another function): the first call warns once with
    `expected` at the start of the message, pointing at the caller (this program, not the package), and
    neither the second call nor `again()` warns again in this process. Returns the first call's result."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
        call()
        again()
    assert [w.category for w in caught] == [ResourceWarning], [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert message.startswith(expected + "() after cuda_reclaim.close(): "), message
    assert message.endswith("(said once per process)"), message
    assert caught[0].filename == __file__, (caught[0].filename, __file__)
    print("warned:", message)
    return result


def close_after_a_quiet_start():
    """Before close() no hand-over warns; get_auto_drain() says "off" before and "closed" after."""
    graph = fake.fake_cuda_graph_create()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cuda_reclaim.keep_alive(graph, P())
        cuda_reclaim.keep_alive_until(0, P())
        cuda_reclaim.defer_release(P())
        cuda_reclaim.launch_host_func(0, print)
        cuda_reclaim.add_host_node(graph, print)
    assert caught == [], [str(w.message) for w in caught]
    assert cuda_reclaim.get_auto_drain() == "off"
    cuda_reclaim.close()
    assert cuda_reclaim.get_auto_drain() == "closed"


def hand_over_keep_alive():
    close_after_a_quiet_start()
    graph = fake.fake_cuda_graph_create()
    attachment = hand_over_after_close(
        lambda: cuda_reclaim.keep_alive(graph, P()), "keep_alive", lambda: cuda_reclaim.defer_release(P())
    )
    assert not attachment.done()  # still attached: CUDA may still use it
    fake.fake_cuda_graph_destroy(graph)
    wait_until(lambda: cuda_reclaim.stats()["leaked_after_close"] == 3)


def hand_over_keep_alive_until():
    close_after_a_quiet_start()
    hand_over_after_close(
        lambda: cuda_reclaim.keep_alive_until(0, P()), "keep_alive_until",
        lambda: cuda_reclaim.launch_host_func(0, print),
    )


def hand_over_defer_release():
    close_after_a_quiet_start()
    result = hand_over_after_close(
        lambda: cuda_reclaim.defer_release(P()), "defer_release", lambda: cuda_reclaim.keep_alive_until(0, P())
    )
    assert result is False
    assert cuda_reclaim.stats()["leaked_after_close"] >= 2


def hand_over_launch_host_func():
    close_after_a_quiet_start()
    future = hand_over_after_close(
        lambda: cuda_reclaim.launch_host_func(0, print), "launch_host_func", lambda: cuda_reclaim.defer_release(P())
    )
    assert future.cancelled()


def hand_over_add_host_node():
    close_after_a_quiet_start()
    graph = fake.fake_cuda_graph_create()
    node = hand_over_after_close(
        lambda: cuda_reclaim.add_host_node(graph, print), "add_host_node", lambda: cuda_reclaim.defer_release(P())
    )
    assert isinstance(node, cuda_reclaim.NodeHandle) and not node.done()


def the_warning_is_an_error_where_the_filters_say_so():
    warnings.simplefilter("error", ResourceWarning)
    cuda_reclaim.close()
    try:
        cuda_reclaim.defer_release(P())
    except ResourceWarning as error:
        print("raised:", error)
    assert cuda_reclaim.stats()["leaked_after_close"] == 1
    assert cuda_reclaim.defer_release(P()) is False  # said once: no second warning, no exception


def get_auto_drain_says_closed_whatever_the_mode():
    cuda_reclaim.set_auto_drain("off")
    assert cuda_reclaim.get_auto_drain() == "off"
    cuda_reclaim.close()
    assert cuda_reclaim.get_auto_drain() == "closed"
    # set_auto_drain() returns the mode, one it accepts back: the one set before the close.
    assert cuda_reclaim.set_auto_drain("thread") == "off"
    assert cuda_reclaim.set_auto_drain("off") == "thread"
    assert cuda_reclaim.get_auto_drain() == "closed"
    from cuda_reclaim import _info

    assert _info.collect()["auto_drain"] == {"mode": "closed"}
    print("closed ok")


def an_await_after_close_is_cancelled(function):
    """Awaits cuda_reclaim.asyncio's `function` (stream_reached or run_when_reached) after close(); prints the
    arguments of the CancelledError it raised."""
    import asyncio

    import cuda_reclaim.asyncio as reclaim_asyncio

    awaitables = {
        "stream_reached": lambda: reclaim_asyncio.stream_reached(0),
        "run_when_reached": lambda: reclaim_asyncio.run_when_reached(0, print),
    }

    async def main():
        try:
            await awaitables[function]()
        except asyncio.CancelledError as error:
            return error.args

    cuda_reclaim.close()
    print("args:", asyncio.run(main()))


if __name__ == "__main__":
    scenario.run(
        hand_over_keep_alive,
        hand_over_keep_alive_until,
        hand_over_defer_release,
        hand_over_launch_host_func,
        hand_over_add_host_node,
        the_warning_is_an_error_where_the_filters_say_so,
        get_auto_drain_says_closed_whatever_the_mode,
        an_await_after_close_is_cancelled,
    )
