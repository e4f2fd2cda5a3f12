"""GPU tests (marker `gpu`): keep_alive / keep_alive_until against the real driver, with cuda.core and
cuda.bindings. Skipped, with the reason, where there is no driver, no GPU or no cuda.core.

Run on a GPU machine: `pytest -m gpu -v tests/python` (docs/gpu.md)."""

import ctypes
import gc
import sys
import threading
import time
import weakref

import pytest

import cuda_reclaim
import exit_report
from conftest import conserved, run_child_script
from cuda_reclaim import _reclaim
from children.scenario import wait_until
from gpu_support import compile_kernels, cycles_for

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def kernels(device):
    module = compile_kernels(device)
    return module.get_kernel("spin"), module.get_kernel("fill")


@pytest.fixture
def quiet(drained):
    """Auto drain off and nothing pending, with the driver's context current on this thread."""
    yield drained


def source_stats():
    """stats() with the trampolines' diagnostics (withdrawn payloads, the threads that ran them)."""
    return {**cuda_reclaim.stats(), **_reclaim._diagnostics()}


def destructors_run_on_cudas_thread(count_key, release):
    """Waits until CUDA's internal thread has worked through what was released before this call: `release`
    hands one more object (a control) to it, and this waits until that one arrives in `count_key` of the
    source stats. Returns the control's weak reference, for the caller to drain."""
    before = source_stats()[count_key]
    control = Token()
    control_ref = weakref.ref(control)
    release(control)
    del control
    wait_until(lambda: source_stats()[count_key] >= before + 1, "the control arrived")
    return control_ref


def release_through_an_exec(control):
    """Attaches `control` to a graph whose exec holds the last reference, then destroys both: CUDA runs the
    user object's destructor on its own thread."""
    from cuda.bindings import driver

    graph = check(driver.cuGraphCreate(0))
    cuda_reclaim.keep_alive(graph, control)
    executable = check(driver.cuGraphInstantiate(graph, 0))
    check(driver.cuGraphDestroy(graph))
    check(driver.cuGraphExecDestroy(executable))


def check(result):
    """cuda.bindings calls return (CUresult, *values)."""
    from cuda.bindings import driver

    error, *values = result
    assert error == driver.CUresult.CUDA_SUCCESS, error
    return values[0] if len(values) == 1 else (values or None)


class Token:
    pass


def test_kernel_argument_lives_until_the_exec_is_destroyed_and_cuda_runs_the_destructor(device, kernels, quiet):
    from cuda.core import LaunchConfig
    from cuda.core.graph import GraphDefinition

    _, fill = kernels
    stream = device.create_stream()
    buffer = device.allocate(4 * 32, stream=stream)
    stream.sync()
    buffer_ref = weakref.ref(buffer)
    token = Token()
    token_ref = weakref.ref(token)
    before = source_stats()

    definition = GraphDefinition()
    definition.launch(LaunchConfig(grid=1, block=32), fill, buffer, ctypes.c_int(7), cycles_for(device, 0.01))
    cuda_reclaim.keep_alive(definition, buffer, token)  # the kernel's argument and its owner
    executable = definition.instantiate()
    del buffer, token, definition
    gc.collect()
    cuda_reclaim.drain()
    assert token_ref() is not None and buffer_ref() is not None, "the executable graph keeps them"

    executable.launch(stream)
    stream.sync()
    gc.collect()
    cuda_reclaim.drain()
    assert token_ref() is not None, "still alive while the executable graph exists"

    executable.close()
    wait_until(lambda: source_stats()["graph_user_objects"] > before["graph_user_objects"], "a user object came back")
    after = source_stats()
    main = threading.main_thread().ident
    print(f"destructor ran on thread {after['last_destructor_thread']:#x}; main thread {main:#x}")
    assert after["last_destructor_thread"] not in (0, main), "CUDA ran the destructor on its own thread"
    assert token_ref() is not None, "pushed by CUDA's thread, not released there"
    assert cuda_reclaim.drain() == 1
    gc.collect()
    assert token_ref() is None
    assert conserved(cuda_reclaim.stats())


def test_graph_destroyed_without_instantiation_runs_the_destructor_on_the_caller_which_only_pushes(device, quiet):
    from cuda.bindings import driver

    before = source_stats()
    graph = check(driver.cuGraphCreate(0))
    token = Token()
    ref = weakref.ref(token)
    cuda_reclaim.keep_alive(graph, token)
    del token
    check(driver.cuGraphDestroy(graph))
    after = source_stats()
    print(f"destructor thread {after['last_destructor_thread']:#x}; this thread {threading.get_ident():#x}")
    assert after["graph_user_objects"] == before["graph_user_objects"] + 1, "ran inside cuGraphDestroy"
    assert after["last_destructor_thread"] == threading.get_ident()
    assert ref() is not None and cuda_reclaim.pending() == 1, "it only pushed, even with the GIL held here"
    assert cuda_reclaim.drain() == 1 and ref() is None


def test_clone_and_instantiate_keep_the_reference(device, quiet):
    from cuda.bindings import driver

    before = source_stats()["graph_user_objects"]
    graph = check(driver.cuGraphCreate(0))
    check(driver.cuGraphAddEmptyNode(graph, None, 0))
    token = Token()
    ref = weakref.ref(token)
    cuda_reclaim.keep_alive(driver.CUgraph(int(graph)), token)
    del token
    clone = check(driver.cuGraphClone(graph))
    executable = check(driver.cuGraphInstantiate(graph, 0))
    check(driver.cuGraphDestroy(graph))
    check(driver.cuGraphDestroy(clone))  # the clone's own reference goes: the exec still holds one
    # A destructor that ran too early would have been run by CUDA's thread before this control's.
    control = destructors_run_on_cudas_thread("graph_user_objects", release_through_an_exec)
    gc.collect()
    assert cuda_reclaim.drain() == 1 and control() is None
    assert ref() is not None, "the executable graph still holds the user object"
    assert source_stats()["graph_user_objects"] == before + 1, "only the control arrived"
    check(driver.cuGraphExecDestroy(executable))
    wait_until(lambda: source_stats()["graph_user_objects"] == before + 2, "two user objects came back")
    assert cuda_reclaim.drain() == 1 and ref() is None


def test_graph_builder_while_building_and_after_end_building(device, kernels, quiet):
    from cuda.core import LaunchConfig, launch

    spin, _ = kernels
    stream = device.create_stream()
    before = source_stats()["graph_user_objects"]
    builder = stream.create_graph_builder().begin_building()
    launch(builder, LaunchConfig(grid=1, block=1), spin, cycles_for(device, 0.001))
    during, after_end = Token(), Token()
    refs = [weakref.ref(during), weakref.ref(after_end)]
    cuda_reclaim.keep_alive(builder, during)  # the graph under capture
    builder.end_building()
    cuda_reclaim.keep_alive(builder, after_end)  # its graph_definition
    graph = builder.complete()
    with pytest.raises(TypeError, match="CUgraphExec"):
        cuda_reclaim.keep_alive(graph, Token())
    del during, after_end
    graph.launch(stream)
    stream.sync()
    builder.close()
    gc.collect()
    cuda_reclaim.drain()
    assert all(r() is not None for r in refs)
    graph.close()
    wait_until(lambda: source_stats()["graph_user_objects"] == before + 2, "two user objects came back")
    assert cuda_reclaim.drain() == 2
    assert all(r() is None for r in refs)


def test_churn_of_ten_thousand_graphs_releases_every_object(device, quiet):
    from cuda.bindings import driver

    count = 10_000
    before = cuda_reclaim.stats()
    refs = []
    for i in range(count):
        graph = check(driver.cuGraphCreate(0))
        token = Token()
        refs.append(weakref.ref(token))
        cuda_reclaim.keep_alive(graph, token, i)
        if i % 2:
            executable = check(driver.cuGraphInstantiate(graph, 0))
            check(driver.cuGraphDestroy(graph))
            check(driver.cuGraphExecDestroy(executable))
        else:
            check(driver.cuGraphDestroy(graph))
        del token
    wait_until(lambda: source_stats()["graph_user_objects"] - before["graph_user_objects"] == count,
               f"{count} user objects came back")
    released = 0
    while cuda_reclaim.pending():
        released += cuda_reclaim.drain()
    gc.collect()
    assert released == count
    assert all(r() is None for r in refs)
    after = cuda_reclaim.stats()
    assert after["pending"] == 0
    assert after["graph_user_objects"] - before["graph_user_objects"] == count
    assert after["direct_pushes"] == before["direct_pushes"]
    assert conserved(after)


def test_keep_alive_until_releases_only_after_the_stream_work_completes(device, kernels, quiet):
    spin, _ = kernels
    from cuda.core import LaunchConfig, launch

    stream, idle_stream = device.create_stream(), device.create_stream()
    before = source_stats()["stream_host_functions"]
    launch(stream, LaunchConfig(grid=1, block=1), spin, cycles_for(device, 0.5))
    token = Token()
    ref = weakref.ref(token)
    start = time.monotonic()
    cuda_reclaim.keep_alive_until(stream, token)
    del token
    # A host function on an idle stream runs at once on CUDA's thread: once it arrived, a premature
    # release of the token would have arrived too.
    control = destructors_run_on_cudas_thread(
        "stream_host_functions", lambda obj: cuda_reclaim.keep_alive_until(idle_stream, obj)
    )
    gc.collect()
    assert cuda_reclaim.drain() == 1 and control() is None
    assert ref() is not None, "the kernel is still running"
    assert source_stats()["stream_host_functions"] == before + 1, "only the control arrived"
    wait_until(lambda: source_stats()["stream_host_functions"] == before + 2, "two host functions came back")
    elapsed = time.monotonic() - start
    assert cuda_reclaim.drain() == 1 and ref() is None
    host_thread = source_stats()["last_host_function_thread"]
    print(f"released after {elapsed:.3f} s; host function ran on thread {host_thread:#x}")
    assert host_thread not in (0, threading.main_thread().ident)
    stream.sync()


def test_failed_retain_on_the_real_driver_accounts_for_the_reference_exactly_once(device, quiet):
    token = Token()
    base = sys.getrefcount(token)
    before = source_stats()
    with pytest.raises(cuda_reclaim.DriverError, match="cuGraphRetainUserObject failed") as raised:
        _reclaim._keep_alive_graph(0, token)  # a null CUgraph: retain fails after the user object exists
    print(f"{raised.value}; refcount now {sys.getrefcount(token) - base:+d}")
    wait_until(lambda: sys.getrefcount(token) == base or cuda_reclaim.pending() == 1,
               "the token's reference is dropped or queued")
    cuda_reclaim.drain()
    after = source_stats()
    assert sys.getrefcount(token) == base
    handled = (after["withdrawn"] - before["withdrawn"]) + (after["graph_user_objects"] - before["graph_user_objects"])
    assert handled == 1, (before, after)


@pytest.mark.parametrize("wait_after_close", [False, True], ids=["exit-at-once", "sync-after-close"])
def test_exit_with_a_running_kernel_and_a_live_graph_exec_is_clean_and_counted(device, wait_after_close):
    result = run_child_script(
        "exit_with_running_kernel.py",
        "graph",
        *(["--sync-after-close"] if wait_after_close else []),
        env={"CUDA_RECLAIM_REPORT": "1"},
        timeout=120,
    )
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes"
    assert report["pending"] == 0
    assert report["released"] >= 3
    assert report["handed_over"] == report["released"] + report["leaked_after_close"]
    if wait_after_close:
        assert report["leaked_after_close"] >= 2, "the exec's user object and the host function, after close"
