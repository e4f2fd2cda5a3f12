"""Child of test_graph_api.py: one scenario per run, named by the first argument. Most run against the
fake libcuda (tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names; the others against a
CUDA_RECLAIM_LIBCUDA that does not exist (no driver)."""

import ctypes
import gc
import importlib
import os
import sys
import threading
import weakref

import cuda_reclaim
from cuda_reclaim import _reclaim

import scenario

MISSING_LIBCUDA = "/nonexistent/libcuda.so.1"  # what test_graph_api.py sets for the no-driver scenarios

cuda_reclaim.set_auto_drain("off")


class P:
    pass


def fake_driver():
    """The fake driver's test hooks, from the library CUDA_RECLAIM_LIBCUDA names."""
    fake = ctypes.CDLL(os.environ["CUDA_RECLAIM_LIBCUDA"])
    for name in ("fake_cuda_graph_create", "fake_cuda_failing_graph", "fake_cuda_capturing_stream",
                 "fake_cuda_failing_stream"):
        getattr(fake, name).restype = ctypes.c_void_p
    fake.fake_cuda_graph_destroy.argtypes = [ctypes.c_void_p]
    fake.fake_cuda_capturing_stream.argtypes = [ctypes.c_void_p]
    return fake


def expect_driver_error(call, *expected):
    """Calls `call`; it must raise cuda_reclaim.DriverError whose message contains every `expected`."""
    try:
        call()
    except cuda_reclaim.DriverError as error:
        assert isinstance(error, RuntimeError)
        assert all(text in str(error) for text in expected), error
    else:
        raise AssertionError("no DriverError")


# --- no driver ----------------------------------------------------------------------------------------------


def missing_driver():
    obj = object()
    base = sys.getrefcount(obj)
    expect_driver_error(lambda: cuda_reclaim.keep_alive(0x1234, obj), MISSING_LIBCUDA, "NVIDIA driver")
    expect_driver_error(lambda: cuda_reclaim.keep_alive_until(0, obj), MISSING_LIBCUDA, "NVIDIA driver")
    assert sys.getrefcount(obj) == base
    s = cuda_reclaim.stats()
    assert s["handed_over"] == 0 and s["pending"] == 0, s
    info = _reclaim._driver_info()
    assert info["status"] == "library_missing", info


def every_driver_error_of_the_package():
    for call in (
        lambda: cuda_reclaim.keep_alive(0x1234, object()),
        lambda: cuda_reclaim.keep_alive_until(0, object()),
        lambda: cuda_reclaim.launch_host_func(0, print),
        lambda: cuda_reclaim.add_host_node(0x1234, print),
    ):
        expect_driver_error(call, MISSING_LIBCUDA)


def reimported_extension():
    # A second module object from the same shared object: the package keeps raising (and catching) its
    # own DriverError, the second module raises its own, and once it is gone the first still works.
    del sys.modules["cuda_reclaim._reclaim"]
    second = importlib.import_module("cuda_reclaim._reclaim")
    assert second is not _reclaim and second.DriverError is not _reclaim.DriverError
    assert cuda_reclaim.DriverError is _reclaim.DriverError
    every_driver_error_of_the_package()
    try:
        second._keep_alive_graph(0x1234, object())
    except second.DriverError:
        pass
    else:
        raise AssertionError("the second module raised another class than its own DriverError")
    sys.modules["cuda_reclaim._reclaim"] = _reclaim
    cuda_reclaim._reclaim = _reclaim
    del second
    gc.collect()
    every_driver_error_of_the_package()


# --- the fake driver ----------------------------------------------------------------------------------------


def driver_too_old():
    expect_driver_error(lambda: cuda_reclaim.keep_alive(0x1234, P()), "version 11.2", "11.3 or newer")
    assert _reclaim._driver_info()["status"] == "driver_too_old"


def graph_destroyed_then_drained():
    fake = fake_driver()
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


def capturing_stream():
    fake = fake_driver()
    graph = fake.fake_cuda_graph_create()
    stream = fake.fake_cuda_capturing_stream(graph)
    obj = P()
    ref = weakref.ref(obj)
    _reclaim._keep_alive_capture(stream, obj)
    del obj
    fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.drain() == 1 and ref() is None
    expect_driver_error(lambda: _reclaim._keep_alive_capture(0, P()), "the stream is not capturing")


def failed_retain():
    fake = fake_driver()
    obj = P()
    base = sys.getrefcount(obj)
    expect_driver_error(lambda: cuda_reclaim.keep_alive(fake.fake_cuda_failing_graph(), obj),
                        "cuGraphRetainUserObject failed with CUDA_ERROR_INVALID_VALUE")
    assert sys.getrefcount(obj) == base, "given back, not leaked"
    assert cuda_reclaim.pending() == 0, "the destructor that ran inside the release did not push"
    assert _reclaim._diagnostics()["withdrawn"] == 1
    assert cuda_reclaim.drain() == 0 and sys.getrefcount(obj) == base, "and not released twice"


def failed_retain_with_a_later_destructor():
    fake = fake_driver()
    fake.fake_cuda_defer_destructors(1)
    obj = P()
    base = sys.getrefcount(obj)
    expect_driver_error(lambda: cuda_reclaim.keep_alive(fake.fake_cuda_failing_graph(), obj),
                        "CUDA releases the objects through the queue")
    assert sys.getrefcount(obj) == base + 1, "still CUDA's until its destructor runs"
    assert fake.fake_cuda_run_deferred() == 1
    assert cuda_reclaim.pending() == 1
    assert cuda_reclaim.drain() == 1
    assert sys.getrefcount(obj) == base
    assert _reclaim._diagnostics()["withdrawn"] == 0


def stream_reaches_the_host_function():
    fake = fake_driver()
    obj = P()
    ref = weakref.ref(obj)
    cuda_reclaim.keep_alive_until(0, obj)
    del obj
    assert ref() is not None and cuda_reclaim.pending() == 0
    assert fake.fake_cuda_run_host_functions() == 1
    assert cuda_reclaim.drain() == 1 and ref() is None
    s = cuda_reclaim.stats()
    assert s["stream_host_functions"] == 1 and s["graph_user_objects"] == 0 and s["direct_pushes"] == 0, s


def keep_alive_until_failures():
    fake = fake_driver()
    obj = P()
    base = sys.getrefcount(obj)
    for stream, expected in ((fake.fake_cuda_failing_stream(), "CUDA_ERROR_INVALID_HANDLE"),
                             (fake.fake_cuda_capturing_stream(fake.fake_cuda_graph_create()), "capturing")):
        expect_driver_error(lambda: cuda_reclaim.keep_alive_until(stream, obj), expected)
        assert sys.getrefcount(obj) == base
    assert fake.fake_cuda_run_host_functions() == 0
    assert cuda_reclaim.pending() == 0


def keep_alive_starts_the_automatic_drain():
    from cuda_reclaim import _auto

    fake = fake_driver()
    cuda_reclaim.set_auto_drain("thread")
    assert not _auto.is_thread_running()
    graph = fake.fake_cuda_graph_create()
    obj = P()
    gone = threading.Event()
    ref = weakref.ref(obj, lambda _: gone.set())
    cuda_reclaim.keep_alive(graph, obj)
    assert _auto.is_thread_running()
    del obj
    fake.fake_cuda_graph_destroy(graph)
    assert gone.wait(30) and ref() is None, "the drain thread released it"


if __name__ == "__main__":
    scenario.run(
        missing_driver,
        reimported_extension,
        driver_too_old,
        graph_destroyed_then_drained,
        capturing_stream,
        failed_retain,
        failed_retain_with_a_later_destructor,
        stream_reaches_the_host_function,
        keep_alive_until_failures,
        keep_alive_starts_the_automatic_drain,
    )
    print("ok")
