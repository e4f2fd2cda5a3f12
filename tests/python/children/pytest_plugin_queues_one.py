"""A pytester test module of test_pytest_plugin.py: one test that queues a reference and leaves it queued."""

import cuda_reclaim


def test_queues():
    cuda_reclaim.defer_release(object())
