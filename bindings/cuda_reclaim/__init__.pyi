# Type stubs for the cuda_reclaim package's public names (documented in __init__.py and docs/guide.md).
# //tests/packaging:typing_test checks them with mypy.stubtest against the package and with mypy --strict
# against a script that calls every public function.

from collections.abc import Mapping
from concurrent.futures import Future
from types import MappingProxyType
from typing import Any, Callable, Final, Iterable, Literal, NamedTuple, TextIO, TypeAlias, TypeVar

from . import asyncio as asyncio
from ._reclaim import (
    ABI_VERSION as ABI_VERSION,
    Attachment as Attachment,
    DriverError as DriverError,
    drain as drain,
    fileno as fileno,
    is_closed as is_closed,
    pending as pending,
    trim as trim,
)

__all__ = [
    "ABI_VERSION",
    "Attachment",
    "COUNTERS",
    "DriverError",
    "NodeHandle",
    "add_host_node",
    "add_host_node_ordered",
    "close",
    "conserved",
    "defer_release",
    "drain",
    "fileno",
    "flush",
    "get_auto_drain",
    "get_include",
    "hand_back_mark",
    "is_closed",
    "keep_alive",
    "keep_alive_until",
    "launch_host_func",
    "launch_host_func_ordered",
    "pending",
    "set_auto_drain",
    "show_config",
    "stats",
    "trim",
    "wait_handed_back",
]

__version__: Final[str]

_AutoDrainMode: TypeAlias = Literal["thread", "off"]
# What get_auto_drain() reports: a mode, or "closed" once close() began.
_AutoDrainState: TypeAlias = Literal["thread", "off", "closed"]

# One key of stats() (RECLAIM_COUNTER_TABLE of cuda_reclaim/reclaim_abi.h defines every one).
class _Counter(NamedTuple):
    kind: Literal["counter", "gauge", "high_water_mark"]
    source: Literal["queue", "origin", "cuda", "calls"]
    help: str
    description: str

COUNTERS: Final[MappingProxyType[str, _Counter]]

_T = TypeVar("_T")

def defer_release(obj: object) -> bool: ...
def close() -> int: ...
def stats() -> dict[str, int]: ...
def conserved(counters: Mapping[str, int] | None = None) -> bool: ...
def get_include() -> str: ...
def set_auto_drain(mode: _AutoDrainMode) -> _AutoDrainMode: ...
def get_auto_drain() -> _AutoDrainState: ...
def show_config(file: TextIO | None = None) -> None: ...
def wait_handed_back(timeout: float | None = None, *, since: int | None = None) -> bool: ...
def flush(timeout: float | None = None, *, since: int | None = None) -> int: ...
def hand_back_mark() -> int: ...

# `graph`: a cuda.core GraphDefinition or GraphBuilder, a cuda.bindings CUgraph, or an int handle;
# `stream`: a cuda.core Stream, a cuda.bindings CUstream, an object with __cuda_stream__, or an int.
# Typed as object: neither cuda.core nor cuda.bindings is a dependency of this package.
def keep_alive(graph: object, *objs: object) -> Attachment: ...
def keep_alive_until(stream: object, *objs: object) -> Attachment: ...
# Python calls from CUDA (docs/callbacks.md): `fn` runs in a drain, never on CUDA's thread.
def launch_host_func(stream: object, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]: ...
# In stream order: CUDA's thread waits until a drain ran fn (docs/callbacks.md).
def launch_host_func_ordered(stream: object, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]: ...
# The CUgraphNode that add_host_node() added: an int, with a repr of its own.
class NodeHandle(int):
    def __new__(cls, node: int, /) -> NodeHandle: ...
    def __del__(self) -> None: ...  # forgets the node's Attachment
    def done(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...

# `dependencies`: cuda.core GraphNodes, cuda.bindings CUgraphNodes, NodeHandles or int handles.
def add_host_node(
    graph: object, fn: Callable[..., object], /, *args: Any, dependencies: Iterable[object] = (), **kwargs: Any
) -> NodeHandle: ...
def add_host_node_ordered(
    graph: object, fn: Callable[..., object], /, *args: Any, dependencies: Iterable[object] = (), **kwargs: Any
) -> NodeHandle: ...
