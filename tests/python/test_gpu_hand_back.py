"""The hand-back barrier on a real GPU (pytest marker `gpu`; skipped with the reason where there is no
driver): wait_handed_back() returns once CUDA's own thread has run the destructor of a destroyed graph exec,
and waits for a stream behind a long kernel; the per-attachment and asyncio forms wake on the same
hand-backs."""

import asyncio
import threading
import weakref

import pytest

import cuda_reclaim
from conftest import conserved
from cuda_reclaim import _reclaim
from gpu_support import compile_kernels, cycles_for

pytestmark = pytest.mark.gpu


class Token:
    pass


@pytest.fixture(scope="module")
def spin(device):
    return compile_kernels(device).get_kernel("spin")


def check(result):
    error, *values = result
    assert int(error) == 0, error
    return values[0] if len(values) == 1 else values


def launch_spin(stream, spin, device, seconds):
    from cuda.core import LaunchConfig, launch

    launch(stream, LaunchConfig(grid=1, block=1), spin, cycles_for(device, seconds))


def test_wait_returns_once_cuda_ran_the_destructor_of_a_destroyed_exec(device, drained):
    from cuda.bindings import driver

    before = {**cuda_reclaim.stats(), **_reclaim._diagnostics()}
    graph = check(driver.cuGraphCreate(0))
    token = Token()
    token_ref = weakref.ref(token)
    attachment = cuda_reclaim.keep_alive(graph, token)
    del token
    executable = check(driver.cuGraphInstantiate(graph, 0))
    check(driver.cuGraphDestroy(graph))
    assert cuda_reclaim.wait_handed_back(timeout=0.05) is False, "the exec still holds the user object"
    assert not attachment.done()
    # CUDA runs the destructor inside this call, on this thread, or later on its own thread: both are seen.
    check(driver.cuGraphExecDestroy(executable))
    assert cuda_reclaim.wait_handed_back(timeout=30) is True
    after = {**cuda_reclaim.stats(), **_reclaim._diagnostics()}
    assert after["graph_user_objects"] == before["graph_user_objects"] + 1, "the destructor ran"
    print(f"destructor thread {after['last_destructor_thread']:#x}, main {threading.main_thread().ident:#x}")
    assert after["last_destructor_thread"] != 0, "the destructor recorded its thread"
    assert attachment.done() and token_ref() is not None, "handed back, released by the next drain"
    del attachment
    assert cuda_reclaim.flush() == 1 and token_ref() is None
    assert conserved(cuda_reclaim.stats())


def test_a_stream_behind_a_long_kernel_is_waited_for(device, spin, drained):
    stream = device.create_stream()
    launch_spin(stream, spin, device, 0.5)
    token = Token()
    token_ref = weakref.ref(token)
    until = cuda_reclaim.keep_alive_until(stream, token)
    future = cuda_reclaim.launch_host_func(stream, lambda: "after the kernel")
    del token
    assert cuda_reclaim.wait_handed_back(timeout=0.01) is False, "the kernel is still running"
    assert until.wait(timeout=30) is True
    assert cuda_reclaim.wait_handed_back(timeout=30) is True
    assert not future.done(), "handed back is not run: flush runs it"
    del until
    assert cuda_reclaim.flush() == 2
    assert future.result(timeout=0) == "after the kernel" and token_ref() is None
    stream.sync()


def test_asyncio_handed_back_wakes_on_a_stream_hand_back(device, spin, drained):
    stream = device.create_stream()

    async def main():
        launch_spin(stream, spin, device, 0.2)
        cuda_reclaim.keep_alive_until(stream, Token())
        writes = _reclaim._hand_back_stats()["listener_writes"]
        assert await asyncio.wait_for(cuda_reclaim.asyncio.handed_back(), 30) is True
        assert _reclaim._hand_back_stats()["listener_writes"] >= writes
        return await cuda_reclaim.asyncio.flush()

    assert asyncio.run(main()) == 1
    stream.sync()
