"""A pytester test module of test_pytest_plugin.py: a test whose marker gives it 60 s of flush timeout, and
whose graph CUDA hands back after 0.5 s."""

import pytest

import cuda_reclaim
from conftest import P, destroy_later, fake


@pytest.mark.reclaim(timeout=60)
def test_hands_back_later():
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    destroy_later(graph, 0.5)
