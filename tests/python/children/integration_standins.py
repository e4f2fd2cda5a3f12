"""Stand-ins for the classes that cuda_reclaim.integrations patches, with the libraries' own signatures:
numba-cuda 0.30's ``numba.cuda.cudadrv.driver.Stream``, CuPy 14's ``cupy.cuda.stream._BaseStream`` (and its
subclass ``ExternalStream``), and cuda.core 1.2's ``cuda.core.graph`` ``GraphDefinition``, ``GraphNode`` (a
``MemsetNode`` subclass) and ``GraphBuilder``. register() puts them in sys.modules under the libraries'
module names (none of the libraries is installed where these tests run). Their own methods only record that
they were called (in ``OWN_CALLS``): what the integrations must not reach while installed and must reach
again after uninstall()."""

import sys
import types

OWN_CALLS = []


class NumbaStream:
    """numba.cuda.cudadrv.driver.Stream: a cuda.bindings CUstream (an int here) in ``handle``."""

    def __init__(self, handle, finalizer=None, external=False):
        self.handle = handle
        self.external = external

    def add_callback(self, callback, arg=None):
        OWN_CALLS.append(("numba add_callback", callback, arg))

    def async_done(self):
        OWN_CALLS.append(("numba async_done",))


class CupyBaseStream:
    """cupy.cuda.stream._BaseStream: the raw handle in ``ptr``; ``is_capturing()``."""

    def __init__(self, ptr, device_id=0):
        self.ptr = ptr
        self.device_id = device_id
        self.capturing = False

    def is_capturing(self):
        return self.capturing

    def add_callback(self, callback, arg):
        OWN_CALLS.append(("cupy add_callback", callback, arg))

    def launch_host_func(self, callback, arg):
        OWN_CALLS.append(("cupy launch_host_func", callback, arg))


class CupyExternalStream(CupyBaseStream):
    """cupy.cuda.ExternalStream: inherits both methods."""


# The nodes of each graph, by the graph's handle: the driver's node list (cuGraphGetNodes), which the fake
# driver does not keep; the scenarios fill it in as nodes are added.
NODES = {}


class GraphDefinition:
    """cuda.core.graph.GraphDefinition: ``handle``, ``nodes()``, ``callback(fn, *, user_data=None)``."""

    def __init__(self, handle=0):
        self.handle = handle

    def nodes(self):
        return {GraphNode(self, node) for node in NODES.get(self.handle, ())}

    def callback(self, fn, *, user_data=None):
        OWN_CALLS.append(("GraphDefinition.callback", fn, user_data))
        return MemsetNode(self, None)


class GraphNode:
    """cuda.core.graph.GraphNode: ``graph``, ``handle`` (None for a graph's entry), ``callback``."""

    def __init__(self, graph=None, handle=None):
        self.graph = graph
        self.handle = handle

    def __eq__(self, other):
        return isinstance(other, GraphNode) and (self.graph, self.handle) == (other.graph, other.handle)

    def __hash__(self):
        return hash(self.handle)

    def callback(self, fn, *, user_data=None):
        OWN_CALLS.append(("GraphNode.callback", fn, user_data))
        return MemsetNode(self.graph, None)


class MemsetNode(GraphNode):
    """A node kind that inherits GraphNode.callback."""


class GraphBuilder:
    def callback(self, fn, *, user_data=None):
        OWN_CALLS.append(("GraphBuilder.callback", fn, user_data))


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def register():
    """The stand-in modules in sys.modules, under the libraries' names."""
    _module("numba")
    _module("numba.cuda")
    _module("numba.cuda.cudadrv")
    _module("numba.cuda.cudadrv.driver", Stream=NumbaStream)
    _module("cupy")
    _module("cupy.cuda", Stream=CupyBaseStream, ExternalStream=CupyExternalStream)
    _module("cupy.cuda.stream", _BaseStream=CupyBaseStream, ExternalStream=CupyExternalStream)
    _module("cuda")
    graph = _module(
        "cuda.core.graph",
        GraphDefinition=GraphDefinition,
        GraphNode=GraphNode,
        MemsetNode=MemsetNode,
        GraphBuilder=GraphBuilder,
    )
    _module("cuda.core", graph=graph)
