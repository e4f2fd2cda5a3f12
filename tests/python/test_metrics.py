"""cuda_reclaim.metrics: Prometheus' shape, with every name, kind, help line and label taken from the counter
table (cuda_reclaim.COUNTERS), and the example scrape of docs/api.md."""

import os
import re

import pytest

prometheus_client = pytest.importorskip("prometheus_client", reason="prometheus-client is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import cuda_reclaim  # noqa: E402
from cuda_reclaim import metrics  # noqa: E402
from conftest import run_child_script  # noqa: E402

# A kind of the table as Prometheus' TYPE: a high-water mark is a level, exported as a gauge.
PROMETHEUS_TYPE = {"counter": "counter", "gauge": "gauge", "high_water_mark": "gauge"}
# The source tree, through this file's own link (Bazel's runfiles link each file to its source).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
API_DOC = os.path.join(ROOT, "docs", "api.md")
# What importing the package and cuda_reclaim.metrics loads, in a fresh interpreter.
SCENARIOS = "metrics_scenarios.py"


def exposition(registry):
    """The text a scrape of `registry` returns."""
    return prometheus_client.generate_latest(registry).decode()


def parse(text):
    return {family.name: family for family in text_string_to_metric_families(text)}


def type_lines(text):
    """{metric name: type} from the exposition's # TYPE lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def expected_types():
    """{# TYPE name: type} that the table asks for: counters end in _total, gauges and high-water marks plain,
    the keys of source origin only as labels of handed_over's family, and the info metric."""
    expected = {"cuda_reclaim_info": "gauge"}
    for key, counter in cuda_reclaim.COUNTERS.items():
        if counter.source == "origin":
            continue
        suffix = "_total" if counter.kind == "counter" else ""
        expected[f"cuda_reclaim_{key}{suffix}"] = PROMETHEUS_TYPE[counter.kind]
    return expected


def origins():
    return [key for key, counter in cuda_reclaim.COUNTERS.items() if counter.source == "origin"]


def fresh_registry():
    registry = prometheus_client.CollectorRegistry()
    collector = metrics.register(registry)
    assert isinstance(collector, metrics.ReclaimCollector)
    return registry


def test_names_and_kinds_follow_the_table():
    text = exposition(fresh_registry())
    assert type_lines(text) == expected_types()
    # What the counters do decides their kind: these two, at least, are not what their names might suggest.
    assert cuda_reclaim.COUNTERS["max_pending"].kind == "high_water_mark"
    assert type_lines(text)["cuda_reclaim_max_pending"] == "gauge"
    assert cuda_reclaim.COUNTERS["abandoned_after_fork"].kind == "gauge"
    assert "cuda_reclaim_abandoned_after_fork_total" not in type_lines(text)


def test_every_kind_and_help_line_comes_from_the_table():
    assert {counter.kind for counter in cuda_reclaim.COUNTERS.values()} == set(PROMETHEUS_TYPE)
    families = parse(exposition(fresh_registry()))
    for key, counter in cuda_reclaim.COUNTERS.items():
        if counter.source == "origin":
            continue
        # The parser takes _total off a counter's family name.
        family = families[f"cuda_reclaim_{key}"]
        assert family.type == PROMETHEUS_TYPE[counter.kind], key
        assert family.documentation == counter.help + (", by source" if key == "handed_over" else ""), key


def test_handed_over_is_one_family_split_by_source_and_values_are_one_reading(drained):
    registry = fresh_registry()
    cuda_reclaim.defer_release(object())
    families = parse(exposition(registry))
    counters = cuda_reclaim.stats()
    handed_over = families["cuda_reclaim_handed_over"]
    assert handed_over.type == "counter"
    assert [(s.name, s.labels) for s in handed_over.samples] == [
        ("cuda_reclaim_handed_over_total", {"source": key}) for key in origins()]
    by_source = {s.labels["source"]: s.value for s in handed_over.samples}
    # Nothing is in flight here: the sources split handed_over exactly, and a direct push is counted as one.
    assert sum(by_source.values()) == counters["handed_over"]
    assert by_source["direct_pushes"] == counters["direct_pushes"] >= 1
    for key, counter in cuda_reclaim.COUNTERS.items():
        if counter.source == "origin" or key == "handed_over":
            continue
        [sample] = families[f"cuda_reclaim_{key}"].samples
        assert sample.labels == {}
        assert sample.value == counters[key], key  # the automatic drain is off: nothing changed in between


def test_the_info_metric_names_the_version_and_the_abi():
    families = parse(exposition(fresh_registry()))
    # The text format has no info type: an info metric is a gauge of value 1 whose labels carry the data.
    [sample] = families["cuda_reclaim_info"].samples
    assert families["cuda_reclaim_info"].type == "gauge"
    assert sample.name == "cuda_reclaim_info"
    assert sample.labels == {"version": cuda_reclaim.__version__, "abi": str(cuda_reclaim.ABI_VERSION)}
    assert sample.value == 1


def test_counters_follow_releases():
    registry = fresh_registry()
    before = parse(exposition(registry))["cuda_reclaim_released"].samples[0].value
    cuda_reclaim.defer_release(object())
    cuda_reclaim.drain()
    after = parse(exposition(registry))["cuda_reclaim_released"].samples[0].value
    assert after >= before + 1
    assert after == cuda_reclaim.stats()["released"]


def doc_scrape():
    """The example scrape of docs/api.md (its `text` block after "A scrape")."""
    if not os.path.isfile(API_DOC):
        pytest.skip("docs/api.md is not beside the tests here")
    text = open(API_DOC, encoding="utf-8").read()
    match = re.search(r"^A scrape.*?^```text\n(.*?)^```$", text, re.M | re.S)
    assert match, "docs/api.md lost its example scrape"
    return match.group(1)


def shape(text):
    """A scrape without its values: each family's name, type, help, and each sample's name and labels (the
    info metric's values too)."""
    return [(f.name, f.type, f.documentation, [(s.name, s.labels) for s in f.samples])
            for f in text_string_to_metric_families(text)]


def test_the_docs_example_scrape_is_what_a_scrape_renders():
    documented = doc_scrape()
    rendered = exposition(fresh_registry())
    assert type_lines(documented) == expected_types()
    info = [s for f in text_string_to_metric_families(documented) for s in f.samples if s.name == "cuda_reclaim_info"]
    assert [sorted(s.labels) for s in info] == [["abi", "version"]]
    # The version in the docs is an example; everything else is what a scrape says.
    current = f'version="{cuda_reclaim.__version__}"'
    assert shape(re.sub(r'version="[^"]*"', current, documented)) == shape(rendered)
    assert documented.replace("\n", "").strip() and rendered.splitlines()[0] == documented.splitlines()[0]


def test_register_twice_and_wrong_registry():
    registry = prometheus_client.CollectorRegistry()
    metrics.register(registry)
    with pytest.raises(ValueError):
        metrics.register(registry)
    with pytest.raises(TypeError, match=r"^register\(\): registry must be"):
        metrics.register("registry")


def test_describe_reads_no_counters(monkeypatch):
    def no_read():
        raise AssertionError("describe() read stats()")

    monkeypatch.setattr(cuda_reclaim, "stats", no_read)
    names = [family.name for family in metrics.ReclaimCollector().describe()]
    assert "cuda_reclaim_handed_over" in names and "cuda_reclaim" in names


def test_import_cuda_reclaim_does_not_import_prometheus_client():
    result = run_child_script(SCENARIOS, "import_the_package", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_import_without_prometheus_client_names_the_extra():
    result = run_child_script(SCENARIOS, "import_metrics_without_prometheus_client", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "pip install cuda-reclaim[metrics]" in result.stdout
