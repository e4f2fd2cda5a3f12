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


def reference_counts(objects):
    """sys.getrefcount of each object, measured the same way every time (3.14 counts borrowed references
    differently in different contexts, so counts are only compared when taken by this one function)."""
    return [sys.getrefcount(obj) for obj in objects]


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
    before = reference_counts(objects)
    for index, obj in enumerate(objects):
        for _ in range(1 + index % 3):  # one to three references each
            cuda_reclaim.defer_release(obj)
    del obj
    handed_over = sum(1 + index % 3 for index in range(COUNT))
    assert cuda_reclaim.pending() == handed_over
    assert cuda_reclaim.drain() == handed_over
    assert reference_counts(objects) == before
    assert cuda_reclaim.pending() == 0
    assert conserved(cuda_reclaim.stats())


def test_objects_that_die_and_survive_mixed_in_one_drain_are_each_released_once(drained):
    Watched.finalized = 0
    Watched.unconserved = []
    survivors = [Payload() for _ in range(COUNT // 2)]
    before = reference_counts(survivors)
    dying = [Watched() for _ in range(COUNT - len(survivors))]
    dying_refs = [weakref.ref(obj) for obj in dying]
    for index in range(COUNT):  # alternating, so every batch mixes both kinds
        cuda_reclaim.defer_release(survivors[index // 2] if index % 2 else dying[index // 2])
    del dying
    assert all(ref() is not None for ref in dying_refs), "the queue holds the only references"
    assert cuda_reclaim.drain() == COUNT
    assert all(ref() is None for ref in dying_refs)
    assert Watched.finalized == len(dying_refs)
    assert Watched.unconserved == [], "a finalizer that the drain ran saw the counts out of balance"
    assert reference_counts(survivors) == before
    assert conserved(cuda_reclaim.stats())


# Runs of one kind many batches long (dying, surviving, dying), drained at once or one batch per drain.
RUN = 24 * 512


@pytest.mark.parametrize("per_drain", [None, 512], ids=["one drain", "one batch per drain"])
def test_long_runs_of_dying_and_surviving_objects_are_each_released_once(drained, per_drain):
    Watched.finalized = 0
    Watched.unconserved = []
    survivors = [Payload() for _ in range(RUN)]
    before = reference_counts(survivors)
    dying = [Watched() for _ in range(2 * RUN)]
    dying_refs = [weakref.ref(obj) for obj in dying]
    for obj in dying[:RUN]:
        cuda_reclaim.defer_release(obj)
    for obj in survivors:
        cuda_reclaim.defer_release(obj)
    for obj in dying[RUN:]:
        cuda_reclaim.defer_release(obj)
    del dying, obj
    released = 0
    while released < 3 * RUN:
        got = cuda_reclaim.drain() if per_drain is None else cuda_reclaim.drain(per_drain)
        assert got > 0
        released += got
    assert released == 3 * RUN
    assert all(ref() is None for ref in dying_refs)
    assert Watched.finalized == 2 * RUN
    assert Watched.unconserved == [], "a finalizer that the drain ran saw the counts out of balance"
    assert reference_counts(survivors) == before
    assert cuda_reclaim.pending() == 0
    assert conserved(cuda_reclaim.stats())


def test_a_budgeted_drain_releases_exactly_its_budget(drained):
    objects = [Payload() for _ in range(COUNT)]
    before = reference_counts(objects)
    for obj in objects:
        cuda_reclaim.defer_release(obj)
    del obj
    assert cuda_reclaim.drain(700) == 700
    assert cuda_reclaim.pending() == COUNT - 700
    after = reference_counts(objects)
    assert sum(a == b for a, b in zip(after, before)) == 700
    assert sum(a == b + 1 for a, b in zip(after, before)) == COUNT - 700
    assert cuda_reclaim.drain() == COUNT - 700
    assert reference_counts(objects) == before


@pytest.mark.skipif(sys.version_info < (3, 12), reason="objects are immortal from CPython 3.12 on")
def test_immortal_objects_handed_over_many_times_keep_their_counts(drained):
    shared = [None, True, 1, "", ()]
    before = reference_counts(shared)
    for _ in range(COUNT):
        for obj in shared:
            cuda_reclaim.defer_release(obj)
    assert cuda_reclaim.drain() == COUNT * len(shared)
    assert reference_counts(shared) == before


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
    before = reference_counts([HandsOverAgain.survivor])
    for index in range(COUNT):
        cuda_reclaim.defer_release(HandsOverAgain() if index % 10 == 0 else HandsOverAgain.survivor)
    handed_over_outside = COUNT
    dying = len(range(0, COUNT, 10))
    released = cuda_reclaim.drain()
    released += cuda_reclaim.drain()
    after = reference_counts([HandsOverAgain.survivor])  # outside an assert: pytest's rewrite holds operands
    assert released + HandsOverAgain.nested_released == handed_over_outside + dying
    assert after == before
    assert cuda_reclaim.pending() == 0
    assert conserved(cuda_reclaim.stats())
