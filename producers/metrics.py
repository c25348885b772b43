"""Prometheus counters of session writers: the adapter behind ``WriterConfig.stats``.

The writer knows only the :class:`producers.config.WriterStats` protocol; a process that
exports metrics passes ``WriterConfig(..., stats=WriterMetrics(tenant))`` and serves
``registry`` (``prometheus_client.generate_latest`` or ``start_http_server``).
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter

#: ``WriterStats.fenced`` reasons (bounded label values).
FENCE_REASONS = ("hand_off", "lease_renewal", "not_admitted")
#: ``WriterStats.delivery_error`` states.
DELIVERY_STATES = ("failed", "possibly-persisted")


class WriterMetrics:
    """``sessionstream_writer_fenced_total{tenant,reason}`` and
    ``sessionstream_writer_delivery_errors_total{tenant,state}``."""

    def __init__(self, tenant: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self.tenant = tenant
        self._fenced = Counter("sessionstream_writer_fenced_total",
                               "Writers that learned another writer took their session",
                               ["tenant", "reason"], registry=self.registry)
        self._delivery = Counter("sessionstream_writer_delivery_errors_total",
                                 "Records the broker did not confirm (failed or possibly "
                                 "persisted)", ["tenant", "state"], registry=self.registry)
        for reason in FENCE_REASONS:
            self._fenced.labels(tenant, reason)
        for state in DELIVERY_STATES:
            self._delivery.labels(tenant, state)

    def fenced(self, reason: str) -> None:
        self._fenced.labels(self.tenant, reason).inc()

    def delivery_error(self, state: str) -> None:
        self._delivery.labels(self.tenant, state).inc()
