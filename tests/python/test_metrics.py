"""cuda_reclaim.metrics: every stats() key exported with its description, type and value."""

import os
import subprocess
import sys

import pytest

prometheus_client = pytest.importorskip("prometheus_client", reason="prometheus-client is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import cuda_reclaim  # noqa: E402
from cuda_reclaim import metrics  # noqa: E402


def scrape(registry):
    text = prometheus_client.generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_every_key_exported_with_help_type_and_value():
    cuda_reclaim.drain()
    registry = prometheus_client.CollectorRegistry()
    collector = metrics.register(registry)
    assert isinstance(collector, metrics.ReclaimCollector)
    families = scrape(registry)
    expected = cuda_reclaim.stats()
    assert len(families) == len(expected)
    for key, value in expected.items():
        family = families[f"cuda_reclaim_{key}"]
        assert family.documentation == cuda_reclaim.STATS_DOCS[key]
        if key in metrics.GAUGE_KEYS:
            assert family.type == "gauge"
            assert [(s.name, s.value) for s in family.samples] == [(f"cuda_reclaim_{key}", value)]
        else:
            assert family.type == "counter"
            assert [(s.name, s.value) for s in family.samples] == [(f"cuda_reclaim_{key}_total", value)]


def test_counters_follow_releases():
    registry = prometheus_client.CollectorRegistry()
    metrics.register(registry)
    before = scrape(registry)["cuda_reclaim_released"].samples[0].value
    cuda_reclaim.defer_release(object())
    cuda_reclaim.drain()
    after = scrape(registry)["cuda_reclaim_released"].samples[0].value
    assert after >= before + 1
    assert after == cuda_reclaim.stats()["released"]


def test_register_twice_and_wrong_registry():
    registry = prometheus_client.CollectorRegistry()
    metrics.register(registry)
    with pytest.raises(ValueError):
        metrics.register(registry)
    with pytest.raises(TypeError, match=r"^register\(\): registry must be"):
        metrics.register("registry")


def run_python(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_import_cuda_reclaim_does_not_import_prometheus_client():
    result = run_python("import sys, cuda_reclaim; print('prometheus_client' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_import_without_prometheus_client_names_the_extra():
    code = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"
        "try:\n"
        "    import cuda_reclaim.metrics\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "pip install cuda-reclaim[metrics]" in result.stdout
