"""The worker's wiring, shared by both engines (faust and kafka).

Configured by the process's ``Settings`` (built once by the entry point and passed
in): the consumer group, key prefix, topics, batch size and wait, and how many
sessions each convergence step checks after a ``state_version`` bump (the variables
are listed in the README).

Static group membership by default (``group.instance.id``, streams.membership): a worker
restarted after a crash takes its partitions back at once instead of waiting for the
group's session timeout. The id comes from the deployment (host name and a per-host
slot) unless ``worker_instance`` names one or says ``dynamic``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sessionstream import redisconn
from sessionstream.core.errors import SchemaUnavailable
from sessionstream.core.pipeline import Record
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Env, Settings
from sessionstream.governance.wiring import key_store, reader_pipeline, row_cipher
from sessionstream.streams import membership
from sessionstream.streams.errors import TopicMissing
from sessionstream.streams.kafka_io import KafkaDeadLetters, KafkaLogReader, missing_topics
from sessionstream.streams.ports import BatchReport
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink, Retry

#: Exit status when the processor meets a bug: nothing of the batch is acknowledged.
EXIT_BUG = 70
#: Exit status when a topic the worker needs does not exist.
EXIT_CONFIG = 78
#: Exit status when the schema registry stayed unreachable for REGISTRY_PATIENCE_S: nothing
#: of the batch was acknowledged, a supervisor restart re-reads it (EX_TEMPFAIL).
EXIT_UNAVAILABLE = 75
#: A batch whose schema the registry cannot give is retried after these waits (seconds:
#: first, cap; doubling), for at most REGISTRY_PATIENCE_S in all (below the consumer's
#: max.poll.interval.ms, so the group keeps the partitions meanwhile).
REGISTRY_BACKOFF_S = (0.5, 10.0)
REGISTRY_PATIENCE_S = 120.0

log = logging.getLogger("sessionstream.streams.worker")


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
    def from_settings(cls, settings: Settings) -> WorkerConfig:
        """The worker's configuration; claims its consumer instance id (a slot lock held
        for the process's life when the id is derived from the host)."""
        member = membership.claim(settings, settings.streams_group)
        log.info("consumer group %s, %s", settings.streams_group,
                 f"instance {member.instance_id} ({member.source})" if member.instance_id
                 else member.source)
        return cls(
            settings=settings,
            group=settings.streams_group,
            prefix=settings.key_prefix,
            topic=settings.events_topic,
            dlq_topic=settings.dlq_topic,
            batch_max=settings.batch_max,
            batch_within=settings.batch_within_ms / 1000,
            converge_sessions=settings.converge_sessions,
            instance_id=member.instance_id,
        )


def check_topics(cfg: WorkerConfig, timeout: float = 30.0) -> None:
    """Fail at start, not by retrying forever, when the events or dead-letter topic is missing."""
    missing = missing_topics(cfg.settings.kafka_bootstrap, [cfg.topic, cfg.dlq_topic], timeout,
                             cfg.settings.kafka_security())
    if missing:
        raise TopicMissing(
            f"topic(s) {', '.join(missing)} do not exist on {cfg.settings.kafka_bootstrap}; "
            "create them with `sessionstream topics ensure` (or point "
            f"{Env.EVENTS_TOPIC} / {Env.DLQ_TOPIC} at existing ones)")


def build_sink(cfg: WorkerConfig) -> RedisSink:
    redis = redisconn.from_settings(cfg.settings, asyncio=True, decode_responses=True)
    return RedisSink(redis, KeySpace(cfg.settings.tenant, cfg.prefix),
                     retry=Retry(attempts=None))


def build_processor(cfg: WorkerConfig, sink: RedisSink | None = None, *,
                    fold: str = "python") -> Processor:
    """The worker's processor; ``fold``: the fold setting (the kafka engine passes the
    settings'; the faust engine folds in Python)."""
    store = key_store(cfg.settings)  # one key cache for opening events and sealing rows
    return Processor(
        pipeline=reader_pipeline(cfg.settings, store), sink=sink or build_sink(cfg),
        group=cfg.group, rows=row_cipher(cfg.settings, store),
        log_reader=KafkaLogReader(cfg.settings.kafka_bootstrap,
                                  security=cfg.settings.kafka_security()),
        dead_letters=KafkaDeadLetters(cfg.settings.kafka_bootstrap, cfg.dlq_topic,
                                      security=cfg.settings.kafka_security()),
        fold=fold,
    )


class BatchFolder(Protocol):
    """What folds a live batch (a batch cycle: ``streams.cycle.BatchCycle``)."""

    async def process(self, records: Sequence[Record]) -> BatchReport: ...


async def process_retrying(
    processor: BatchFolder, records: Sequence[Record], *,
    patience: float = REGISTRY_PATIENCE_S, backoff: tuple[float, float] = REGISTRY_BACKOFF_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_retry: Callable[[], None] | None = None,
) -> BatchReport:
    """``processor.process(records)``, retried while a record's schema is unavailable.

    A registry outage is temporary, not corruption: the whole batch (nothing of it was
    written; decoding comes first) is processed again after a capped exponential
    backoff, with a warning each time. After ``patience`` seconds the
    :class:`SchemaUnavailable` is raised (the engine exits with EXIT_UNAVAILABLE, before
    acknowledging anything). ``on_retry``: counts each retry (metrics).
    """
    began = time.monotonic()
    wait, cap = backoff
    attempt = 0
    while True:
        try:
            return await processor.process(records)
        except SchemaUnavailable as exc:
            attempt += 1
            waited = time.monotonic() - began
            if waited + wait > patience:
                raise
            log.warning("schema unavailable (%s); batch of %d records retried in %.1fs "
                        "(attempt %d, %.0fs of %.0fs)", exc, len(records), wait, attempt,
                        waited, patience)
            if on_retry is not None:
                on_retry()
            await sleep(wait)
            wait = min(wait * 2, cap)
