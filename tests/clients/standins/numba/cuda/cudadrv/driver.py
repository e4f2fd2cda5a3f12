"""Stand-in for numba.cuda.cudadrv.driver: ``Stream`` with numba-cuda 0.30's signatures. Its add_callback reads
``handle.value``, as numba-cuda 0.30's does, which a cuda.bindings handle (an int here) lacks."""

import asyncio


class Stream:
    def __init__(self, handle, finalizer=None, external=False):
        self.handle = handle
        self.external = external

    def add_callback(self, callback, arg=None):
        handle = self.handle.value  # AttributeError, before any callback runs
        raise AssertionError(f"unreachable: {handle}")

    def async_done(self) -> asyncio.futures.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def callback(stream, status, future):
            loop.call_soon_threadsafe(future.set_result, self)

        self.add_callback(callback, future)
        return future
