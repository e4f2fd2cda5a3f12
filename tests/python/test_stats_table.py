"""stats() has one source of truth, the C table of bindings/stats_table.cc: every list of its keys (the
groups, STATS_DOCS, the stubs, the exit report, README's table) must agree with it."""

import os
import re

import pytest

import cuda_reclaim
import exit_report
from cuda_reclaim import _reclaim

GROUPS = ("STATS_KEYS", "SOURCE_KEYS", "HOLD_KEYS", "CALL_KEYS")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def test_the_gauges_are_described_as_gauges(drained):
    gauges = {"pending", "in_drain", "held_by_cuda", "calls_outstanding"}
    for key in gauges:
        assert "gauge" in cuda_reclaim.STATS_DOCS[key] or "now" in cuda_reclaim.STATS_DOCS[key], key


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


def readme_rows():
    text = open(os.path.join(ROOT, "README.md")).read()
    section = re.split(r"^#+ Counters$", text, maxsplit=1, flags=re.M)[1]
    return [line for line in section.splitlines() if line.startswith("| `")]


def expected_readme_rows():
    return [f"| `{key}` | {description} |" for key, description in cuda_reclaim.STATS_DOCS.items()]


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "README.md")), reason="README.md is not shipped here")
def test_the_readme_table_lists_every_key_with_its_description():
    assert readme_rows() == expected_readme_rows()
