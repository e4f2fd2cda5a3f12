"""A pytester test module of test_pytest_plugin.py: stats() made to report one reference handed over and in no
bucket; the law breaks in the first test and stays broken in the next."""

import cuda_reclaim


def test_breaks_the_law():
    real = cuda_reclaim.stats
    cuda_reclaim.stats = lambda: {**real(), "handed_over": real()["handed_over"] + 1}


def test_after_it():
    assert not cuda_reclaim.conserved()
