"""stats() has one source of truth, the counter table RECLAIM_COUNTER_TABLE of the C ABI header
(cuda_reclaim/reclaim_abi.h): cuda_reclaim.COUNTERS, the keys and order of stats(), the kinds, the sources, the
exit report and the conservation buckets all come from it and must agree with what the counters do."""

import collections
import itertools

import pytest

import cuda_reclaim
import fake_cuda
import exit_report
from cuda_reclaim import _reclaim

KINDS = {"counter", "gauge", "high_water_mark"}
SOURCES = ("queue", "origin", "cuda", "calls")


def test_counters_is_every_key_of_stats_in_order_and_read_only(drained):
    assert tuple(cuda_reclaim.COUNTERS) == tuple(cuda_reclaim.stats())
    assert tuple(cuda_reclaim.COUNTERS) == tuple(row[0] for row in _reclaim._COUNTER_TABLE)
    assert len(cuda_reclaim.COUNTERS) == 23
    with pytest.raises(TypeError):
        cuda_reclaim.COUNTERS["pending"] = cuda_reclaim.COUNTERS["released"]
    record = cuda_reclaim.COUNTERS["pending"]
    with pytest.raises(AttributeError):
        record.kind = "counter"
    with pytest.raises(AttributeError):
        record.extra = 1


def test_every_record_has_a_kind_a_source_a_help_line_and_a_description():
    for key, record in cuda_reclaim.COUNTERS.items():
        assert record._fields == ("kind", "source", "help", "description"), key
        assert record.kind in KINDS, key
        assert record.source in SOURCES, key
        assert record.help and "\n" not in record.help and len(record.help) <= 80, key
        assert len(record.description) > 10, key


def test_stats_lists_the_sources_in_the_tables_order(drained):
    sources = [cuda_reclaim.COUNTERS[key].source for key in cuda_reclaim.stats()]
    # Grouped, each source once, in the header's order.
    assert [source for source, _ in itertools.groupby(sources)] == list(SOURCES)
    assert collections.Counter(sources) == {"queue": 11, "origin": 5, "cuda": 3, "calls": 4}


def test_the_buckets_are_queue_counters_and_the_law_uses_them(drained):
    buckets = _reclaim._CONSERVATION_BUCKETS
    assert {cuda_reclaim.COUNTERS[key].source for key in buckets} == {"queue"}
    assert "handed_over" not in buckets
    assert cuda_reclaim.conserved(cuda_reclaim.stats())
    # One reference counted in a bucket alone conserves; one counted in any other queue counter does not.
    for key, record in cuda_reclaim.COUNTERS.items():
        if record.source == "queue" and key != "handed_over":
            one = dict.fromkeys(cuda_reclaim.COUNTERS, 0) | {"handed_over": 1, key: 1}
            assert cuda_reclaim.conserved(one) == (key in buckets), key


def test_the_origins_split_handed_over(drained):
    cuda_reclaim.defer_release(object())
    counters = cuda_reclaim.stats()
    origins = [key for key, record in cuda_reclaim.COUNTERS.items() if record.source == "origin"]
    assert sum(counters[key] for key in origins) == counters["handed_over"]
    assert counters["direct_pushes"] >= 1


def test_the_kinds_are_what_the_counters_do(drained):
    kinds = {key: record.kind for key, record in cuda_reclaim.COUNTERS.items()}
    # Levels that go down: the queue's length, what drains hold, what CUDA holds, the calls not yet done, and
    # what a fork abandoned (a drain that went on in the child settles out of it).
    gauges = {"pending", "in_drain", "held_by_cuda", "calls_outstanding", "abandoned_after_fork"}
    assert {key for key, kind in kinds.items() if kind == "gauge"} == gauges
    assert {key for key, kind in kinds.items() if kind == "high_water_mark"} == {"max_pending"}
    # A counter only grows: a hand-over and its release move every counter up or leave it.
    before = cuda_reclaim.stats()
    cuda_reclaim.defer_release(object())
    cuda_reclaim.drain()
    after = cuda_reclaim.stats()
    for key, kind in kinds.items():
        if kind != "gauge":
            assert after[key] >= before[key], key
    assert after["handed_over"] == before["handed_over"] + 1
    assert after["max_pending"] >= 1 and after["pending"] == 0


def test_the_removed_key_lists_are_gone():
    for name in ("STATS_KEYS", "SOURCE_KEYS", "HOLD_KEYS", "CALL_KEYS", "STATS_DOCS", "CONSERVATION_BUCKETS"):
        assert not hasattr(cuda_reclaim, name), name
        assert name not in cuda_reclaim.__all__, name
    assert "COUNTERS" in cuda_reclaim.__all__


def test_the_exit_report_has_the_queue_and_cuda_rows_of_the_table(drained):
    fields = exit_report.parse_line(_reclaim.report().strip())
    table = cuda_reclaim.COUNTERS
    assert list(fields) == [key for key in table if table[key].source in ("queue", "cuda")] + ["conserved"]


def test_no_counter_goes_down_between_two_reads_under_load():
    fake_cuda.run_script("counters_only_grow_under_load.py", timeout=60)


@pytest.mark.parametrize("value", [None, "3", 1.0, cuda_reclaim.COUNTERS["pending"]])
def test_conserved_names_itself_when_a_count_is_not_an_integer(value):
    counters = dict(cuda_reclaim.stats(), pending=value)
    with pytest.raises(TypeError, match=r"conserved\(\): counters\['pending'\] must be an integer"):
        cuda_reclaim.conserved(counters)


def test_conserved_refuses_bool_and_negative_counts_naming_itself():
    with pytest.raises(TypeError, match=r"conserved\(\): counters\['pending'\] must be an integer"):
        cuda_reclaim.conserved(dict(cuda_reclaim.stats(), pending=True))
    with pytest.raises(ValueError, match=r"conserved\(\): counters\['pending'\] must not be negative"):
        cuda_reclaim.conserved(dict(cuda_reclaim.stats(), pending=-1))


def test_conserved_sums_integer_counts_of_any_type_exactly():
    numpy = pytest.importorskip("numpy")
    counters = dict.fromkeys(cuda_reclaim.COUNTERS, 0)
    counters.update(handed_over=numpy.uint64(2**60), released=numpy.int64(2**60), pending=1)
    assert not cuda_reclaim.conserved(counters), "mixed numpy counts must not sum in floating point"
    counters.update(pending=0)
    assert cuda_reclaim.conserved(counters)
