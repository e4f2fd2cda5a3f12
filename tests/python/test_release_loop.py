"""bindings' release loop (bindings/release_loop.h), item by item, over scripted objects.

The drain's counts rely on the loop's side of reclaim::ReleaseBatchFn's contract: it releases the batch in
order, ends with `next` at the batch's count, and an unwinding release leaves `next` just past the item that
unwound (so that the drain puts back exactly the rest); and a call starts with a clean error
indicator while a deallocator's leftover exception still reaches sys.unraisablehook. The test extension
`_release_loop_probe` runs the loop itself over objects whose deallocators (or calls) do what each test
scripts; a C++ exception stands in for CPython's forced unwind of a thread during finalization.

The loop has two ways through a batch: objects that follow each other in ascending address order (as
objects allocated one after another) are left to the CPU's prefetcher, any other layout has each object's
line fetched ahead. Every contract test runs with both layouts, and checks that the loop's own test of the
layout (the same function, called by the probe) chose the way the test means to exercise. Which loop then
ran is not observable from here (both release the same items the same way); the instruction counts of
bench/count_instructions.py show it.
"""

import sys

import pytest

# Built with the suite by Bazel (and handed to the sdist's run of it): a missing module is a broken build.
import _release_loop_probe as probe

PLAIN, THROWS, LEAVES_ERROR = 0, 1, 2
CALL_STARTED_CLEAN, CALL_STARTED_WITH_ERROR = 1000, 2000
OBJECT_SIZE = 32  # a scripted object's size in the probe's block (the distance between neighbours)
STEP = probe.ORDER_SAMPLE_STEP  # how far apart the loop's test of a layout looks
LONG = 2 * STEP + 10  # long enough that the test of the layout decides (and the first loop runs)


@pytest.fixture(params=["ascending", "descending"])
def release(request):
    """probe.release with the layout of the test's parameter; checks the way the loop took."""
    layout = request.param

    def run(script, chunks=None):
        next_index, unwound, events, fetched_ahead = probe.release(script, chunks, layout)
        # Ascending neighbours are left to the prefetcher; a short batch, or descending addresses, are fetched.
        assert fetched_ahead == (layout == "descending" or len(script) <= STEP), (layout, len(script))
        return next_index, unwound, events

    return run


def test_releases_every_item_in_order_and_ends_past_the_last(release):
    next_index, unwound, events = release([("plain", PLAIN)] * 5)
    assert (next_index, unwound, events) == (5, False, [1, 2, 3, 4, 5])


def test_a_batch_handed_over_in_chunks_is_released_once_in_order(release):
    # The queue hands one dequeue over in several calls with a growing count; the fetch ahead reads across
    # each call's end (up to `available`, the whole batch) but releases nothing of the next call.
    script = [("plain", PLAIN)] * 20 + [("call", PLAIN)] + [("plain", PLAIN)] * 3
    next_index, unwound, events = release(script, [3, 9, 1, 11])
    assert (next_index, unwound) == (24, False)
    assert events == list(range(1, 21)) + [CALL_STARTED_CLEAN + 21, 21, 22, 23, 24]


def test_an_unwinding_release_leaves_next_just_past_it(release):
    next_index, unwound, events = release(
        [("plain", PLAIN), ("plain", THROWS), ("plain", PLAIN), ("plain", PLAIN)])
    assert unwound
    assert next_index == 2, "the item that unwound counts as released; the drain puts back the rest"
    assert events == [1, 2], "nothing after the unwinding release was released"


def test_an_unwinding_release_in_the_first_loop_leaves_next_just_past_it(release):
    # Far enough from the end that, descending, the item is released by the loop that fetches ahead.
    script = [("plain", PLAIN)] * LONG
    script[5] = ("plain", THROWS)
    next_index, unwound, events = release(script)
    assert (next_index, unwound, events) == (6, True, [1, 2, 3, 4, 5, 6])


def test_an_unwinding_call_leaves_next_just_past_it(release):
    next_index, unwound, events = release([("plain", PLAIN), ("call", THROWS), ("plain", PLAIN)])
    assert unwound
    assert next_index == 2
    assert events == [1, CALL_STARTED_CLEAN + 2, 2]


def test_an_unwinding_call_in_the_first_loop_leaves_next_just_past_it(release):
    script = [("plain", PLAIN)] * LONG
    script[5] = ("call", THROWS)
    next_index, unwound, events = release(script)
    assert (next_index, unwound, events) == (6, True, [1, 2, 3, 4, 5, CALL_STARTED_CLEAN + 6, 6])


@pytest.fixture
def unraisable(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hooked: seen.append(hooked.exc_value))
    return seen


def test_an_exception_left_by_a_deallocator_is_reported_before_the_next_call(release, unraisable):
    next_index, unwound, events = release([("plain", LEAVES_ERROR), ("call", PLAIN), ("plain", PLAIN)])
    assert (next_index, unwound) == (3, False)
    assert events == [1, CALL_STARTED_CLEAN + 2, 2, 3], "the call must start with a clean error indicator"
    assert [str(e) for e in unraisable] == ["left by a deallocator"]


def test_a_deallocator_s_exception_in_the_first_loop_is_reported_before_the_next_call(release, unraisable):
    script = [("plain", PLAIN)] * LONG
    script[4] = ("plain", LEAVES_ERROR)
    script[5] = ("call", PLAIN)
    next_index, unwound, events = release(script)
    assert (next_index, unwound) == (LONG, False)
    assert events[4:7] == [5, CALL_STARTED_CLEAN + 6, 6], "the call must start with a clean error indicator"
    assert events == [1, 2, 3, 4, 5, CALL_STARTED_CLEAN + 6] + list(range(6, LONG + 1))
    assert [str(e) for e in unraisable] == ["left by a deallocator"]


def test_an_exception_left_by_the_last_release_is_reported_after_the_loop(release, unraisable):
    next_index, unwound, events = release([("plain", PLAIN), ("plain", LEAVES_ERROR)])
    assert (next_index, unwound, events) == (2, False, [1, 2])
    assert [type(e) for e in unraisable] == [RuntimeError]


def test_an_unwinding_report_before_a_call_leaves_next_at_the_call(release, monkeypatch):
    # The report of a leftover exception runs sys.unraisablehook before the call; should that unwind, the
    # call never ran, so `next` stays at it and the drain puts it back.
    monkeypatch.setattr(sys, "unraisablehook", probe.throwing_hook)
    next_index, unwound, events = release([("plain", LEAVES_ERROR), ("call", PLAIN), ("plain", PLAIN)])
    assert unwound
    assert next_index == 1
    assert events == [1], "neither the call nor anything after it was released"


def test_only_close_neighbours_in_ascending_order_are_left_to_the_prefetcher():
    base = 1 << 32
    ascending = [base + OBJECT_SIZE * i for i in range(4 * STEP + 1)]
    assert probe.follow_in_address_order(ascending)
    # Any sample out of order, or two samples far apart, and the loop fetches ahead.
    assert not probe.follow_in_address_order(ascending[::-1])
    swapped = list(ascending)
    swapped[STEP], swapped[2 * STEP] = swapped[2 * STEP], swapped[STEP]
    assert not probe.follow_in_address_order(swapped)
    gap = ascending[:2 * STEP] + [address + (1 << 20) for address in ascending[2 * STEP:]]
    assert not probe.follow_in_address_order(gap)
    # Too short to tell: fetched.
    assert not probe.follow_in_address_order(ascending[:STEP])
    assert probe.follow_in_address_order(ascending[:STEP + 1])


def test_a_negative_chunk_size_is_refused():
    with pytest.raises(ValueError, match="chunk sizes must be 0 or more"):
        probe.release([("plain", PLAIN)] * 3, [2, -1])


def test_a_bad_layout_is_refused():
    with pytest.raises(ValueError, match="layout must be"):
        probe.release([("plain", PLAIN)], None, "sideways")
