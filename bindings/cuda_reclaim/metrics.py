"""Prometheus metrics for cuda_reclaim: every key of :func:`cuda_reclaim.stats`, in Prometheus' own shape.
Needs the ``metrics`` extra (``pip install cuda-reclaim[metrics]``)::

    import cuda_reclaim.metrics

    cuda_reclaim.metrics.register()  # prometheus_client's default registry; or register(registry)

What is exported, each kind read from the one counter table (:data:`cuda_reclaim.COUNTERS`), never listed
here:

- a counter (a value that only grows) as ``cuda_reclaim_<key>_total``;
- a gauge (a level that goes up and down) as ``cuda_reclaim_<key>``; a high-water mark (``max_pending``: the
  highest level seen, a level rather than a count) as a gauge too;
- ``handed_over`` split by source, as one counter family with a ``source`` label whose values are the keys
  of source ``"origin"`` in :data:`cuda_reclaim.COUNTERS`:
  ``cuda_reclaim_handed_over_total{source="graph_user_objects"}`` and so on. They split ``handed_over``
  exactly whenever no hand-over is in flight, so ``sum()`` over the family is ``handed_over``; they are not
  exported again on their own;
- ``cuda_reclaim_info{version="...",abi="..."} 1``: the package's version and :data:`cuda_reclaim.ABI_VERSION`.

A family's HELP is its key's ``help`` line in :data:`cuda_reclaim.COUNTERS`, which also has the full
``description`` of every key. Each scrape reads :func:`cuda_reclaim.stats` once, so the
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

__all__ = ["ReclaimCollector", "register"]

_PREFIX = "cuda_reclaim_"
# The key that the rows of source "origin" split, the source of those rows, and the label that tells them apart.
_SPLIT_KEY = "handed_over"
_ORIGIN = "origin"
_SOURCE_LABEL = "source"
_INFO_HELP = "cuda-reclaim's package version and C ABI version"


def _families(counters):
    """The metric families of one reading of stats(), `counters`, in the order of its keys."""
    table = cuda_reclaim.COUNTERS
    sources = [key for key, counter in table.items() if counter.source == _ORIGIN]
    yield InfoMetricFamily(
        _PREFIX.rstrip("_"), _INFO_HELP,
        value={"version": cuda_reclaim.__version__, "abi": str(cuda_reclaim.ABI_VERSION)})
    for key, value in counters.items():
        if key in sources:
            continue  # a label value of the split key's family
        if key == _SPLIT_KEY:
            family = CounterMetricFamily(_PREFIX + key, table[key].help + ", by source", labels=[_SOURCE_LABEL])
            for source in sources:
                family.add_metric([source], counters[source])
            yield family
        elif table[key].kind == "counter":
            # CounterMetricFamily appends the _total suffix to the samples' name.
            yield CounterMetricFamily(_PREFIX + key, table[key].help, value=value)
        else:  # "gauge", "high_water_mark"
            yield GaugeMetricFamily(_PREFIX + key, table[key].help, value=value)


class ReclaimCollector:
    """A prometheus_client collector of :func:`cuda_reclaim.stats` (see the module's description)."""

    def collect(self):
        """The metric families of one :func:`cuda_reclaim.stats` reading."""
        return _families(cuda_reclaim.stats())

    def describe(self):
        """The families without reading :func:`cuda_reclaim.stats` (prometheus_client's duplicate check)."""
        return _families(dict.fromkeys(cuda_reclaim.COUNTERS, 0))


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
