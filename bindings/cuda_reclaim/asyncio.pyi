# Type stubs for cuda_reclaim.asyncio (asyncio.py); checked by //tests/packaging:typing_test.

import asyncio as _asyncio
from typing import Literal

__all__ = ["DrainHandle", "install"]

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
