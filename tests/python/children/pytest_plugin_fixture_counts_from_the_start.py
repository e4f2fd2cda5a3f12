"""A pytester test module of test_pytest_plugin.py: the `reclaim` fixture's baseline and delta start after
what an earlier test left queued."""

import cuda_reclaim
from conftest import P


def test_before():
    cuda_reclaim.defer_release(P())  # not drained: the fixture's delta of the next test starts after it


def test_fixture(reclaim):
    assert reclaim.baseline["handed_over"] >= 1
    for _ in range(2):
        cuda_reclaim.defer_release(P())
    delta = reclaim.delta()
    assert delta["handed_over"] == 2 and delta["direct_pushes"] == 2 and delta["pending"] == 2, delta
    assert reclaim.flush(0) >= 2
    delta = reclaim.delta()
    assert delta["released"] >= 2 and delta["pending"] <= 0, delta
    assert reclaim.stats()["pending"] == 0
