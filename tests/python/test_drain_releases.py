"""A drain releases each handed-over reference exactly once, whether its object survives the release (the
drain then only decrements the count while it copies the batch out of the queue) or dies (the release
action deallocates it), in batches that cross the drain's internal sizes, and the counts stay exact in a
finalizer that the drain runs."""

import sys
import weakref

import pytest

import cuda_reclaim
from conftest import conserved

# More than one drain batch (512) with a part shorter than the quiet-release distance (160) at the end.
COUNT = 3 * 512 + 100


class Payload:
    pass


class Watched:
    """Counts its finalizations, and checks the counters from inside them."""

    finalized = 0
    unconserved = []

    def __del__(self):
        Watched.finalized += 1
        stats = cuda_reclaim.stats()
        if not conserved(stats):
            Watched.unconserved.append(stats)


def test_references_to_objects_that_survive_are_each_released_once(drained):
    objects = [Payload() for _ in range(COUNT)]
    before = [sys.getrefcount(obj) for obj in objects]
    for index, obj in enumerate(objects):
        for _ in range(1 + index % 3):  # one to three references each
            cuda_reclaim.defer_release(obj)
    del obj
    handed_over = sum(1 + index % 3 for index in range(COUNT))
    assert cuda_reclaim.pending() == handed_over
    assert cuda_reclaim.drain() == handed_over
    assert [sys.getrefcount(obj) for obj in objects] == before
    assert cuda_reclaim.pending() == 0
    assert conserved(cuda_reclaim.stats())


def test_objects_that_die_and_survive_mixed_in_one_drain_are_each_released_once(drained):
    Watched.finalized = 0
    Watched.unconserved = []
    keep = []
    dying_refs = []
    for index in range(COUNT):
        if index % 2:
            obj = Payload()
            keep.append((obj, sys.getrefcount(obj)))
            cuda_reclaim.defer_release(obj)
        else:
            obj = Watched()
            dying_refs.append(weakref.ref(obj))
            cuda_reclaim.defer_release(obj)
        del obj
    assert all(ref() is not None for ref in dying_refs), "the queue holds the only references"
    assert cuda_reclaim.drain() == COUNT
    assert all(ref() is None for ref in dying_refs)
    assert Watched.finalized == len(dying_refs)
    assert Watched.unconserved == [], "a finalizer that the drain ran saw the counts out of balance"
    assert all(sys.getrefcount(obj) == count for obj, count in keep)
    assert conserved(cuda_reclaim.stats())


def test_a_budgeted_drain_releases_exactly_its_budget(drained):
    objects = [Payload() for _ in range(COUNT)]
    before = [sys.getrefcount(obj) for obj in objects]
    for obj in objects:
        cuda_reclaim.defer_release(obj)
    del obj
    assert cuda_reclaim.drain(700) == 700
    assert cuda_reclaim.pending() == COUNT - 700
    after = [sys.getrefcount(obj) for obj in objects]
    assert sum(a == b for a, b in zip(after, before)) == 700
    assert sum(a == b + 1 for a, b in zip(after, before)) == COUNT - 700
    assert cuda_reclaim.drain() == COUNT - 700
    assert [sys.getrefcount(obj) for obj in objects] == before


@pytest.mark.skipif(sys.version_info < (3, 12), reason="objects are immortal from CPython 3.12 on")
def test_immortal_objects_handed_over_many_times_keep_their_counts(drained):
    shared = [None, True, 1, "", ()]
    before = [sys.getrefcount(obj) for obj in shared]
    for _ in range(COUNT):
        for obj in shared:
            cuda_reclaim.defer_release(obj)
    assert cuda_reclaim.drain() == COUNT * len(shared)
    assert [sys.getrefcount(obj) for obj in shared] == before


class HandsOverAgain:
    """A finalizer that hands a survivor over and drains again, from inside the drain."""

    survivor = Payload()
    nested_released = 0

    def __del__(self):
        cuda_reclaim.defer_release(HandsOverAgain.survivor)
        released = cuda_reclaim.drain()  # before the += reads the total: nested drains add to it meanwhile
        HandsOverAgain.nested_released += released


def test_a_finalizer_may_hand_over_and_drain_again_during_a_drain(drained):
    HandsOverAgain.nested_released = 0
    before = sys.getrefcount(HandsOverAgain.survivor)
    for index in range(COUNT):
        cuda_reclaim.defer_release(HandsOverAgain() if index % 10 == 0 else HandsOverAgain.survivor)
    handed_over_outside = COUNT
    dying = len(range(0, COUNT, 10))
    released = cuda_reclaim.drain()
    released += cuda_reclaim.drain()
    after = sys.getrefcount(HandsOverAgain.survivor)  # outside an assert: pytest's rewrite holds operands
    assert released + HandsOverAgain.nested_released == handed_over_outside + dying
    assert after == before
    assert cuda_reclaim.pending() == 0
    assert conserved(cuda_reclaim.stats())
