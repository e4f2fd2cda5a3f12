# Type stubs for cuda_reclaim.metrics (metrics.py); checked by //tests/packaging:typing_test.

from typing import Any, Iterator

__all__ = ["ReclaimCollector", "register"]

class ReclaimCollector:
    def collect(self) -> Iterator[Any]: ...
    def describe(self) -> Iterator[Any]: ...

def register(registry: Any = None) -> ReclaimCollector: ...
