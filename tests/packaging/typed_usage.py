"""A user's script, for mypy --strict: every public name of cuda_reclaim, used as documented.

Type-checked by typing_test.sh, never run. assert_type pins what each call returns (an Any from a missing
or loose stub fails it), and each `type: ignore[...]` marks a misuse the stubs must reject: --strict warns
about an ignore that silences nothing, so a stub that accepted the misuse fails the check.
"""

import asyncio
from concurrent.futures import Future
from typing import Literal

from typing_extensions import assert_type

import cuda_reclaim
from cuda_reclaim import asyncio as reclaim_asyncio


class Buffer:
    def __del__(self) -> None:
        print("released")


def counters() -> int:
    assert_type(cuda_reclaim.__version__, str)
    assert_type(cuda_reclaim.ABI_VERSION, int)
    gauges = [key for key, counter in cuda_reclaim.COUNTERS.items() if counter.kind == "gauge"]
    assert_type(gauges, list[str])
    assert_type(cuda_reclaim.COUNTERS["pending"].source, Literal["queue", "origin", "cuda", "calls"])
    assert_type(cuda_reclaim.COUNTERS["pending"].help, str)
    stats = cuda_reclaim.stats()
    assert_type(stats, dict[str, int])
    return stats["handed_over"] - stats["released"] - stats["pending"]


def hand_over_and_drain() -> None:
    previous = cuda_reclaim.set_auto_drain("off")
    assert_type(previous, Literal["thread", "off"])
    assert_type(cuda_reclaim.get_auto_drain(), Literal["thread", "off", "closed"])
    assert_type(cuda_reclaim.defer_release(Buffer()), bool)
    assert_type(cuda_reclaim.pending(), int)
    assert_type(cuda_reclaim.drain(), int)
    assert_type(cuda_reclaim.drain(16), int)
    assert_type(cuda_reclaim.drain(max_items=None, timeout=0.5), int)
    assert_type(cuda_reclaim.fileno(), int)
    assert_type(cuda_reclaim.is_closed(), bool)
    assert_type(cuda_reclaim.get_include(), str)
    cuda_reclaim.set_auto_drain(previous)
    cuda_reclaim.set_auto_drain("sometimes")  # type: ignore[arg-type]
    cuda_reclaim.drain("all")  # type: ignore[arg-type]
    cuda_reclaim.defer_release()  # type: ignore[call-arg]


def keep_alive_on_cuda(graph: object, stream: int, kernel_args: bytes) -> None:
    try:
        attachment = cuda_reclaim.keep_alive(graph, kernel_args, Buffer())
        assert_type(attachment, cuda_reclaim.Attachment)
        assert_type(attachment.wait(timeout=1.0), bool)
        assert_type(cuda_reclaim.keep_alive_until(stream, kernel_args).done(), bool)
        assert_type(cuda_reclaim.wait_handed_back(0.5), bool)
        assert_type(cuda_reclaim.flush(), int)
    except cuda_reclaim.DriverError as error:
        assert_type(error, cuda_reclaim.DriverError)
        print(f"no usable CUDA driver: {error}")


def add(a: int, b: int) -> int:
    return a + b


def callbacks_from_cuda(graph: object, stream: int) -> None:
    future = cuda_reclaim.launch_host_func(stream, add, 1, b=2)
    assert_type(future, Future[int])
    assert_type(future.result(timeout=1.0), int)
    node = cuda_reclaim.add_host_node(graph, print, "fired", dependencies=[])
    assert_type(node, cuda_reclaim.NodeHandle)
    cuda_reclaim.add_host_node(graph, print, dependencies=[node])
    cuda_reclaim.launch_host_func(stream)  # type: ignore[call-arg]
    cuda_reclaim.add_host_node(graph, "print")  # type: ignore[arg-type]


async def await_streams(stream: object) -> int:
    assert_type(await reclaim_asyncio.stream_reached(stream), None)
    result = await reclaim_asyncio.run_when_reached(stream, len, "abc")
    assert_type(result, int)
    assert_type(await reclaim_asyncio.handed_back(), bool)
    assert_type(await reclaim_asyncio.flush(), int)
    return result


async def serve() -> None:
    handle = cuda_reclaim.asyncio.install(max_items=1024)
    assert_type(handle, reclaim_asyncio.DrainHandle)
    assert_type(reclaim_asyncio.install(asyncio.get_running_loop(), interval=0.1), reclaim_asyncio.DrainHandle)
    assert_type(handle.drained, int)
    assert_type(handle.cancelled, bool)
    assert_type(handle.mode, Literal["reader", "timer"] | None)
    handle.cancel()
    cuda_reclaim.asyncio.install(max_items="many")  # type: ignore[arg-type]


def shut_down() -> int:
    released = cuda_reclaim.close()
    assert_type(released, int)
    return released


if __name__ == "__main__":
    hand_over_and_drain()
    asyncio.run(serve())
    print(counters(), shut_down())
