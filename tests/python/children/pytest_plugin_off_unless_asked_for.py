"""A pytester test module of test_pytest_plugin.py: a graph left held and a reference left pending, and a test
after them that sees both."""

import cuda_reclaim
from conftest import P, fake


def test_leaks():
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())


def test_queues():
    cuda_reclaim.defer_release(P())


def test_sees_what_the_others_left():
    assert cuda_reclaim.pending() == 1
    assert cuda_reclaim.stats()["held_by_cuda"] == 1
