"""keep_alive / keep_alive_until without a GPU: argument checking, handle extraction from cuda.core and
cuda.bindings objects, the no-driver errors, and the whole hand-over path against the fake libcuda
(tests/graph/fake_libcuda.cc), including failures after CUDA took the reference."""

import os
import sys

import pytest

import cuda_reclaim
from conftest import run_child, run_child_script
from cuda_reclaim import _graph

FAKE_LIBCUDA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "graph", "fake_libcuda.so")


def run_with_fake_driver(code, **env):
    if not os.path.exists(FAKE_LIBCUDA):
        pytest.skip(f"fake driver not built: {FAKE_LIBCUDA}")
    prelude = f"""
import ctypes, sys, weakref
import cuda_reclaim
from cuda_reclaim import _reclaim
fake = ctypes.CDLL({FAKE_LIBCUDA!r})
for name in ("fake_cuda_graph_create", "fake_cuda_failing_graph", "fake_cuda_capturing_stream",
             "fake_cuda_failing_stream"):
    getattr(fake, name).restype = ctypes.c_void_p
fake.fake_cuda_graph_destroy.argtypes = [ctypes.c_void_p]
fake.fake_cuda_capturing_stream.argtypes = [ctypes.c_void_p]
cuda_reclaim.set_auto_drain("off")
class P: pass
"""
    result = run_child(prelude + code, env={"CUDA_RECLAIM_LIBCUDA": FAKE_LIBCUDA, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    return result


# --- argument checking ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [object(), "graph", 1.5, True, None, [1]])
def test_keep_alive_refuses_what_is_not_a_graph_and_names_what_is_accepted(bad):
    with pytest.raises(TypeError, match=r"GraphDefinition or GraphBuilder.*CUgraph.*int"):
        cuda_reclaim.keep_alive(bad, object())


@pytest.mark.parametrize("bad", [object(), "stream", 2.0, False])
def test_keep_alive_until_refuses_what_is_not_a_stream_and_names_what_is_accepted(bad):
    with pytest.raises(TypeError, match=r"cuda.core Stream.*CUstream.*__cuda_stream__"):
        cuda_reclaim.keep_alive_until(bad, object())


def test_keep_alive_needs_an_object_to_keep():
    with pytest.raises(TypeError, match="at least one object"):
        cuda_reclaim.keep_alive(1234)
    with pytest.raises(TypeError, match="at least one object"):
        cuda_reclaim.keep_alive_until(0)


@pytest.mark.parametrize("handle", [0, -1, 1 << 64])
def test_keep_alive_refuses_null_and_out_of_range_handles(handle):
    with pytest.raises(ValueError, match="handle"):
        cuda_reclaim.keep_alive(handle, object())


def test_keep_alive_until_refuses_out_of_range_stream_handles():
    with pytest.raises(ValueError, match="handle"):
        cuda_reclaim.keep_alive_until(-5, object())


def test_private_entry_points_check_their_arguments():
    from cuda_reclaim import _reclaim

    with pytest.raises(TypeError, match="exactly 2 arguments"):
        _reclaim._keep_alive_graph(1)
    with pytest.raises(TypeError, match="must be an int"):
        _reclaim._keep_alive_stream("1", object())
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        _reclaim._keep_alive_capture(-1, object())


# --- handle extraction ------------------------------------------------------------------------------------


def test_int_handles_pass_through():
    assert _graph.graph_target(0x1234) == ("graph", 0x1234)
    assert _graph.stream_handle(0) == 0  # the legacy default stream
    assert _graph.stream_handle(0xABC) == 0xABC


def test_cuda_bindings_handles_are_extracted():
    driver = pytest.importorskip("cuda.bindings.driver")
    assert _graph.graph_target(driver.CUgraph(0x5000)) == ("graph", 0x5000)
    assert _graph.stream_handle(driver.CUstream(0x6000)) == 0x6000
    with pytest.raises(ValueError, match="null CUgraph"):
        _graph.graph_target(driver.CUgraph(0))


def test_executable_graphs_are_refused_with_what_to_pass_instead():
    driver = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(TypeError, match=r"CUgraphExec.*GraphDefinition.*GraphBuilder"):
        cuda_reclaim.keep_alive(driver.CUgraphExec(0x7000), object())


def test_cuda_core_types_are_recognised():
    core = pytest.importorskip("cuda.core")
    # Instances made without a driver (no __init__): null handles, which are refused as such.
    definition = core.graph.GraphDefinition.__new__(core.graph.GraphDefinition)
    with pytest.raises(ValueError, match="GraphDefinition.handle is a null CUgraph"):
        cuda_reclaim.keep_alive(definition, object())
    executable = core.graph.Graph.__new__(core.graph.Graph)
    with pytest.raises(TypeError, match=r"got a Graph: .*CUgraphExec.*GraphDefinition"):
        cuda_reclaim.keep_alive(executable, object())
    stream = core.Stream.__new__(core.Stream)
    assert _graph.stream_handle(stream) == int(stream.handle)


def test_cuda_stream_protocol_is_accepted():
    class Foreign:
        def __cuda_stream__(self):
            return (0, 0x4242)

    assert _graph.stream_handle(Foreign()) == 0x4242


# --- no driver ----------------------------------------------------------------------------------------------


def test_missing_driver_raises_driver_error_naming_the_library_and_keeps_nothing():
    result = run_child(
        """
        import sys, cuda_reclaim
        cuda_reclaim.set_auto_drain("off")
        obj = object()
        base = sys.getrefcount(obj)
        for call in (lambda: cuda_reclaim.keep_alive(0x1234, obj), lambda: cuda_reclaim.keep_alive_until(0, obj)):
            try:
                call()
            except cuda_reclaim.DriverError as error:
                assert isinstance(error, RuntimeError)
                assert "/nonexistent/libcuda.so.1" in str(error) and "NVIDIA driver" in str(error), error
            else:
                raise AssertionError("no DriverError")
        assert sys.getrefcount(obj) == base
        s = cuda_reclaim.stats()
        assert s["handed_over"] == 0 and s["pending"] == 0, s
        from cuda_reclaim import _reclaim
        info = _reclaim._driver_info()
        assert info["status"] == "library_missing", info
        print("ok")
        """,
        env={"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_driver_error_of_the_package_still_catches_after_the_extension_is_imported_again():
    result = run_child_script("reimport_driver_error.py", env={"CUDA_RECLAIM_LIBCUDA": "/nonexistent/libcuda.so.1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"


def test_driver_too_old_raises_driver_error_with_both_versions():
    run_with_fake_driver(
        """
try:
    cuda_reclaim.keep_alive(0x1234, P())
except cuda_reclaim.DriverError as error:
    assert "version 11.2" in str(error) and "11.3 or newer" in str(error), error
else:
    raise AssertionError("no DriverError")
assert _reclaim._driver_info()["status"] == "driver_too_old"
""",
        FAKE_CUDA_VERSION="11020",
    )


# --- the hand-over path, against the fake driver ----------------------------------------------------------


def test_objects_live_until_the_graph_is_destroyed_then_drain_releases_them():
    run_with_fake_driver(
        """
graph = fake.fake_cuda_graph_create()
a, b = P(), P()
refs = [weakref.ref(a), weakref.ref(b)]
cuda_reclaim.keep_alive(graph, a, b)
del a, b
assert all(r() is not None for r in refs)
assert cuda_reclaim.pending() == 0
fake.fake_cuda_graph_destroy(graph)
assert cuda_reclaim.pending() == 1  # one reference: the tuple of both
assert all(r() is not None for r in refs), "pushed, not released, on the destroying thread"
assert cuda_reclaim.drain() == 1
assert all(r() is None for r in refs)
s = cuda_reclaim.stats()
assert s["graph_user_objects"] == 1 and s["stream_host_functions"] == 0 and s["direct_pushes"] == 0, s
cuda_reclaim.defer_release(P())
cuda_reclaim.drain()
assert cuda_reclaim.stats()["direct_pushes"] == 1
"""
    )


def test_capturing_stream_attaches_to_the_graph_being_captured():
    run_with_fake_driver(
        """
graph = fake.fake_cuda_graph_create()
stream = fake.fake_cuda_capturing_stream(graph)
obj = P(); ref = weakref.ref(obj)
_reclaim._keep_alive_capture(stream, obj)
del obj
fake.fake_cuda_graph_destroy(graph)
assert cuda_reclaim.drain() == 1 and ref() is None
try:
    _reclaim._keep_alive_capture(0, P())
except cuda_reclaim.DriverError as error:
    assert "the stream is not capturing" in str(error), error
else:
    raise AssertionError("a stream that is not capturing has no graph")
"""
    )


def test_failed_retain_gives_the_reference_back_at_once():
    run_with_fake_driver(
        """
obj = P()
base = sys.getrefcount(obj)
try:
    cuda_reclaim.keep_alive(fake.fake_cuda_failing_graph(), obj)
except cuda_reclaim.DriverError as error:
    assert "cuGraphRetainUserObject failed with CUDA_ERROR_INVALID_VALUE" in str(error), error
else:
    raise AssertionError("no DriverError")
assert sys.getrefcount(obj) == base, "given back, not leaked"
assert cuda_reclaim.pending() == 0, "the destructor that ran inside the release did not push"
assert _reclaim._source_stats()["withdrawn"] == 1
assert cuda_reclaim.drain() == 0 and sys.getrefcount(obj) == base, "and not released twice"
"""
    )


def test_failed_retain_whose_destructor_runs_later_releases_exactly_once_through_the_queue():
    run_with_fake_driver(
        """
fake.fake_cuda_defer_destructors(1)
obj = P()
base = sys.getrefcount(obj)
try:
    cuda_reclaim.keep_alive(fake.fake_cuda_failing_graph(), obj)
except cuda_reclaim.DriverError as error:
    assert "CUDA releases the objects through the queue" in str(error), error
else:
    raise AssertionError("no DriverError")
assert sys.getrefcount(obj) == base + 1, "still CUDA's until its destructor runs"
assert fake.fake_cuda_run_deferred() == 1
assert cuda_reclaim.pending() == 1
assert cuda_reclaim.drain() == 1
assert sys.getrefcount(obj) == base
assert _reclaim._source_stats()["withdrawn"] == 0
"""
    )


def test_keep_alive_until_releases_after_the_stream_reaches_the_host_function():
    run_with_fake_driver(
        """
obj = P(); ref = weakref.ref(obj)
cuda_reclaim.keep_alive_until(0, obj)
del obj
assert ref() is not None and cuda_reclaim.pending() == 0
assert fake.fake_cuda_run_host_functions() == 1
assert cuda_reclaim.drain() == 1 and ref() is None
s = cuda_reclaim.stats()
assert s["stream_host_functions"] == 1 and s["graph_user_objects"] == 0 and s["direct_pushes"] == 0, s
"""
    )


def test_keep_alive_until_failures_give_the_reference_back():
    run_with_fake_driver(
        """
obj = P()
base = sys.getrefcount(obj)
for stream, expected in ((fake.fake_cuda_failing_stream(), "CUDA_ERROR_INVALID_HANDLE"),
                         (fake.fake_cuda_capturing_stream(fake.fake_cuda_graph_create()), "capturing")):
    try:
        cuda_reclaim.keep_alive_until(stream, obj)
    except cuda_reclaim.DriverError as error:
        assert expected in str(error), error
    else:
        raise AssertionError("no DriverError")
    assert sys.getrefcount(obj) == base
assert fake.fake_cuda_run_host_functions() == 0
assert cuda_reclaim.pending() == 0
"""
    )


def test_keep_alive_starts_the_automatic_drain():
    run_with_fake_driver(
        """
from cuda_reclaim import _auto
cuda_reclaim.set_auto_drain("thread")
assert not _auto.is_thread_running()
graph = fake.fake_cuda_graph_create()
obj = P(); ref = weakref.ref(obj)
cuda_reclaim.keep_alive(graph, obj)
assert _auto.is_thread_running()
del obj
fake.fake_cuda_graph_destroy(graph)
import time
deadline = time.monotonic() + 10
while ref() is not None and time.monotonic() < deadline:
    time.sleep(0.01)
assert ref() is None, "the drain thread released it"
"""
    )
