"""A pytester test module of test_pytest_plugin.py: a session fixture and a module fixture that each hold a
graph across tests, tests that use them, and one that leaks a graph beside them."""

import pytest

import cuda_reclaim
from conftest import P, fake


@pytest.fixture(scope="session")
def session_graph():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    yield graph
    fake.fake_cuda_graph_destroy(graph)


@pytest.fixture(scope="module")
def module_graph(session_graph):
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    yield graph
    fake.fake_cuda_graph_destroy(graph)


@pytest.mark.parametrize("n", range(3))
def test_uses_them(session_graph, module_graph, n):
    assert cuda_reclaim.stats()["held_by_cuda"] == 2


def test_leaks_beside_them(session_graph, module_graph):
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())
