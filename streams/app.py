"""The faust engine of the projection worker (supported and tested; kept small).

Run: ``sessionstream worker`` (or ``python -m faust -A streams.app:app worker --without-web``).
Configuration and wiring: ``streams.worker``. The other engine, ``streams.engine_kafka``,
drives the same processor from a confluent-kafka consumer loop (ADR 0003).

Correctness does not rest on faust's offset commits (field notes): the body never raises —
Redis writes are retried inside the processor — and an unexpected bug ends the process
before the batch is acknowledged, so a supervisor restart re-reads it; progress and
per-session offsets in Redis make every re-read harmless. faust offers no clean seek
on assignment, so re-read records up to the Redis progress are skipped by the processor
(cheaply, before decoding) instead of not being fetched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

import faust
from faust.tables import TableManager

from sessionstream.core.errors import SchemaUnavailable
from sessionstream.core.pipeline import Record
from sessionstream.core.settings import Settings
from sessionstream.streams.errors import TopicMissing
from sessionstream.streams.lag import INTERVAL_S as LAG_INTERVAL_S
from sessionstream.streams.processor import Processor
from sessionstream.streams.worker import (
    EXIT_BUG,
    EXIT_CONFIG,
    EXIT_UNAVAILABLE,
    WorkerConfig,
    build_processor,
    check_topics,
    process_retrying,
)

if TYPE_CHECKING:
    from sessionstream.streams.lag import LagProbe
    from sessionstream.streams.metrics import WorkerMetrics

log = logging.getLogger("sessionstream.streams.worker")


class _App(faust.App):
    async def on_first_start(self) -> None:
        # faust creates only the last level of its data directory.
        self.conf.datadir.mkdir(parents=True, exist_ok=True)
        await super().on_first_start()


class _Tables(TableManager):
    """faust's table manager, without the fixed one-second sleep it starts with when the
    app has no tables (this one keeps its state in Redis and declares none).

    faust sleeps a second before it finalizes the tables (to let late ones register),
    and the conductor subscribes only after that: every start and every restart of the
    worker paid it, a third of a restart's 2.4 s (bench/bench_restart.py). With no
    table there is nothing to wait for; with tables, faust's own start runs as it is."""

    async def on_start(self) -> None:
        update = getattr(self, "_update_channels", None)  # faust-streaming's own step
        if len(self) or update is None:
            await super().on_start()
            return
        if not self.should_stop:
            await update()
            await self.recovery.start()


# This module is the faust worker process's composition root: faust loads it by name.
cfg = WorkerConfig.from_settings(Settings.from_env())
app = _App(
    cfg.group,
    broker=f"kafka://{cfg.settings.kafka_bootstrap}",
    web_enabled=False,
    TableManager=_Tables,  # no second's wait at start: the app has no tables
    # faust's default is `<app id>-data/` in the working directory (a checkout, a
    # container's workdir): keep it with the process's state instead.
    datadir=cfg.settings.faust_datadir / cfg.group,
    key_serializer="raw",
    value_serializer="raw",
    consumer_auto_offset_reset="earliest",
    topic_allow_declare=False,  # topics come from `sessionstream topics ensure`
    topic_disable_leader=True,
    # faust heartbeats from the event loop: keep the margin for a long batch's fold.
    broker_session_timeout=10,
    # Static membership when the replica has a stable name (streams.worker): a restart
    # takes its partitions back at once instead of waiting for the session timeout.
    consumer_group_instance_id=cfg.instance_id,
    broker_heartbeat_interval=1,
    broker_commit_interval=1.0,
    stream_buffer_maxsize=max(4096, cfg.batch_max * 4),
    broker_max_poll_records=max(500, cfg.batch_max),
)
events = app.topic(cfg.topic, key_type=bytes, value_type=bytes)
_processor: Processor | None = None
#: With ``Settings.metrics_port``: this worker's collectors, its lag probe (streams.lag)
#: and the partitions of the events topic it was assigned (readiness).
_metrics: WorkerMetrics | None = None
_probe: LagProbe | None = None
_assigned: set[int] = set()


@app.task
async def _check_topics() -> None:
    """At worker start: a missing topic is a clear error, not a worker retrying forever."""
    try:
        await asyncio.to_thread(check_topics, cfg)
    except TopicMissing as exc:  # retrying forever would hide a deployment mistake
        log.critical("%s", exc)
        sys.stderr.flush()
        os._exit(EXIT_CONFIG)


def processor() -> Processor:
    global _processor
    if _processor is None:
        _processor = build_processor(cfg)
    return _processor


def _count_partitions() -> None:
    if _metrics is not None:
        _metrics.partitions.set(len(_assigned))


@app.on_partitions_revoked.connect  # type: ignore[arg-type]
async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    processor().forget((tp.topic, tp.partition) for tp in revoked)
    _assigned.difference_update(tp.partition for tp in revoked if tp.topic == cfg.topic)
    _count_partitions()


@app.on_partitions_assigned.connect  # type: ignore[arg-type]
async def _on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
    # Another worker may have moved these partitions on meanwhile: reload from Redis.
    processor().forget((tp.topic, tp.partition) for tp in assigned)
    mine = [tp.partition for tp in assigned if tp.topic == cfg.topic]
    processor().schedule_converge(cfg.topic, mine)
    _assigned.update(mine)
    _count_partitions()


@app.task
async def _serve_metrics() -> None:
    """/metrics, /healthz and /readyz on ``Settings.metrics_port`` (same collectors and
    names as the kafka engine; lag in offsets here counts records not yet in Redis)."""
    global _metrics, _probe
    port = cfg.settings.metrics_port
    if port is None:
        return
    from sessionstream.streams.lag import probe_from_settings
    from sessionstream.streams.metrics import WorkerMetrics, observe_sink, start_server

    _metrics = WorkerMetrics(cfg.settings.tenant)
    _count_partitions()  # the group may have assigned them before this task ran
    proc = processor()
    observe_sink(_metrics, proc.sink)
    _probe = probe_from_settings(cfg.settings, proc.sink, proc.pipeline, cfg.topic, cfg.group)
    await start_server(_metrics, port, lambda: bool(_assigned))
    log.info("metrics on :%d (/metrics, /healthz, /readyz)", port)


@app.timer(interval=LAG_INTERVAL_S)
async def _measure_lag() -> None:
    """Both lags of the assigned partitions, from Redis progress (bounded: streams.lag)."""
    if _metrics is None or _probe is None or not _assigned:
        return
    try:
        lags = await _probe.measure(sorted(_assigned))
    except Exception as exc:  # a metric must never stop the fold
        log.warning("consumer lag not measured: %s: %s", type(exc).__name__, exc)
        return
    _metrics.observe_lag({lag.partition: lag.offsets for lag in lags}, _assigned)
    _metrics.observe_seq_lag({lag.partition: lag.seq for lag in lags if lag.seq is not None},
                             _assigned)


@app.timer(interval=0.2)
async def _converge() -> None:
    """Rebuild bumped units of quiet sessions, a bounded step at a time."""
    proc = processor()
    if proc.converging:
        try:
            await proc.converge_step(cfg.converge_sessions)
        except SchemaUnavailable as exc:  # those sessions refold on their next event
            log.warning("state_version convergence step postponed: %s", exc)


@app.agent(events)
async def project(stream: Any) -> None:
    proc = processor()
    async for batch in stream.take_events(cfg.batch_max, within=cfg.batch_within):
        records = [
            Record(e.message.topic, e.message.partition, e.message.offset,
                   e.message.key, e.message.value, e.message.timestamp and
                   int(e.message.timestamp * 1000))
            for e in batch
        ]
        # faust acknowledges the batch when this body returns, raises or is cancelled
        # (shutdown, rebalance): finish the batch first, and die on a bug instead.
        began = time.monotonic()
        retried = _metrics.schema_retries.inc if _metrics is not None else None
        task = asyncio.ensure_future(process_retrying(proc, records, on_retry=retried))
        try:
            report = await asyncio.shield(task)
        except asyncio.CancelledError:
            await task
            raise
        except SchemaUnavailable as exc:
            log.critical("the schema registry stayed unavailable (%s); exiting before the "
                         "batch is acknowledged, a restart re-reads it", exc)
            os._exit(EXIT_UNAVAILABLE)
        except Exception:
            log.critical("projection processor failed; exiting so the batch is re-read:\n%s",
                         traceback.format_exc())
            os._exit(EXIT_BUG)
        if _metrics is not None:
            _metrics.observe_batch(time.monotonic() - began, report.records, report.skipped,
                                   len(report.dead_letters), len(report.quarantined),
                                   report.conflicts)
            _metrics.observe_verdicts(report.verdicts)
        if report.dead_letters or report.quarantined:
            log.warning("batch: %d records, %d dead letters, %d sessions quarantined",
                        report.records, len(report.dead_letters), len(report.quarantined))
