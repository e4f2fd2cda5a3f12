"""Prometheus metrics for cuda_reclaim: ``cuda_reclaim.metrics.register()`` exports every key of
:func:`cuda_reclaim.stats` (described by :data:`cuda_reclaim.STATS_DOCS`); needs the ``metrics`` extra
(``pip install cuda-reclaim[metrics]``).

Counters are named ``cuda_reclaim_<key>_total``; the gauges (:data:`GAUGE_KEYS`) ``cuda_reclaim_<key>``.
Each scrape reads :func:`cuda_reclaim.stats` once, so the values exported together are one snapshot.
"""

try:
    import prometheus_client
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError as _error:
    raise ImportError(
        "cuda_reclaim.metrics needs prometheus-client: pip install cuda-reclaim[metrics]"
    ) from _error

import cuda_reclaim

__all__ = ["GAUGE_KEYS", "ReclaimCollector", "register"]

#: Keys of :func:`cuda_reclaim.stats` exported as gauges (values that go down, and the high-water mark).
GAUGE_KEYS = ("pending", "in_drain", "held_by_cuda", "calls_outstanding", "max_pending")


class ReclaimCollector:
    """A prometheus_client collector of :func:`cuda_reclaim.stats`."""

    def collect(self):
        counters = cuda_reclaim.stats()
        for key, value in counters.items():
            doc = cuda_reclaim.STATS_DOCS.get(key, key)
            if key in GAUGE_KEYS:
                yield GaugeMetricFamily(f"cuda_reclaim_{key}", doc, value=value)
            else:
                # CounterMetricFamily appends the _total suffix to the samples' name.
                yield CounterMetricFamily(f"cuda_reclaim_{key}", doc, value=value)

    def describe(self):
        # Without describe(), register() would call collect() (one stats() read) just to learn the names.
        for key in cuda_reclaim.STATS_DOCS:
            family = GaugeMetricFamily if key in GAUGE_KEYS else CounterMetricFamily
            yield family(f"cuda_reclaim_{key}", cuda_reclaim.STATS_DOCS[key])


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
