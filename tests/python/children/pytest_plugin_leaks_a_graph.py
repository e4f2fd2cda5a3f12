"""A pytester test module of test_pytest_plugin.py: one test that leaves a graph holding its payload."""

import cuda_reclaim
from conftest import P, fake


def test_leaks():
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())
