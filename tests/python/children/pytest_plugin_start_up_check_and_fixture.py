"""A pytester test module of test_pytest_plugin.py: one test that leaves a graph holding its payload, and one
that flushes what it queued through the `reclaim` fixture."""

import cuda_reclaim
from conftest import P, fake


def test_leaks():
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())


def test_fixture(reclaim):
    cuda_reclaim.defer_release(P())
    assert reclaim.flush() == 1 and reclaim.delta()["released"] == 1
