"""Consumer lag of the projections, per partition, in offsets and in ``as_of_seq``.

Measured from outside the fold (Kafka watermarks and one record, Redis progress and one
row), so it answers whether or not a worker runs — the worker exports it for its
partitions, ``sessionstream lag`` prints it:

- **offsets** = the partition's high watermark − (the group's stored progress + 1): the
  records not yet folded into Redis (0: every record is in Redis).
- **seq** = for the partition's newest record (at high watermark − 1): 0 when the stored
  progress has reached its offset; otherwise its ``seq`` − the ``as_of_seq`` readers see
  for its session (−1 for a session with no row yet): how many events of the most
  recently written session are not yet visible. None when that record is no
  sessionstream record (a dead letter: the offsets lag still counts it) or did not
  arrive within :data:`TIMEOUT_S`.

Cost per measurement: one watermark query and one fetch of one record per partition,
one Redis round trip for the progress and one for the rows; the engines measure at most
every :data:`INTERVAL_S`. Session ids never leave this module (metrics carry partitions).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from sessionstream.core.events import Event
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.rows import SessionRow
from sessionstream.streams.ports import Sink

#: The engines measure the ``as_of_seq`` lag at most this often (seconds).
INTERVAL_S = 10.0
#: How long one measurement waits for the broker (seconds).
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    high: int  # the high watermark (the next offset to be written)
    progress: int  # the group's stored progress (last folded offset, -1: none)
    offsets: int
    seq: int | None


@dataclass(frozen=True)
class Newest:
    """The partition's newest record, decoded just enough to name its session and seq."""

    offset: int
    session_id: str | None
    seq: int | None


def partition_lag(partition: int, high: int, progress: int, newest: Newest | None,
                  as_of_seq: int | None) -> PartitionLag:
    """Both lags of one partition (the definitions of the module docstring).

    ``newest``: the record at ``high - 1`` (None: the partition is empty, or it was not
    fetched in time); ``as_of_seq``: its session's, None when the session has no row.
    """
    offsets = max(0, high - progress - 1)
    seq: int | None
    if offsets == 0:
        seq = 0  # every record is in Redis: readers see all there is
    elif newest is None or newest.session_id is None or newest.seq is None:
        seq = None  # unmeasured: not fetched, or no sessionstream record
    else:
        seq = max(0, newest.seq - (-1 if as_of_seq is None else as_of_seq))
    return PartitionLag(partition, high, progress, offsets, seq)


class LagProbe:
    """Measures :class:`PartitionLag` of ``topic`` for the consumer group ``group``."""

    def __init__(self, consumer_config: Mapping[str, Any], topic: str, group: str,
                 sink: Sink, pipeline: ReaderPipeline,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.group = group
        self.sink = sink
        self.pipeline = pipeline
        self.clock = clock
        self._config = {**consumer_config, "enable.auto.commit": False,
                        "enable.partition.eof": False}
        self._consumer: Consumer | None = None
        self._last: float | None = None

    def due(self, interval: float = INTERVAL_S) -> bool:
        return self._last is None or self.clock() - self._last >= interval

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    async def measure(self, partitions: Sequence[int] | None = None) -> list[PartitionLag]:
        """The lag of ``partitions`` (default: every partition of the topic)."""
        self._last = self.clock()
        newest = await asyncio.to_thread(self._newest, partitions)
        keys = [f"{self.topic}:{p}" for p in newest]
        progress = await self.sink.load_progress(self.group, keys) if keys else {}
        gen = await self.sink.generation()
        waiting = {n.session_id for p, (high, n) in newest.items() if n is not None
                   and n.session_id is not None
                   and progress.get(f"{self.topic}:{p}", -1) < n.offset}
        rows = await self.sink.load_fields(gen, sorted(s for s in waiting if s),
                                           [SessionRow.AS_OF_SEQ]) if waiting else {}
        out = []
        for p, (high, n) in sorted(newest.items()):
            done = progress.get(f"{self.topic}:{p}", -1)
            row = rows.get(n.session_id) if n is not None and n.session_id else None
            out.append(partition_lag(p, high, done, n,
                                     None if row is None else SessionRow.as_of_seq(row)))
        return out

    # -- Kafka (runs in a thread) --------------------------------------------------------
    def _newest(self, partitions: Sequence[int] | None) -> dict[int, tuple[int, Newest | None]]:
        if self._consumer is None:
            self._consumer = Consumer(self._config)
        c = self._consumer
        try:
            if partitions is None:
                meta = c.list_topics(self.topic, timeout=TIMEOUT_S).topics[self.topic]
                partitions = sorted(meta.partitions)
            out: dict[int, tuple[int, Newest | None]] = {}
            fetch: list[TopicPartition] = []
            for p in partitions:
                low, high = c.get_watermark_offsets(TopicPartition(self.topic, p),
                                                    timeout=TIMEOUT_S)
                out[p] = (high, None)
                if high > low:
                    fetch.append(TopicPartition(self.topic, p, high - 1))
            if fetch:
                c.assign(fetch)
                want = {tp.partition: tp.offset for tp in fetch}
                deadline = time.monotonic() + TIMEOUT_S
                while want and time.monotonic() < deadline:
                    for m in c.consume(len(want), timeout=0.5):
                        part, off = m.partition(), m.offset()
                        if m.error() is not None or part is None or off is None \
                                or want.get(part) != off:
                            continue
                        out[part] = (out[part][0], self._decode(off, m.key(), m.value()))
                        del want[part]
                c.unassign()
            return out
        except KafkaException:
            self.close()
            raise

    def _decode(self, offset: int, key: bytes | None, value: bytes | None) -> Newest:
        decoded = self.pipeline.decode(Record(self.topic, 0, offset, key, value))
        if isinstance(decoded, Event):
            return Newest(offset, decoded.session_id, decoded.seq)
        sid = getattr(decoded, "session_id", None)  # a newer format still names its session
        seq = getattr(decoded, "seq", None)
        return Newest(offset, sid if isinstance(sid, str) else None,
                      seq if isinstance(seq, int) else None)


def probe_from_settings(settings: Any, sink: Sink, pipeline: ReaderPipeline,
                        topic: str | None = None, group: str | None = None) -> LagProbe:
    """A probe with the settings' Kafka principal, events topic and consumer group."""
    from sessionstream.producers.kafka_clients import KafkaClients

    clients = KafkaClients.from_settings(settings)
    group = group or settings.streams_group
    # assign() only, never joins or commits: a group id under the worker's own prefix
    config = clients.consumer(f"{group}.lag-probe", {"log_level": 3})
    return LagProbe(config, topic or settings.events_topic, group, sink, pipeline)
