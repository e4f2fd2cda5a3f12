# Type stubs for cuda_reclaim.asyncio (asyncio.py); checked by //tests/packaging:typing_test.

import asyncio as _asyncio
from typing import Any, Callable, Literal, TypeVar

__all__ = ["DrainHandle", "install", "run_when_reached", "stream_reached"]

_T = TypeVar("_T")

class DrainHandle:
    mode: Literal["reader", "timer"] | None
    drained: int
    def __init__(self, loop: _asyncio.AbstractEventLoop, max_items: int | None, interval: float) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

def install(
    loop: _asyncio.AbstractEventLoop | None = None, *, max_items: int | None = 4096, interval: float = 0.05
) -> DrainHandle: ...

# `stream`: a cuda.core Stream, a cuda.bindings CUstream, an object with __cuda_stream__, or an int.
async def stream_reached(stream: object) -> None: ...
async def run_when_reached(stream: object, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T: ...
