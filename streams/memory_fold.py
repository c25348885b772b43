"""The memory worker: the tenant's memory topic folded into its namespace rows by the
batch cycle (ADR 0030, ADR 0026 "How a new projection plugs in").

Memory brings a folder (:class:`~.memory_folder.MemoryFolder`) and a sink
(:class:`~.memory_sink.MemoryRowSink`) and no lifecycle of its own:

- live (``sessionstream memory worker``): :class:`~.engine_kafka.KafkaEngine` drives a
  :class:`~.cycle.BatchCycle` over them, as it drives the session worker's: a member of
  the memory group (``<memory topic>.fold``), each partition started after its progress
  in Redis (``memory:folded``, which the writers advance too), offsets committed after
  the batch is written, the follow-up forgets produced in the folder's ``settled()``;
- :meth:`MemoryWorker.rebuild`: the cycle's replay path, pinned to a new generation: the
  whole topic folded in memory (``BatchCycle.fold``), each namespace written once by the
  ``flush``, then readers switched to it.

:class:`MemoryWorker` is the synchronous face of both (the CLI and the tests call it):
it keeps one event loop for its engine and cycle.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

from sessionstream.core.pipeline import Record
from sessionstream.core.settings import Settings
from sessionstream.governance.memory import MemorySealer
from sessionstream.producers.kafka_clients import KafkaClients, private_group
from sessionstream.producers.memory_log import MemoryLog, MemoryRows
from sessionstream.streams.cycle import BatchCycle
from sessionstream.streams.engine_kafka import KafkaEngine
from sessionstream.streams.memory_folder import SYSTEM_ID, MemoryFolder
from sessionstream.streams.memory_sink import MemoryRowSink
from sessionstream.streams.worker import WorkerConfig

#: Records per batch (one consume).
BATCH_MAX = 2000
#: Seconds :meth:`MemoryWorker.run_once` waits at most for the group to give this
#: worker its partitions (the first consumes of a new member).
ASSIGN_WAIT_S = 30.0


def memory_group(settings: Settings) -> str:
    """The memory worker's consumer group: under the tenant's prefix (the worker's ACLs
    grant groups ``sessionstream.<tenant>.*``), one per memory topic."""
    return f"{settings.memory_topic}.fold"


class MemoryWorker:
    """One tenant's memory worker (see the module docstring)."""

    def __init__(self, settings: Settings, key_store: Any = None, *, redis: Any = None,
                 encryption: bool | None = None) -> None:
        from sessionstream import redisconn

        self.settings = settings
        enabled = settings.encryption if encryption is None else encryption
        self.sealer = MemorySealer(key_store, settings.tenant,
                                   enabled=enabled and key_store is not None)
        self.redis = redis if redis is not None else redisconn.sync_redis(
            settings.redis_url, cluster=settings.redis_cluster)
        self.rows = MemoryRows(self.redis, settings.keys, self.sealer)
        self.log = MemoryLog(settings)
        self.folder = MemoryFolder(self.rows, self.log, principal=SYSTEM_ID)
        self.cycle = BatchCycle(self.folder, sink=MemoryRowSink(self.rows, self.folder.writer),
                                group=memory_group(settings))
        #: the event loop its engine and cycles run on
        self.loop = asyncio.new_event_loop()
        self._engine: KafkaEngine | None = None

    # -- live ---------------------------------------------------------------------------
    def engine(self) -> KafkaEngine:
        """The kafka engine driving the cycle (built once; joins the group on start)."""
        if self._engine is None:
            s = self.settings
            cfg = WorkerConfig(settings=s, group=self.cycle.group, prefix=s.key_prefix,
                               topic=s.memory_topic, dlq_topic=s.dlq_topic,
                               batch_max=BATCH_MAX, batch_within=1.0)
            self._engine = KafkaEngine(cfg, self.cycle)
        return self._engine

    def run_once(self, timeout: float = 1.0) -> int:
        """One batch (consumed, folded, written, its follow-ups produced, committed);
        the records consumed. A worker not yet in the group waits for its partitions."""
        return self.loop.run_until_complete(self._once(timeout))

    async def _once(self, timeout: float) -> int:
        engine = self.engine()
        if not engine.started:
            engine.start()
        deadline = time.monotonic() + ASSIGN_WAIT_S
        was = bool(engine.assigned)
        n = await engine.step(timeout)
        # joining: go on until a whole consume ran with the partitions assigned
        while n == 0 and not was and time.monotonic() < deadline:
            was = bool(engine.assigned)
            n = await engine.step(timeout)
        return n

    def serve(self) -> None:
        """Run until SIGTERM or SIGINT (``sessionstream memory worker``)."""
        engine = self.engine()

        async def run() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, engine.stop)
            await engine.run()

        self.loop.run_until_complete(run())
        self._engine = None  # closed

    # -- replay -------------------------------------------------------------------------
    def rebuild(self) -> int:
        """Fold the whole topic into a new generation, then point readers at it; the
        generation number."""
        from confluent_kafka import Consumer, TopicPartition

        keys = self.settings.keys
        gen = int(self.redis.incr(keys.tenant_key("memory:generation:last")))
        gen = max(gen, self.rows.generation() + 1)
        folder = MemoryFolder(self.rows, self.log, principal=SYSTEM_ID)
        cycle = BatchCycle(folder, sink=MemoryRowSink(self.rows, folder.writer,
                                                      generation=gen),
                           group=memory_group(self.settings), generation=gen)
        topic = self.log.topic
        c = Consumer(KafkaClients.from_settings(self.settings).consumer(
            private_group("memory-rebuild"), {"enable.partition.eof": True}))
        n = self.log.partitions()
        c.assign([TopicPartition(topic, p, -2) for p in range(n)])
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(n)}
        done = {p for p, end in ends.items() if end == 0}
        try:
            while len(done) < n:
                batch: list[Record] = []
                for m in c.consume(BATCH_MAX, 1.0):
                    err = m.error()
                    p, o = int(m.partition() or 0), int(m.offset() or 0)
                    if err is not None:
                        if err.code() == -191:  # _PARTITION_EOF
                            done.add(p)
                        continue
                    ts = m.timestamp()
                    batch.append(Record(topic, p, o, m.key(), m.value(),
                                        ts[1] if ts[0] else None))
                    if o >= ends[p] - 1:
                        done.add(p)
                if batch:
                    self.loop.run_until_complete(cycle.fold(batch))
            self.loop.run_until_complete(cycle.flush())
        finally:
            c.close()
        self.redis.set(keys.tenant_key("memory:generation"), gen)
        self.rows.refresh_generation()
        self.cycle.forget()
        return gen

    def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            if engine.started:
                self.loop.run_until_complete(engine.finish())
                self.loop.run_until_complete(engine.close())
        if not self.loop.is_closed():
            self.loop.close()
        self.log.close()
