"""A pytester test module of test_pytest_plugin.py: a release that blocks on another thread's drain (in_drain,
which the check's flush cannot finish), left by one test, allowed by the next one's marker, finished by the
last."""

import threading

import pytest

import cuda_reclaim

release = threading.Event()


class Blocks:
    def __del__(self):
        release.wait()


def start_a_blocked_drain():
    cuda_reclaim.defer_release(Blocks())
    drainer = threading.Thread(target=cuda_reclaim.drain)
    drainer.start()
    while cuda_reclaim.stats()["in_drain"] == 0:
        pass
    return drainer


def test_leaves_a_drain_unfinished():
    test_leaves_a_drain_unfinished.drainer = start_a_blocked_drain()


@pytest.mark.reclaim(allow_pending=True)
def test_lets_it_finish_and_leaves_another_on_purpose():
    release.set()
    test_leaves_a_drain_unfinished.drainer.join()
    release.clear()
    test_lets_it_finish_and_leaves_another_on_purpose.drainer = start_a_blocked_drain()


def test_finishes_it():
    release.set()
    test_lets_it_finish_and_leaves_another_on_purpose.drainer.join()
