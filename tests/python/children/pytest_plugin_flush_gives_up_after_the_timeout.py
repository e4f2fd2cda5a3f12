"""A pytester test module of test_pytest_plugin.py: beside a graph that a session fixture keeps, graphs that the
tests attach and CUDA keeps; the `reclaim` fixture's flush gives up after the test's flush timeout."""

import pytest

import cuda_reclaim
from conftest import P, fake


@pytest.fixture(scope="session")
def session_graph():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    yield graph
    fake.fake_cuda_graph_destroy(graph)


@pytest.mark.reclaim(allow_held=True)
def test_keeps_a_graph(session_graph, reclaim):
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())
    cuda_reclaim.defer_release(P())
    assert reclaim.flush() == 1  # the queued one; the graph's payload stays held
    assert reclaim.delta()["held_by_cuda"] == 1
    assert reclaim.flush(0) == 0


@pytest.mark.reclaim(allow_held=True, timeout=0.05)
def test_keeps_another_with_its_own_timeout(session_graph, reclaim):
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())
    assert reclaim.flush() == 0
    assert reclaim.delta()["held_by_cuda"] == 1
