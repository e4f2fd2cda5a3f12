"""A pytester test module of test_pytest_plugin.py: the guide's example beside a graph that a session fixture
keeps; the `reclaim` fixture's flush waits for what the test attached, never for the session's graph."""

import pytest

import cuda_reclaim
from conftest import P, destroy_later, fake


@pytest.fixture(scope="session")
def session_graph():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    yield graph
    fake.fake_cuda_graph_destroy(graph)


def test_releases_what_it_queued(session_graph, reclaim):
    cuda_reclaim.defer_release(P())
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    destroy_later(graph, 0.1)
    assert reclaim.flush() == 2  # the queued one, and the graph's payload once CUDA handed it back
    assert reclaim.delta()["released"] == 2
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    destroy_later(graph, 0.1)
    assert reclaim.flush(None) == 1
    assert reclaim.stats()["held_by_cuda"] == 1  # the session's graph, still held
