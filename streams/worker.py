"""The worker's composition root, shared by both engines (faust and kafka).

Configured by ``Settings.from_env()`` plus, for the worker only:

- ``SESSIONSTREAM_STREAMS_GROUP``  consumer group (default ``sessionstream-projections``)
- ``SESSIONSTREAM_KEY_PREFIX``     Redis key prefix (default ``ss``)
- ``SESSIONSTREAM_EVENTS_TOPIC`` / ``SESSIONSTREAM_DLQ_TOPIC``  override the tenant's topics
- ``SESSIONSTREAM_BATCH_MAX`` / ``SESSIONSTREAM_BATCH_WITHIN_MS``  batch size / wait (500 / 10)
- ``SESSIONSTREAM_CONVERGE_SESSIONS``  sessions checked per step when converging
  bumped ``state_version``s after an assignment (default 64)
- ``SESSIONSTREAM_WORKER_INSTANCE``  a stable name of this worker replica (e.g. the
  StatefulSet pod name): static group membership (``group.instance.id``), so a worker
  restarted after a crash takes its partitions back at once instead of waiting for the
  group's session timeout. Unique per replica; unset: dynamic membership.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sessionstream import redisconn
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.governance.wiring import reader_pipeline
from streams.errors import TopicMissing
from streams.kafka_io import KafkaDeadLetters, KafkaLogReader, missing_topics
from streams.processor import Processor
from streams.sink import RedisSink, Retry

#: Exit status when the processor meets a bug: nothing of the batch is acknowledged.
EXIT_BUG = 70
#: Exit status when a topic the worker needs does not exist.
EXIT_CONFIG = 78


@dataclass(frozen=True)
class WorkerConfig:
    settings: Settings
    group: str
    prefix: str
    topic: str
    dlq_topic: str
    batch_max: int
    batch_within: float
    converge_sessions: int = 64
    instance_id: str | None = None  # static group membership (see module docstring)

    @classmethod
    def from_env(cls) -> WorkerConfig:
        settings = Settings.from_env()
        env = os.environ
        return cls(
            settings=settings,
            group=env.get("SESSIONSTREAM_STREAMS_GROUP") or "sessionstream-projections",
            prefix=settings.key_prefix,
            topic=settings.events_topic,
            dlq_topic=settings.dlq_topic,
            batch_max=int(env.get("SESSIONSTREAM_BATCH_MAX") or 500),
            batch_within=int(env.get("SESSIONSTREAM_BATCH_WITHIN_MS") or 10) / 1000,
            converge_sessions=int(env.get("SESSIONSTREAM_CONVERGE_SESSIONS") or 64),
            instance_id=env.get("SESSIONSTREAM_WORKER_INSTANCE") or None,
        )


def check_topics(cfg: WorkerConfig, timeout: float = 30.0) -> None:
    """Fail at start, not by retrying forever, when the events or dead-letter topic is missing."""
    missing = missing_topics(cfg.settings.kafka_bootstrap, [cfg.topic, cfg.dlq_topic], timeout)
    if missing:
        raise TopicMissing(
            f"topic(s) {', '.join(missing)} do not exist on {cfg.settings.kafka_bootstrap}; "
            "create them with `sessionstream topics ensure` (or point "
            "SESSIONSTREAM_EVENTS_TOPIC / SESSIONSTREAM_DLQ_TOPIC at existing ones)")


def build_sink(cfg: WorkerConfig) -> RedisSink:
    redis = redisconn.from_settings(cfg.settings, asyncio=True, decode_responses=True)
    return RedisSink(redis, KeySpace(cfg.settings.tenant, cfg.prefix),
                     retry=Retry(attempts=None))


def build_processor(cfg: WorkerConfig, sink: RedisSink | None = None) -> Processor:
    return Processor(
        pipeline=reader_pipeline(cfg.settings), sink=sink or build_sink(cfg), group=cfg.group,
        log_reader=KafkaLogReader(cfg.settings.kafka_bootstrap),
        dead_letters=KafkaDeadLetters(cfg.settings.kafka_bootstrap, cfg.dlq_topic),
    )
