"""The faust worker: the composition root of the projection processor (kept small).

Run: ``sessionstream worker`` (or ``python -m faust -A streams.app:app worker --without-web``).
Configured by ``Settings.from_env()`` plus, for this worker only:

- ``SESSIONSTREAM_STREAMS_GROUP``  faust app id = consumer group
  (default ``sessionstream-projections``)
- ``SESSIONSTREAM_KEY_PREFIX``     Redis key prefix (default ``ss``)
- ``SESSIONSTREAM_EVENTS_TOPIC`` / ``SESSIONSTREAM_DLQ_TOPIC``  override the tenant's topics
- ``SESSIONSTREAM_BATCH_MAX`` / ``SESSIONSTREAM_BATCH_WITHIN_MS``  batch size / wait (500 / 10)

Correctness does not rest on faust's offset commits (field notes): the body never raises —
Redis writes are retried inside the processor — and an unexpected bug ends the process
before the batch is acknowledged, so a supervisor restart re-reads it; progress and
per-session offsets in Redis make every re-read harmless.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from dataclasses import dataclass
from typing import Any

import faust
from redis.asyncio import Redis

from sessionstream.keys import DEFAULT_PREFIX
from sessionstream.settings import Settings
from streams.kafka_io import KafkaDeadLetters, KafkaLogReader
from streams.ports import Core, Record
from streams.processor import Processor
from streams.sink import RedisSink, Retry

log = logging.getLogger("sessionstream.streams.worker")

#: Exit status when the processor meets a bug: nothing of the batch is acknowledged.
EXIT_BUG = 70


@dataclass(frozen=True)
class WorkerConfig:
    settings: Settings
    group: str
    prefix: str
    topic: str
    dlq_topic: str
    batch_max: int
    batch_within: float

    @classmethod
    def from_env(cls) -> WorkerConfig:
        settings = Settings.from_env()
        env = os.environ
        return cls(
            settings=settings,
            group=env.get("SESSIONSTREAM_STREAMS_GROUP") or "sessionstream-projections",
            prefix=env.get("SESSIONSTREAM_KEY_PREFIX") or DEFAULT_PREFIX,
            topic=env.get("SESSIONSTREAM_EVENTS_TOPIC") or settings.events_topic,
            dlq_topic=env.get("SESSIONSTREAM_DLQ_TOPIC") or settings.dlq_topic,
            batch_max=int(env.get("SESSIONSTREAM_BATCH_MAX") or 500),
            batch_within=int(env.get("SESSIONSTREAM_BATCH_WITHIN_MS") or 10) / 1000,
        )


def build_processor(cfg: WorkerConfig) -> Processor:
    redis = Redis.from_url(cfg.settings.redis_url, decode_responses=True)
    sink = RedisSink(redis, prefix=cfg.prefix, tenant=cfg.settings.tenant,
                     retry=Retry(attempts=None))
    return Processor(
        core=Core.default(), sink=sink, group=cfg.group,
        log_reader=KafkaLogReader(cfg.settings.kafka_bootstrap),
        dead_letters=KafkaDeadLetters(cfg.settings.kafka_bootstrap, cfg.dlq_topic),
    )


cfg = WorkerConfig.from_env()
app = faust.App(
    cfg.group,
    broker=f"kafka://{cfg.settings.kafka_bootstrap}",
    web_enabled=False,
    key_serializer="raw",
    value_serializer="raw",
    consumer_auto_offset_reset="earliest",
    topic_allow_declare=False,  # topics come from `sessionstream topics ensure`
    topic_disable_leader=True,
    broker_session_timeout=10,
    broker_heartbeat_interval=1,
    broker_commit_interval=1.0,
    stream_buffer_maxsize=max(4096, cfg.batch_max * 4),
    broker_max_poll_records=max(500, cfg.batch_max),
)
events = app.topic(cfg.topic, key_type=bytes, value_type=bytes)
_processor: Processor | None = None


def processor() -> Processor:
    global _processor
    if _processor is None:
        _processor = build_processor(cfg)
    return _processor


@app.on_partitions_revoked.connect  # type: ignore[arg-type]
async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    processor().forget((tp.topic, tp.partition) for tp in revoked)


@app.on_partitions_assigned.connect  # type: ignore[arg-type]
async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
    # Another worker may have moved these partitions on meanwhile: reload from Redis.
    processor().forget((tp.topic, tp.partition) for tp in assigned)


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
        task = asyncio.ensure_future(proc.process(records))
        try:
            report = await asyncio.shield(task)
        except asyncio.CancelledError:
            await task
            raise
        except Exception:
            log.critical("projection processor failed; exiting so the batch is re-read:\n%s",
                         traceback.format_exc())
            os._exit(EXIT_BUG)
        if report.dead_letters or report.quarantined:
            log.warning("batch: %d records, %d dead letters, %d sessions quarantined",
                        report.records, len(report.dead_letters), len(report.quarantined))
