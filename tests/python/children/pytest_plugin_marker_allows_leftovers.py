"""A pytester test module of test_pytest_plugin.py: tests marked to leave a held graph or a host call, and one
whose marker allows less than it leaves."""

import pytest

import cuda_reclaim
from conftest import P, fake


@pytest.mark.reclaim(allow_held=True)
def test_leaks_on_purpose():
    cuda_reclaim.keep_alive(fake.fake_cuda_graph_create(), P())


@pytest.mark.reclaim(allow_held=True, allow_outstanding=True)
def test_leaves_a_call_on_purpose():
    cuda_reclaim.launch_host_func(0x7400, print)


@pytest.mark.reclaim(allow_held=True)
def test_allowed_held_only():
    cuda_reclaim.launch_host_func(0x7500, print)
