"""Prometheus metrics of the worker and the compactor, and their HTTP server.

Served on ``Settings.metrics_port`` (off when unset) by the kafka engine and the compactor:
``/metrics``, ``/healthz`` (the event loop runs) and ``/readyz`` (worker: partitions
assigned; compactor: a step of the change feed done). Names follow the Prometheus
conventions (``sessionstream_`` prefix, base units, ``_total`` counters); the tenant is a
label, session ids and content never are (unbounded cardinality, and content must not
leave the process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: The admission verdicts other than ``admitted`` (sessionstream.core.admission.Verdict).
VERDICTS = ("duplicate", "history_conflict", "seq_conflict", "seq_gap", "stale_epoch")
#: Redis calls take well under a millisecond on a quiet loopback: finer buckets than the
#: default (which start at 5 ms).
REDIS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                 2.5, 5.0, 10.0)


class PartitionGauge:
    """A per-partition gauge of one tenant: set for measured partitions, removed for
    partitions no longer assigned (no stale series after a rebalance)."""

    def __init__(self, gauge: Gauge, tenant: str) -> None:
        self.gauge = gauge
        self.tenant = tenant
        self._set: set[str] = set()

    def observe(self, values: Mapping[int, int], assigned: Iterable[int]) -> None:
        keep = {str(p) for p in assigned}
        for partition, value in values.items():
            if str(partition) in keep:
                self.gauge.labels(self.tenant, str(partition)).set(max(0, value))
                self._set.add(str(partition))
        for gone in self._set - keep:
            self.gauge.remove(self.tenant, gone)
        self._set &= keep


def observe_sink(metrics: WorkerMetrics, sink: object) -> None:
    """Time the Redis calls of ``sink`` (a ``streams.sink.RedisSink``) into ``metrics``."""
    retry = getattr(sink, "retry", None)
    if retry is not None and hasattr(retry, "observe"):
        retry.observe = metrics.observe_redis


class WorkerMetrics:
    """One worker's collectors, in their own registry (tests can run several workers)."""

    def __init__(self, tenant: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.tenant = tenant
        r = self.registry
        self.events = Counter("sessionstream_worker_records_total",
                              "Records read from the events topic and processed",
                              ["tenant"], registry=r).labels(tenant)
        self.skipped = Counter("sessionstream_worker_records_skipped_total",
                               "Records at or below the stored progress (redelivered)",
                               ["tenant"], registry=r).labels(tenant)
        self.batch = Histogram("sessionstream_worker_batch_duration_seconds",
                               "Time to fold one batch and write it to Redis",
                               ["tenant"], registry=r).labels(tenant)
        self.dead_letters = Counter("sessionstream_worker_dead_letters_total",
                                    "Undecodable records sent to the dead-letter topic",
                                    ["tenant"], registry=r).labels(tenant)
        self.quarantines = Counter("sessionstream_worker_quarantines_total",
                                   "Sessions stopped by a newer format or unknown required type",
                                   ["tenant"], registry=r).labels(tenant)
        self.conflicts = Counter("sessionstream_worker_redis_conflicts_total",
                                 "Per-session writes refused by the Redis script (re-folded)",
                                 ["tenant"], registry=r).labels(tenant)
        self.partitions = Gauge("sessionstream_worker_assigned_partitions",
                                "Partitions of the events topic this worker folds",
                                ["tenant"], registry=r).labels(tenant)
        self._verdicts = Counter("sessionstream_worker_rejections_total",
                                 "Records the admission rule did not admit, by verdict "
                                 "(refusals and dropped duplicates)",
                                 ["tenant", "verdict"], registry=r)
        for verdict in VERDICTS:
            self._verdicts.labels(tenant, verdict)
        self._lag = PartitionGauge(Gauge(
            "sessionstream_worker_consumer_lag_offsets",
            "Records on the partition past this worker's position (high watermark - "
            "position)", ["tenant", "partition"], registry=r), tenant)
        self._seq_lag = PartitionGauge(Gauge(
            "sessionstream_worker_consumer_lag_seq",
            "Events of the partition's newest record's session not yet visible to readers "
            "(its seq - the session's as_of_seq; 0 once folded)",
            ["tenant", "partition"], registry=r), tenant)
        self._redis = Histogram("sessionstream_worker_redis_duration_seconds",
                                "One Redis call of the sink (retries included), by operation",
                                ["tenant", "op"], registry=r, buckets=REDIS_BUCKETS)
        self.schema_retries = Counter("sessionstream_worker_schema_retries_total",
                                      "Batches retried because the schema registry did "
                                      "not answer (never dead-lettered)",
                                      ["tenant"], registry=r).labels(tenant)
        self.last_batch = Gauge("sessionstream_worker_last_batch_timestamp_seconds",
                                "When the last batch reached Redis (Unix time)",
                                ["tenant"], registry=r).labels(tenant)

    def observe_batch(self, seconds: float, records: int, skipped: int, dead_letters: int,
                      quarantined: int, conflicts: int) -> None:
        self.batch.observe(seconds)
        self.events.inc(records)
        self.skipped.inc(skipped)
        self.dead_letters.inc(dead_letters)
        self.quarantines.inc(quarantined)
        self.conflicts.inc(conflicts)
        self.last_batch.set(time.time())

    def observe_redis(self, what: str, seconds: float) -> None:
        """A sink call (``streams.sink.Retry.observe``): ``what`` is its fixed name."""
        self._redis.labels(self.tenant, what.replace(" ", "_")).observe(seconds)

    def observe_verdicts(self, verdicts: Mapping[str, int]) -> None:
        for verdict, n in verdicts.items():
            self._verdicts.labels(self.tenant, verdict).inc(n)

    def observe_lag(self, lags: Mapping[int, int], assigned: Iterable[int]) -> None:
        """Set each partition's lag in offsets; drop partitions no longer assigned."""
        self._lag.observe(lags, assigned)

    def observe_seq_lag(self, lags: Mapping[int, int], assigned: Iterable[int]) -> None:
        """Set each partition's lag in ``as_of_seq`` (streams.lag); drop unassigned ones."""
        self._seq_lag.observe(lags, assigned)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class CompactorMetrics:
    """The compaction watcher's attempts by outcome (``compacted``, ``not_needed``,
    ``skipped``, ``failed``), and whether it has completed a step (readiness)."""

    OUTCOMES = ("compacted", "not_needed", "skipped", "failed")

    def __init__(self, tenant: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._outcomes = Counter("sessionstream_compactor_compactions_total",
                                 "Compaction decisions by outcome", ["tenant", "outcome"],
                                 registry=self.registry)
        self.tenant = tenant
        for outcome in self.OUTCOMES:
            self._outcomes.labels(tenant, outcome)
        self.feed_entries = Counter("sessionstream_compactor_feed_entries_total",
                                    "Change-feed entries the compactor read",
                                    ["tenant"], registry=self.registry).labels(tenant)
        self.steps = 0

    def observe_step(self, summary: object) -> None:
        for outcome in self.OUTCOMES:
            self._outcomes.labels(self.tenant, outcome).inc(int(getattr(summary, outcome)))
        self.feed_entries.inc(int(getattr(summary, "entries")))  # noqa: B009
        self.steps += 1

    def ready(self) -> bool:
        return self.steps > 0

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


async def start_server(metrics: WorkerMetrics | CompactorMetrics, port: int,
                       ready: Callable[[], bool], host: str = "0.0.0.0") -> web.AppRunner:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port``; returns the runner."""

    async def metrics_view(_: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
