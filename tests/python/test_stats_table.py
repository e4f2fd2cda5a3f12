"""stats() has one source of truth, the C table of bindings/stats_table.cc: every list of its keys (the
groups, STATS_DOCS, the kinds and help lines, the stubs, the exit report, the counters table of docs/api.md)
must agree with it."""

import os
import re

import pytest

import cuda_reclaim
import fake_cuda
import exit_report
from cuda_reclaim import _reclaim

GROUPS = ("STATS_KEYS", "SOURCE_KEYS", "HOLD_KEYS", "CALL_KEYS")
# The source tree, through this file's own link (Bazel's runfiles link each file to its source).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
API_DOC = os.path.join(ROOT, "docs", "api.md")
KIND_WORDS = {"counter": "counter", "gauge": "gauge", "high_water_mark": "high-water mark"}


def test_the_groups_partition_the_keys_of_stats_in_order(drained):
    keys = sum((getattr(cuda_reclaim, group) for group in GROUPS), ())
    assert tuple(cuda_reclaim.stats()) == keys
    assert len(set(keys)) == len(keys)


def test_every_key_is_described_in_order(drained):
    assert tuple(cuda_reclaim.STATS_DOCS) == tuple(cuda_reclaim.stats())
    for key, description in cuda_reclaim.STATS_DOCS.items():
        assert isinstance(description, str) and len(description) > 10, key


def test_the_buckets_are_queue_counters_and_the_law_uses_them(drained):
    assert set(cuda_reclaim.CONSERVATION_BUCKETS) < set(cuda_reclaim.STATS_KEYS)
    assert "handed_over" not in cuda_reclaim.CONSERVATION_BUCKETS
    assert cuda_reclaim.conserved(cuda_reclaim.stats())


def test_the_package_takes_every_list_from_the_extension():
    for name in (*GROUPS, "STATS_DOCS", "CONSERVATION_BUCKETS"):
        assert getattr(cuda_reclaim, name) is getattr(_reclaim, name), name


def test_every_key_has_a_kind_and_a_help_line_in_order(drained):
    assert tuple(_reclaim.STATS_KINDS) == tuple(cuda_reclaim.stats())
    assert tuple(_reclaim.STATS_HELP) == tuple(cuda_reclaim.stats())
    assert set(_reclaim.STATS_KINDS.values()) <= set(KIND_WORDS)


def test_the_kinds_are_what_the_counters_do(drained):
    kinds = _reclaim.STATS_KINDS
    # Levels that go down: the queue's length, what drains hold, what CUDA holds, the calls not yet done, and
    # what a fork abandoned (a drain that went on in the child settles out of it).
    gauges = {"pending", "in_drain", "held_by_cuda", "calls_outstanding", "abandoned_after_fork"}
    assert {key for key, kind in kinds.items() if kind == "gauge"} == gauges
    assert {key for key, kind in kinds.items() if kind == "high_water_mark"} == {"max_pending"}
    for key in ("pending", "in_drain", "held_by_cuda", "calls_outstanding"):
        assert "gauge" in cuda_reclaim.STATS_DOCS[key] or "now" in cuda_reclaim.STATS_DOCS[key], key
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


def test_the_stub_lists_the_keys_of_every_group():
    stub = open(os.path.join(os.path.dirname(cuda_reclaim.__file__), "__init__.pyi")).read()
    block = re.search(r"# The keys of stats\(\), by group[^\n]*\n[^\n]*\n((?:#  .*\n)+)", stub)
    assert block, "__init__.pyi lost its list of the keys of stats()"
    documented, group = {}, None
    for line in block.group(1).splitlines():
        match = re.match(r"#\s+(\w+_KEYS):(.*)", line)
        if match:
            group = match.group(1)
            documented[group] = match.group(2).split()
        else:
            documented[group] += line.lstrip("#").split()
    assert documented == {group: list(getattr(cuda_reclaim, group)) for group in GROUPS}


def test_every_field_of_the_exit_report_is_a_key_of_stats(drained):
    fields = exit_report.parse_line(_reclaim.report().strip())
    assert set(fields) - {"conserved"} <= set(cuda_reclaim.STATS_DOCS)
    assert set(cuda_reclaim.STATS_KEYS) | set(cuda_reclaim.HOLD_KEYS) <= set(fields)


def api_doc_rows():
    text = open(API_DOC, encoding="utf-8").read()
    section = re.split(r"^## Counters$", text, maxsplit=1, flags=re.M)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.M)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def expected_api_doc_rows():
    return [f"| `{key}` | {KIND_WORDS[_reclaim.STATS_KINDS[key]]} | {description} |"
            for key, description in cuda_reclaim.STATS_DOCS.items()]


@pytest.mark.skipif(not os.path.exists(API_DOC), reason="docs/api.md is not beside the tests here")
def test_the_api_reference_lists_every_key_with_its_kind_and_description():
    assert api_doc_rows() == expected_api_doc_rows()


def test_no_counter_goes_down_between_two_reads_under_load():
    fake_cuda.run_script("counters_never_go_down_under_load.py", timeout=60)
