"""A pytester test module of test_pytest_plugin.py: a test that never uses cuda_reclaim and finds none of it
imported, then a test that asks for the `reclaim` fixture."""

import sys


def test_never_uses_cuda_reclaim():
    imported = [name for name in sys.modules if name == "cuda_reclaim" or name.startswith("cuda_reclaim.")]
    assert "cuda_reclaim._reclaim" not in sys.modules and imported == [], imported


def test_uses_the_fixture(reclaim):
    pass
