"""Child of test_host_nodes.py: one scenario per run, named by the first argument, against the fake libcuda
(tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names."""

import operator
import sys
import threading
import weakref

from fake_driver_child import P, cuda_reclaim, fake, wait_until

import scenario


def each_firing_of_every_launch_calls_the_function_in_a_drain():
    calls = []
    arg = P(); ref = weakref.ref(arg)
    def fn(a, b):
        calls.append((a is not None, b, threading.get_ident()))
    graph = fake.fake_cuda_graph_create()
    node = cuda_reclaim.add_host_node(graph, fn, arg, "b")
    del arg
    assert isinstance(node, int) and node != 0
    assert fake.fake_cuda_graph_host_node_count(graph) == 1
    first, second = fake.fake_cuda_graph_instantiate(graph), fake.fake_cuda_graph_instantiate(graph)
    for exe in (first, second, first):
        fake.fake_cuda_graph_launch(exe, 0x9A00)
    assert fake.fake_cuda_run_host_functions() == 3
    assert calls == [] and cuda_reclaim.pending() == 3, "CUDA's thread only pushed"
    assert cuda_reclaim.drain() == 3
    assert calls == [(True, "b", threading.get_ident())] * 3
    s = cuda_reclaim.stats()
    assert s["host_node_calls"] == 3 and s["calls_run"] == 3 and s["held_by_cuda"] == 1, s
    fake.fake_cuda_graph_exec_destroy(first); fake.fake_cuda_graph_exec_destroy(second)
    fake.fake_cuda_graph_destroy(graph)
    assert ref() is not None, "pushed one last time, not released on the destroying thread"
    assert cuda_reclaim.drain() == 1 and ref() is None
    s = cuda_reclaim.stats()
    assert s["held_by_cuda"] == 0 and s["graph_user_objects"] == 1 and s["direct_pushes"] == 0, s
    assert s["handed_over"] == s["released"] == 4, s


def the_node_handle_is_the_cugraphnode_int_and_keywords_reach_the_function():
    calls = []
    graph = fake.fake_cuda_graph_create()
    node = cuda_reclaim.add_host_node(graph, lambda *a, **k: calls.append((a, k)), 1, tag="x")
    assert type(node) is cuda_reclaim.NodeHandle and isinstance(node, int)
    value = int(node)
    assert type(value) is int and value != 0 and operator.index(node) == value
    assert node == value and hash(node) == hash(value) and {node: 1}[value] == 1
    assert repr(node) == f"<cuda_reclaim.NodeHandle CUgraphNode {value:#x}>", repr(node)
    assert str(node) == str(value) and f"{node}" == str(value)
    try:
        node.extra = 1
    except AttributeError:
        pass
    else:
        raise AssertionError("a NodeHandle is immutable")
    after = cuda_reclaim.add_host_node(graph, calls.append, "after", dependencies=[node])
    assert after != node
    exe = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_launch(exe, 0x9E00)
    fake.fake_cuda_run_host_functions()
    assert cuda_reclaim.drain() == 2
    assert calls == [((1,), {"tag": "x"}), "after"], calls
    fake.fake_cuda_graph_exec_destroy(exe); fake.fake_cuda_graph_destroy(graph)
    cuda_reclaim.drain()


def calls_still_queued_keep_the_function_alive_after_the_graph_is_gone():
    arg = P(); ref = weakref.ref(arg)
    calls = []
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node(graph, lambda a: calls.append(type(a).__name__), arg)
    del arg
    exe = fake.fake_cuda_graph_instantiate(graph)
    stream = 0x9B00
    fake.fake_cuda_stream_hold(stream, 1)
    fake.fake_cuda_graph_launch(exe, stream); fake.fake_cuda_graph_launch(exe, stream)
    fake.fake_cuda_graph_exec_destroy(exe); fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.stats()["held_by_cuda"] == 1, "the exec's launches still hold it"
    fake.fake_cuda_stream_hold(stream, 0)
    assert fake.fake_cuda_run_host_functions() == 2
    assert cuda_reclaim.stats()["held_by_cuda"] == 0
    assert ref() is not None, "two calls queued"
    assert cuda_reclaim.drain() == 2, "two calls and no final entry: the last call releases it"
    assert len(calls) == 2 and ref() is None


def an_exception_goes_to_the_unraisable_hook_and_later_firings_still_run():
    seen = []
    sys.unraisablehook = lambda unraisable: seen.append(type(unraisable.exc_value).__name__)
    count = [0]
    def flaky():
        count[0] += 1
        if count[0] == 1:
            raise ValueError("first firing")
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node(graph, flaky)
    exe = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_launch(exe, 0x9C00); fake.fake_cuda_graph_launch(exe, 0x9C00)
    fake.fake_cuda_run_host_functions()
    assert cuda_reclaim.drain() == 2
    assert count[0] == 2 and seen == ["ValueError"], (count, seen)


def dependencies_order_the_nodes_and_a_refused_node_leaves_its_function_with_the_graph():
    import cuda.bindings.driver as driver  # here: only this scenario needs cuda.bindings

    order = []
    graph = fake.fake_cuda_graph_create()
    a = cuda_reclaim.add_host_node(graph, order.append, "a")
    b = cuda_reclaim.add_host_node(graph, order.append, "b", dependencies=[a])
    c = cuda_reclaim.add_host_node(graph, order.append, "c", dependencies=(driver.CUgraphNode(b),))
    exe = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_launch(exe, 0x9D00)
    fake.fake_cuda_run_host_functions()
    cuda_reclaim.drain()
    assert order == ["a", "b", "c"], order
    other = fake.fake_cuda_graph_create()
    arg = P(); ref = weakref.ref(arg)
    try:
        cuda_reclaim.add_host_node(other, order.append, arg, dependencies=[a])  # a node of another graph
    except cuda_reclaim.DriverError as error:
        assert "cuGraphAddHostNode failed with CUDA_ERROR_INVALID_VALUE" in str(error), error
        assert "stays attached to the graph" in str(error), error
    else:
        raise AssertionError("no DriverError")
    del arg
    assert ref() is not None
    fake.fake_cuda_graph_destroy(other)
    cuda_reclaim.drain()
    assert ref() is None, "released with the graph, through the queue"


def a_graph_that_refuses_the_user_object_gets_no_node_and_nothing_is_kept():
    # Whether a reference to fn is kept, read through a weak reference (a lambda's count moves with the
    # interpreter's own borrowed loads on 3.14+).
    class Fn:
        def __call__(self):
            return None

    fn = Fn()
    kept = weakref.ref(fn)
    try:
        cuda_reclaim.add_host_node(fake.fake_cuda_failing_graph(), fn)
    except cuda_reclaim.DriverError as error:
        assert "cuGraphRetainUserObject failed" in str(error) and "no node was added" in str(error), error
    else:
        raise AssertionError("no DriverError")
    del fn
    assert kept() is None, "nothing keeps fn"
    assert fake.fake_cuda_graph_host_node_count(fake.fake_cuda_failing_graph()) == 0
    assert cuda_reclaim.stats()["held_by_cuda"] == 0 and cuda_reclaim.pending() == 0


def many_launches_on_many_cuda_threads_call_once_per_firing():
    cuda_reclaim.set_auto_drain("thread")
    fake.fake_cuda_start_threads(4)
    counts = [0, 0]
    def bump(i):
        counts[i] += 1
    graph = fake.fake_cuda_graph_create()
    first = cuda_reclaim.add_host_node(graph, bump, 0)
    cuda_reclaim.add_host_node(graph, bump, 1, dependencies=[first])
    exes = [fake.fake_cuda_graph_instantiate(graph) for _ in range(3)]
    streams = [0x9E00 + i for i in range(3)]
    for i in range(3000):
        fake.fake_cuda_graph_launch(exes[i % 3], streams[i % 3])
    for stream in streams:
        assert fake.fake_cuda_stream_synchronize(stream, 60000) == 0
    wait_until(lambda: counts == [3000, 3000])
    for exe in exes:
        fake.fake_cuda_graph_exec_destroy(exe)
    fake.fake_cuda_graph_destroy(graph)
    wait_until(lambda: cuda_reclaim.stats()["pending"] == 0 and cuda_reclaim.stats()["held_by_cuda"] == 0)
    s = cuda_reclaim.stats()
    assert s["host_node_calls"] == 6000 and s["calls_run"] == 6000, s


def firings_after_close_never_run_and_their_payload_is_never_touched():
    calls = []
    arg = P(); ref = weakref.ref(arg)
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node(graph, lambda a: calls.append(type(a).__name__), arg)
    del arg
    exe = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_launch(exe, 0x9F00)
    fake.fake_cuda_run_host_functions()            # fired before the close: runs in the final drain
    cuda_reclaim.close()
    assert len(calls) == 1
    fake.fake_cuda_graph_launch(exe, 0x9F00)
    fake.fake_cuda_run_host_functions()            # fired after: counted as leaked, never run
    fake.fake_cuda_graph_exec_destroy(exe); fake.fake_cuda_graph_destroy(graph)
    s = cuda_reclaim.stats()
    assert len(calls) == 1 and s["leaked_after_close"] == 1, s
    assert ref() is not None, "a late firing holds the payload for good (never touched after close)"
    assert s["held_by_cuda"] == 0, s


def exit_with_a_live_graph_reports_its_node_as_held():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node(graph, lambda: print("fired", flush=True))
    exe = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_launch(exe, 0xA000)
    fake.fake_cuda_run_host_functions()            # one firing handed over: the exit's final drain runs it


def finalizers_that_add_and_destroy_host_nodes_are_safe(ending):
    fake.fake_cuda_start_threads(2)
    cuda_reclaim.set_auto_drain("thread")
    main_thread = threading.get_ident()
    on_the_drain_thread = []
    class AddsNode:
        def __init__(self, i): self.i = i
        def __del__(self):
            if threading.get_ident() != main_thread:
                on_the_drain_thread.append(self.i)
            graph = fake.fake_cuda_graph_create()
            cuda_reclaim.add_host_node(graph, int, self.i)
            exe = fake.fake_cuda_graph_instantiate(graph)
            fake.fake_cuda_graph_launch(exe, 0xA100 + self.i % 2)
            fake.fake_cuda_graph_exec_destroy(exe)
            fake.fake_cuda_graph_destroy(graph)
    for i in range(1000):
        cuda_reclaim.defer_release(AddsNode(i))
        if i % 100 == 0:
            cuda_reclaim.drain()
    if ending != "exit":
        # The close or the fork comes once the drain thread runs these finalizers.
        wait_until(lambda: on_the_drain_thread)
    scenario.close_or_fork(ending)
    print("done", flush=True)


if __name__ == "__main__":
    scenario.run(
        each_firing_of_every_launch_calls_the_function_in_a_drain,
        the_node_handle_is_the_cugraphnode_int_and_keywords_reach_the_function,
        calls_still_queued_keep_the_function_alive_after_the_graph_is_gone,
        an_exception_goes_to_the_unraisable_hook_and_later_firings_still_run,
        dependencies_order_the_nodes_and_a_refused_node_leaves_its_function_with_the_graph,
        a_graph_that_refuses_the_user_object_gets_no_node_and_nothing_is_kept,
        many_launches_on_many_cuda_threads_call_once_per_firing,
        firings_after_close_never_run_and_their_payload_is_never_touched,
        exit_with_a_live_graph_reports_its_node_as_held,
        finalizers_that_add_and_destroy_host_nodes_are_safe,
    )
