"""Three consumers built like third-party projects against the installed wheel — (a) c_consumer: g++ with
get_include(); (b) cython_consumer: Cython cimporting the wheel's .pxd; (c) _bazel_consumer: Bazel, its own
copy of //abi adopting the wheel's queue — push from native threads into one queue, released only by
cuda_reclaim's drains, counted in one set of counters, closed by one atexit hook.

Run by consumers_test.sh with the venv's interpreter; the consumers are on PYTHONPATH."""

import os
import subprocess
import sys
import weakref

import pytest

import cuda_reclaim
import exit_report

import _bazel_consumer
import c_consumer
import cython_consumer

CONSUMERS = {"c": c_consumer, "cython": cython_consumer, "bazel": _bazel_consumer}
SHARED_KEYS = ("handed_over", "released", "pending", "leaked_after_close")


class Payload:
    pass


@pytest.fixture(autouse=True)
def quiet_queue():
    previous = cuda_reclaim.set_auto_drain("off")
    cuda_reclaim.drain()
    yield
    cuda_reclaim.drain()
    cuda_reclaim.set_auto_drain(previous)


def shared_view(stats):
    return {key: stats[key] for key in SHARED_KEYS}


def test_everything_comes_from_the_installed_wheel():
    assert sys.prefix != sys.base_prefix, "running in the venv"
    assert cuda_reclaim.__file__.startswith(sys.prefix), cuda_reclaim.__file__
    include = cuda_reclaim.get_include()
    assert include.startswith(sys.prefix)
    assert os.path.isfile(os.path.join(include, "cuda_reclaim", "cuda_reclaim.h"))
    assert os.path.isfile(os.path.join(os.path.dirname(cuda_reclaim.__file__), "c_api.pxd"))


@pytest.mark.parametrize("name", sorted(CONSUMERS))
def test_consumer_hands_over_from_native_threads_and_only_a_drain_releases(name):
    consumer = CONSUMERS[name]
    objs = [Payload() for _ in range(3000)]
    refs = [weakref.ref(o) for o in objs]
    before = cuda_reclaim.stats()
    assert consumer.hand_over(objs, 4) == 3000
    del objs
    assert all(r() is not None for r in refs), "the native threads released nothing"
    assert cuda_reclaim.pending() == 3000
    assert cuda_reclaim.drain() == 3000
    assert all(r() is None for r in refs)
    after = cuda_reclaim.stats()
    assert after["handed_over"] - before["handed_over"] == 3000
    assert after["released"] - before["released"] == 3000
    assert shared_view(consumer.stats()) == shared_view(after), "the consumer sees the same counters"


def test_bazel_consumers_copy_of_cleanup_uses_the_wheels_queue():
    assert _bazel_consumer.wakeup_fd() == cuda_reclaim.fileno()


def test_consumers_loaded_together_share_one_queue_and_one_set_of_counters():
    before = cuda_reclaim.stats()
    batches = {"c": 300, "cython": 500, "bazel": 700}
    refs = []
    for name, count in batches.items():
        objs = [Payload() for _ in range(count)]
        refs += [weakref.ref(o) for o in objs]
        assert CONSUMERS[name].hand_over(objs, 3) == count
    del objs
    total = sum(batches.values())
    now = cuda_reclaim.stats()
    assert now["handed_over"] - before["handed_over"] == total
    assert now["pending"] == total
    for consumer in CONSUMERS.values():
        assert shared_view(consumer.stats()) == shared_view(now)
    # One consumer's drain (the capsule's, with the GIL) releases what all of them handed over.
    assert cython_consumer.drain() == total
    assert all(r() is None for r in refs)
    assert shared_view(_bazel_consumer.stats()) == shared_view(cuda_reclaim.stats())


def test_one_atexit_hook_drains_every_consumer_and_later_pushes_count_as_leaked():
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "close_then_push.py")
    env = dict(os.environ, CUDA_RECLAIM_REPORT="1")
    result = subprocess.run([sys.executable, child], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "handed over"
    reports = exit_report.find_reports(result.stderr)
    assert len(reports) == 1, result.stderr
    assert reports[0]["handed_over"] == 302
    assert reports[0]["released"] == 300, "the final drain released the Bazel consumer's pushes too"
    assert reports[0]["pending"] == 0
    assert reports[0]["leaked_after_close"] == 2
    assert reports[0]["conserved"] == "yes"
