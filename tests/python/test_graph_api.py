"""keep_alive / keep_alive_until without a GPU: argument checking, handle extraction from cuda.core and
cuda.bindings objects, the no-driver errors, and the whole hand-over path against the fake libcuda
(tests/graph/fake_libcuda.cc), including failures after CUDA took the reference."""

import os

import pytest

import cuda_reclaim
from conftest import run_child_script
from cuda_reclaim import _graph

FAKE_LIBCUDA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "graph", "fake_libcuda.so")


SCENARIOS = "graph_api_scenarios.py"
MISSING_LIBCUDA = "/nonexistent/libcuda.so.1"


def run_scenario(name, libcuda, **env):
    result = run_child_script(SCENARIOS, name, env={"CUDA_RECLAIM_LIBCUDA": libcuda, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"


def run_with_fake_driver(name, **env):
    if not os.path.exists(FAKE_LIBCUDA):
        pytest.skip(f"fake driver not built: {FAKE_LIBCUDA}")
    run_scenario(name, FAKE_LIBCUDA, **env)


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
    with pytest.raises(TypeError, match=r"_keep_alive_stream\(\): custream must be an int handle"):
        _reclaim._keep_alive_stream("1", object())
    with pytest.raises(ValueError, match=r"_keep_alive_capture\(\): custream -1 .*0 <= handle < 2\*\*64"):
        _reclaim._keep_alive_capture(-1, object())


# --- handle extraction ------------------------------------------------------------------------------------


def test_int_handles_pass_through():
    assert _graph.graph_target(0x1234, "keep_alive") == ("graph", 0x1234)
    assert _graph.stream_handle(0, "keep_alive_until") == 0  # the legacy default stream
    assert _graph.stream_handle(0xABC, "keep_alive_until") == 0xABC


def test_cuda_bindings_handles_are_extracted():
    driver = pytest.importorskip("cuda.bindings.driver")
    assert _graph.graph_target(driver.CUgraph(0x5000), "keep_alive") == ("graph", 0x5000)
    assert _graph.stream_handle(driver.CUstream(0x6000), "keep_alive_until") == 0x6000
    with pytest.raises(ValueError, match="null CUgraph"):
        _graph.graph_target(driver.CUgraph(0), "keep_alive")


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
    assert _graph.stream_handle(stream, "keep_alive_until") == int(stream.handle)


def test_cuda_stream_protocol_is_accepted():
    class Foreign:
        def __cuda_stream__(self):
            return (0, 0x4242)

    assert _graph.stream_handle(Foreign(), "keep_alive_until") == 0x4242


@pytest.mark.parametrize(
    "returned, message",
    [
        (5, r"Foreign.__cuda_stream__\(\) must return \(version, handle\), not 5"),
        (None, r"must return \(version, handle\), not None"),
        ((0,), r"must return \(version, handle\), not \(0,\)"),
        ((0, 1, 2), r"must return \(version, handle\)"),
        ((0, "x"), r"Foreign.__cuda_stream__\(\) handle must be an int handle, not str"),
    ],
)
def test_a_cuda_stream_protocol_that_returns_garbage_gets_an_error_naming_it(returned, message):
    class Foreign:
        def __cuda_stream__(self):
            return returned

    with pytest.raises(TypeError, match=message):
        _graph.stream_handle(Foreign(), "keep_alive_until")


def test_a_cuda_stream_attribute_that_is_not_a_method_gets_an_error_naming_it():
    class Foreign:
        __cuda_stream__ = (0, 0x4242)

    with pytest.raises(TypeError, match=r"Foreign.__cuda_stream__ must be a method"):
        _graph.stream_handle(Foreign(), "keep_alive_until")


def test_a_closed_object_whose_handle_is_none_gets_an_error_saying_so():
    with pytest.raises(ValueError, match=r"GraphNode.handle is None: the object is closed"):
        _graph._handle_of(None, "GraphNode.handle", "add_host_node")
    with pytest.raises(TypeError, match=r"CUstream must be convertible to an int handle, not object"):
        _graph._handle_of(object(), "CUstream", "keep_alive_until")
    assert _graph._handle_of(0x10, "CUgraph", "keep_alive") == 0x10


# --- no driver ----------------------------------------------------------------------------------------------


def test_missing_driver_raises_driver_error_naming_the_library_and_keeps_nothing():
    run_scenario("missing_driver", MISSING_LIBCUDA)


def test_driver_error_of_the_package_still_catches_after_the_extension_is_imported_again():
    run_scenario("reimported_extension", MISSING_LIBCUDA)


def test_driver_too_old_raises_driver_error_with_both_versions():
    run_with_fake_driver("driver_too_old", FAKE_CUDA_VERSION="11020")


# --- the hand-over path, against the fake driver ----------------------------------------------------------


def test_objects_live_until_the_graph_is_destroyed_then_drain_releases_them():
    run_with_fake_driver("graph_destroyed_then_drained")


def test_capturing_stream_attaches_to_the_graph_being_captured():
    run_with_fake_driver("capturing_stream")


def test_failed_retain_gives_the_reference_back_at_once():
    run_with_fake_driver("failed_retain")


def test_failed_retain_whose_destructor_runs_later_releases_exactly_once_through_the_queue():
    run_with_fake_driver("failed_retain_with_a_later_destructor")


def test_keep_alive_until_releases_after_the_stream_reaches_the_host_function():
    run_with_fake_driver("stream_reaches_the_host_function")


def test_keep_alive_until_failures_give_the_reference_back():
    run_with_fake_driver("keep_alive_until_failures")


def test_keep_alive_starts_the_automatic_drain():
    run_with_fake_driver("keep_alive_starts_the_automatic_drain")
