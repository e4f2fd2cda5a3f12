"""A pytester test module of test_pytest_plugin.py: what CUDA hands back soon and what is queued, then a test
that sees both released."""

import cuda_reclaim
from conftest import P, destroy_later, fake


def test_hands_back_later():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    destroy_later(graph, 0.2)


def test_queues_and_does_not_drain():
    cuda_reclaim.defer_release(P())


def test_after_them():
    s = cuda_reclaim.stats()
    assert s["pending"] == 0 and s["held_by_cuda"] == 0 and s["released"] == 2, s
