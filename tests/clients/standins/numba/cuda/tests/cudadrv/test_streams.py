"""Stand-in for numba-cuda's test_streams.py: its class switched off by a skip decorator, its seven test names."""

import asyncio
import functools
import threading

from numba import cuda
from numba.cuda.testing import CUDATestCase, skip_on_cudasim, unittest


def with_asyncio_loop(f):
    @functools.wraps(f)
    def runner(*args, **kwds):
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(f(*args, **kwds))
        finally:
            loop.close()

    return runner


@unittest.skip("switched off upstream")
@skip_on_cudasim("CUDA Driver API unsupported in the simulator")
class TestCudaStream(CUDATestCase):
    def test_add_callback(self):
        event = threading.Event()
        cuda.stream().add_callback(lambda stream, status, arg: arg.set(), event)
        self.assertTrue(event.wait(30.0))

    def test_add_callback_with_default_arg(self):
        seen = []
        event = threading.Event()
        cuda.stream().add_callback(lambda stream, status, arg: (seen.append(arg), event.set()))
        self.assertTrue(event.wait(30.0))
        self.assertEqual(seen, [None])

    @with_asyncio_loop
    async def test_async_done(self):
        stream = cuda.stream()
        self.assertIs(await stream.async_done(), stream)

    @with_asyncio_loop
    async def test_parallel_tasks(self):
        streams = [cuda.stream() for _ in range(4)]
        self.assertEqual(await asyncio.gather(*(s.async_done() for s in streams)), streams)

    @with_asyncio_loop
    async def test_multiple_async_done(self):
        stream = cuda.stream()
        self.assertEqual(await asyncio.gather(*(stream.async_done() for _ in range(4))), [stream] * 4)

    @with_asyncio_loop
    async def test_multiple_async_done_multiple_streams(self):
        streams = [cuda.stream() for _ in range(4)]
        self.assertEqual(set(await asyncio.gather(*(s.async_done() for s in streams))), set(streams))

    @with_asyncio_loop
    async def test_cancelled_future(self):
        stream = cuda.stream()
        first, second = stream.async_done(), stream.async_done()
        first.cancel()
        await second
        self.assertTrue(first.cancelled())
