"""GPU tests (marker `gpu`) of Python callbacks from CUDA: launch_host_func, cuda_reclaim.asyncio and
add_host_node, and their ordered forms, against the real driver, on cuda.core streams and graphs and on the
streams of a second client (CuPy, PyTorch); 10^4 callbacks in stream order; exit with callbacks still pending
(held_by_cuda in the exit report). Skipped, with the reason, where there is no driver, no GPU or no cuda.core
(a missing CuPy or PyTorch skips only its own tests).

Run on a GPU machine: `pytest -m gpu -v tests/python/test_gpu_callbacks.py` (docs/gpu.md)."""

import asyncio
import gc
import os
import threading
import time
import weakref

import pytest

import cuda_reclaim
import cuda_reclaim.asyncio as reclaim_asyncio
from conftest import run_child_script
from cuda_reclaim import _reclaim
from exit_report import last_report
from children.scenario import holds_within, wait_until
from gpu_support import KERNELS, compile_kernels, cycles_for

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def spin(device):
    return compile_kernels(device).get_kernel("spin")


@pytest.fixture
def threaded(device):
    """The automatic drain thread on (the default), the device current on this thread."""
    device.set_current()
    previous = cuda_reclaim.set_auto_drain("thread")
    yield
    cuda_reclaim.set_auto_drain(previous)


def launch_spin(stream, spin, device, seconds):
    from cuda.core import LaunchConfig, launch

    launch(stream, LaunchConfig(grid=1, block=1), spin, cycles_for(device, seconds))


def cuda_has_run_host_functions_since(device):
    """Waits until CUDA's thread has run a host function launched now on an idle stream (a control): what
    CUDA could do before this call, it has had the chance to do."""
    cuda_reclaim.launch_host_func(device.create_stream(), lambda: None).result(timeout=30)


def test_the_call_runs_after_the_kernel_in_a_drain_never_on_cudas_thread(device, spin, threaded):
    stream = device.create_stream()
    before = cuda_reclaim.stats()
    launch_spin(stream, spin, device, 1.0)
    kernel_done = stream.record()
    ran_on = []
    future = cuda_reclaim.launch_host_func(stream, lambda x: ran_on.append(threading.get_ident()) or x * 2, 21)
    cuda_has_run_host_functions_since(device)
    assert not future.done(), "behind the 1 s kernel"
    assert future.result(timeout=30) == 42
    assert kernel_done.is_done, "the call ran after the work before it"
    cuda_thread = _reclaim._diagnostics()["last_host_function_thread"]
    print(f"host function on {cuda_thread:#x}; call ran on {ran_on[0]:#x}")
    assert cuda_thread not in (0, threading.main_thread().ident)
    assert ran_on[0] != cuda_thread, "the call ran in a drain, not on CUDA's thread"
    after = cuda_reclaim.stats()
    assert after["host_calls"] >= before["host_calls"] + 1
    stream.sync()


def test_ten_thousand_callbacks_run_in_stream_order_on_two_streams(device, spin, threaded):
    streams = [device.create_stream(), device.create_stream()]
    count = 10_000
    ran = ([], [])
    futures = []
    started = time.monotonic()
    for i in range(count):
        which = i % 2
        if i % 500 == 0:
            launch_spin(streams[which], spin, device, 0.001)
        futures.append(cuda_reclaim.launch_host_func(streams[which], ran[which].append, i // 2))
    for future in futures:
        future.result(timeout=120)
    elapsed = time.monotonic() - started
    print(f"{count} callbacks in {elapsed:.3f} s; calls that arrived before their turn: "
          f"{cuda_reclaim.stats()['calls_parked']}")
    assert ran[0] == list(range(count // 2)) and ran[1] == list(range(count // 2))
    s = cuda_reclaim.stats()
    assert s["calls_outstanding"] == 0
    assert s["attached_to_cuda"] == s["handed_back_by_cuda"] + s["held_by_cuda"]


def test_exceptions_reach_the_future(device, threaded):
    stream = device.create_stream()

    def fails():
        raise ValueError("from a callback")

    with pytest.raises(ValueError, match="from a callback"):
        cuda_reclaim.launch_host_func(stream, fails).result(timeout=30)


def test_a_cancelled_future_never_runs(device, spin, threaded):
    stream = device.create_stream()
    launch_spin(stream, spin, device, 1.0)
    ran = []
    future = cuda_reclaim.launch_host_func(stream, ran.append, 1)
    assert future.cancel()
    cuda_reclaim.launch_host_func(stream, lambda: None).result(timeout=30)  # the stream passed both
    assert not ran


def test_cupy_streams(device, threaded):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    stream = cupy.cuda.Stream(non_blocking=True)
    with open(KERNELS) as source:
        kernel = cupy.RawKernel(source.read(), "spin")
    ran = []
    with stream:
        kernel((1,), (1,), (cupy.uint64(int(device.properties.clock_rate * 1000 * 0.05)),))
    futures = [cuda_reclaim.launch_host_func(stream.ptr, ran.append, i) for i in range(1000)]
    if hasattr(type(stream), "__cuda_stream__"):
        futures.append(cuda_reclaim.launch_host_func(stream, ran.append, 1000))
    for future in futures:
        future.result(timeout=60)
    assert ran == list(range(len(futures)))
    stream.synchronize()


def test_pytorch_streams(device, threaded):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    stream = torch.cuda.Stream()
    ran = []
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(device.properties.clock_rate * 1000 * 0.05))
        futures = [cuda_reclaim.launch_host_func(stream.cuda_stream, ran.append, i) for i in range(1000)]
    for future in futures:
        future.result(timeout=60)
    assert ran == list(range(1000))
    stream.synchronize()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
@pytest.mark.parametrize("mode", ["thread", "off"])
def test_asyncio_awaits_a_stream_point(device, spin, loop_kind, mode):
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed")
        make_loop = uvloop.new_event_loop
    else:
        make_loop = asyncio.new_event_loop
    device.set_current()
    previous = cuda_reclaim.set_auto_drain(mode)
    stream = device.create_stream()

    async def main():
        loop = asyncio.get_running_loop()
        launch_spin(stream, spin, device, 0.2)
        kernel_done = stream.record()
        started = loop.time()
        await asyncio.wait_for(reclaim_asyncio.stream_reached(stream), 30)
        waited = loop.time() - started
        assert kernel_done.is_done, "resumed only once the stream had passed the kernel"
        order = []

        async def one(i):
            return await reclaim_asyncio.run_when_reached(stream, lambda: order.append(i) or i)

        results = await asyncio.gather(*(one(i) for i in range(200)))
        return waited, results, order

    loop = make_loop()
    try:
        device.set_current()
        waited, results, order = loop.run_until_complete(main())
    finally:
        loop.close()
        cuda_reclaim.set_auto_drain(previous)
    print(f"{loop_kind}/{mode}: resumed after {waited:.3f} s")
    assert results == list(range(200)) and order == list(range(200))


def test_graph_host_node_fires_on_every_launch(device, spin, threaded):
    from cuda.core import LaunchConfig
    from cuda.core.graph import GraphDefinition

    stream = device.create_stream()
    before = cuda_reclaim.stats()
    fired = []
    token = type("Token", (), {})()
    token_ref = weakref.ref(token)
    definition = GraphDefinition()
    kernel_node = definition.launch(LaunchConfig(grid=1, block=1), spin, cycles_for(device, 0.0005))
    node = cuda_reclaim.add_host_node(definition, lambda t: fired.append(threading.get_ident()), token,
                                      dependencies=[kernel_node])
    assert isinstance(node, int) and node != 0
    del token
    executable = definition.instantiate()
    for _ in range(100):
        executable.launch(stream)
    stream.sync()
    assert holds_within(lambda: len(fired) == 100), len(fired)
    cuda_thread = _reclaim._diagnostics()["last_host_function_thread"]
    assert cuda_thread not in fired, "the calls ran in drains, not on CUDA's thread"
    after = cuda_reclaim.stats()
    assert after["host_node_calls"] - before["host_node_calls"] == 100
    assert after["held_by_cuda"] - before["held_by_cuda"] == 1, "the graph holds the node's payload"
    executable.close()
    del definition, kernel_node
    wait_until(lambda: gc.collect() is not None and token_ref() is None,
               "it is released once the graph and its exec are gone")
    assert cuda_reclaim.stats()["held_by_cuda"] == before["held_by_cuda"]


def test_an_ordered_call_has_run_before_the_stream_goes_past_it(device, spin, threaded):
    stream = device.create_stream()
    launch_spin(stream, spin, device, 0.05)
    started, release, ran = threading.Event(), threading.Event(), []

    def held_call():
        started.set()
        release.wait(60)
        ran.append(threading.get_ident())

    future = cuda_reclaim.launch_host_func_ordered(stream, held_call)
    after = stream.record()
    assert started.wait(60), "no drain ran the call"
    assert not after.is_done, "the stream went past a call that has not returned"
    release.set()
    wait_until(lambda: after.is_done, "the stream went past the ordered call", timeout=60)
    assert ran and future.done(), "the stream's later work waited until the call had run"
    cuda_thread = _reclaim._diagnostics()["last_host_function_thread"]
    assert ran[0] != cuda_thread, "the call ran in a drain, not on CUDA's thread"


def test_an_ordered_host_node_holds_each_launch_until_its_call_has_run(device, spin, threaded):
    from cuda.core import LaunchConfig
    from cuda.core.graph import GraphDefinition

    stream = device.create_stream()
    started, release, fired = threading.Event(), threading.Event(), []

    def held_call():
        started.set()
        release.wait(60)
        fired.append(len(fired))

    definition = GraphDefinition()
    kernel_node = definition.launch(LaunchConfig(grid=1, block=1), spin, cycles_for(device, 0.0005))
    cuda_reclaim.add_host_node_ordered(definition, held_call, dependencies=[kernel_node])
    executable = definition.instantiate()
    for launch_number in range(5):
        started.clear()
        release.clear()
        executable.launch(stream)
        done = stream.record()
        assert started.wait(60), "no drain ran the node's call"
        assert not done.is_done, "the stream went past a node whose call has not returned"
        release.set()
        wait_until(lambda: done.is_done, "the stream went past the ordered node", timeout=60)
        assert fired == list(range(launch_number + 1)), "each launch waited for its own call"
    executable.close()


def test_graph_builder_after_end_building_takes_a_host_node(device, spin, threaded):
    from cuda.core import LaunchConfig, launch

    stream = device.create_stream()
    builder = stream.create_graph_builder().begin_building()
    launch(builder, LaunchConfig(grid=1, block=1), spin, cycles_for(device, 0.0005))
    with pytest.raises(ValueError, match="end_building"):
        cuda_reclaim.add_host_node(builder, print)
    builder.end_building()
    fired = []
    cuda_reclaim.add_host_node(builder, fired.append, 1)
    graph = builder.complete()
    for _ in range(10):
        graph.launch(stream)
    stream.sync()
    assert holds_within(lambda: len(fired) == 10), fired
    assert fired == [1] * 10
    graph.close()
    builder.close()


@pytest.mark.parametrize("sync_after_close", [False, True], ids=["exit-at-once", "sync-after-close"])
def test_exit_with_callbacks_pending_counts_them_and_never_runs_them(device, sync_after_close):
    args = ["--sync-after-close"] if sync_after_close else []
    result = run_child_script("exit_with_running_kernel.py", "callbacks", *args, env={"CUDA_RECLAIM_REPORT": "1"},
                              timeout=120)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert "callback ran" not in result.stdout, "nothing runs after the close"
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr
    report = last_report(result.stderr)
    assert report["conserved"] == "yes"
    assert report["attached_to_cuda"] == report["handed_back_by_cuda"] + report["held_by_cuda"]
    # Four objects go to CUDA (three host calls, one keep_alive_until) behind a 2 s kernel: each is still
    # held at exit, or handed back after the close (counted as leaked), never released or run.
    assert report["attached_to_cuda"] == 4
    assert report["held_by_cuda"] + report["leaked_after_close"] == 4, result.stderr
    if sync_after_close:
        assert report["held_by_cuda"] == 0, "the stream finished after the close: all handed back"


@pytest.mark.parametrize("drain", ["thread", "loop"])
def test_the_asyncio_example_overlaps_and_its_results_agree(device, drain):
    here = os.path.dirname(os.path.abspath(__file__))
    # examples/ of the repository (tests/python/../../examples) or of the GPU bundle (tests/../examples)
    found = [path for path in (os.path.join(here, "..", "..", "examples", "callbacks_asyncio.py"),
                               os.path.join(here, "..", "examples", "callbacks_asyncio.py")) if os.path.exists(path)]
    if not found:
        pytest.skip("examples/callbacks_asyncio.py is not next to the tests")
    result = run_child_script(os.path.normpath(found[0]), "--drain", drain, "--batches", "8", timeout=300)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert "results agree" in result.stdout
