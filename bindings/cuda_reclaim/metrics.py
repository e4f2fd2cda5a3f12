"""Prometheus metrics for cuda_reclaim: every key of :func:`cuda_reclaim.stats`, in Prometheus' own shape.
Needs the ``metrics`` extra (``pip install cuda-reclaim[metrics]``)::

    import cuda_reclaim.metrics

    cuda_reclaim.metrics.register()  # prometheus_client's default registry; or register(registry)

What is exported, each kind read from the one counter table (``cuda_reclaim._reclaim.STATS_KINDS``, defined
with every key in C), never listed here:

- a counter (a value that only grows) as ``cuda_reclaim_<key>_total``;
- a gauge (a level that goes up and down) as ``cuda_reclaim_<key>``; a high-water mark (``max_pending``: the
  highest level seen, a level rather than a count) as a gauge too;
- ``handed_over`` split by source, as one counter family with a ``source`` label whose values are the keys
  of :data:`cuda_reclaim.SOURCE_KEYS`: ``cuda_reclaim_handed_over_total{source="graph_user_objects"}`` and so
  on. The sources split ``handed_over`` exactly whenever no hand-over is in flight, so ``sum()`` over the
  family is ``handed_over``; the per-source keys are not exported again on their own;
- ``cuda_reclaim_info{version="...",abi="..."} 1``: the package's version and :data:`cuda_reclaim.ABI_VERSION`.

A family's HELP is its key's one line of ``cuda_reclaim._reclaim.STATS_HELP``; the full description of
every key is :data:`cuda_reclaim.STATS_DOCS`. Each scrape reads :func:`cuda_reclaim.stats` once, so the
values exported together are one snapshot.
"""

try:
    import prometheus_client
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
except ImportError as _error:
    raise ImportError(
        "cuda_reclaim.metrics needs prometheus-client: pip install cuda-reclaim[metrics]"
    ) from _error

import cuda_reclaim
from cuda_reclaim import _reclaim

__all__ = ["ReclaimCollector", "register"]

_PREFIX = "cuda_reclaim_"
# The key that the per-source keys (SOURCE_KEYS) split, and the label that tells them apart.
_SPLIT_KEY = "handed_over"
_SOURCE_LABEL = "source"
_INFO_HELP = "cuda-reclaim's package version and C ABI version"


def _families(counters):
    """The metric families of one reading of stats(), `counters`, in the order of its keys."""
    kinds, helps, sources = _reclaim.STATS_KINDS, _reclaim.STATS_HELP, _reclaim.SOURCE_KEYS
    yield InfoMetricFamily(
        _PREFIX.rstrip("_"), _INFO_HELP,
        value={"version": cuda_reclaim.__version__, "abi": str(cuda_reclaim.ABI_VERSION)})
    for key, value in counters.items():
        if key in sources:
            continue  # a label value of the split key's family
        if key == _SPLIT_KEY:
            family = CounterMetricFamily(_PREFIX + key, helps[key] + ", by source", labels=[_SOURCE_LABEL])
            for source in sources:
                family.add_metric([source], counters[source])
            yield family
        elif kinds[key] == "counter":
            # CounterMetricFamily appends the _total suffix to the samples' name.
            yield CounterMetricFamily(_PREFIX + key, helps[key], value=value)
        else:  # "gauge", "high_water_mark"
            yield GaugeMetricFamily(_PREFIX + key, helps[key], value=value)


class ReclaimCollector:
    """A prometheus_client collector of :func:`cuda_reclaim.stats` (see the module's description)."""

    def collect(self):
        """The metric families of one :func:`cuda_reclaim.stats` reading."""
        return _families(cuda_reclaim.stats())

    def describe(self):
        """The families without reading :func:`cuda_reclaim.stats` (prometheus_client's duplicate check)."""
        return _families(dict.fromkeys(_reclaim.STATS_KINDS, 0))


def register(registry=None):
    """Register a :class:`ReclaimCollector` with ``registry`` (default: ``prometheus_client.REGISTRY``) and
    return it. Registering twice in one registry raises ValueError (prometheus_client's duplicate check)."""
    if registry is None:
        registry = prometheus_client.REGISTRY
    elif not hasattr(registry, "register"):
        raise TypeError(f"register(): registry must be a CollectorRegistry or None, not {type(registry).__name__}")
    collector = ReclaimCollector()
    registry.register(collector)
    return collector
