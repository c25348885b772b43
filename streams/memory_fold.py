"""The memory folder: the tenant's memory topic folded into its namespace rows (ADR 0030).

:class:`MemoryWorker` consumes the memory topic (its progress in Redis: the
``memory:folded`` hash, partition -> offset, as the projection worker keeps its own),
groups each batch's records by namespace in partition order, folds them onto each
namespace's state (kept between batches; loaded from the row when a writer installed it
further meanwhile) and writes each namespace through :class:`NamespaceFolder.commit`
(the row's compare-and-set by offset, the keys of forgotten versions shredded, the
tenant's indexes and change feed in a second call). After the batch, a proposal that
cites a session deleted meanwhile (an extractor racing a deletion) gets its follow-up
``forget(source_session)`` produced into its namespace, then the progress is recorded.

:meth:`MemoryWorker.rebuild` folds the whole topic into a new generation of rows and
switches readers to it, as replay does for the session views.

Issue 37's batch cycle (``streams/cycle.py``, a ``Folder`` port) is not on this branch's
main yet: when it is, this loop becomes a folder that cycle drives.
"""

from __future__ import annotations

import importlib
import logging
import time
import uuid
from collections import defaultdict
from typing import Any

from sessionstream.core.errors import CorruptRecord
from sessionstream.core.memory.model import AnyOp, Forget, Namespace
from sessionstream.core.settings import Settings
from sessionstream.governance.memory import MemorySealer
from sessionstream.producers.kafka_clients import KafkaClients, private_group
from sessionstream.producers.memory_log import (
    MemoryLog,
    MemoryRows,
    NamespaceFolder,
    decode_op,
    encode_op,
)

#: the fold module (the package exports a function of the same name)
mfold = importlib.import_module("sessionstream.core.memory.fold")

log = logging.getLogger(__name__)

SYSTEM_ID = "sessionstream-memory"


class MemoryWorker:
    """Folds one tenant's memory topic into Redis (see the module docstring)."""

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
        self.folder = NamespaceFolder(self.log, self.rows, principal=SYSTEM_ID)
        #: namespace key -> (offset folded, state)
        self.states: dict[str, tuple[int, Any]] = {}
        self._consumer: Any = None

    # -- consuming ------------------------------------------------------------------
    def _consumer_for(self) -> Any:
        from confluent_kafka import Consumer, TopicPartition

        if self._consumer is None:
            c = Consumer(KafkaClients.from_settings(self.settings).consumer(
                private_group("memory-fold"), {"enable.partition.eof": False}))
            n = self.log.partitions()
            c.assign([TopicPartition(self.log.topic, p, self.rows.folded(p) + 1
                                     if self.rows.folded(p) >= 0 else -2)
                      for p in range(n)])
            self._consumer = c
        return self._consumer

    def run_once(self, timeout: float = 1.0, max_records: int = 2000) -> int:
        """One batch: the records consumed, folded and written; their count."""
        msgs = [m for m in self._consumer_for().consume(max_records, timeout)
                if m.error() is None]
        if not msgs:
            return 0
        self.fold_batch([(int(m.partition() or 0), int(m.offset() or 0), m.key() or b"",
                          m.value() or b"") for m in msgs])
        return len(msgs)

    def fold_batch(self, records: list[tuple[int, int, bytes, bytes]],
                   gen: int | None = None) -> None:
        """Fold ``records`` (partition, offset, key, value), in order within each
        partition, into their namespaces' rows; then the follow-up forgets; then the
        progress."""
        by_ns: dict[str, list[tuple[int, int, AnyOp]]] = defaultdict(list)
        progress: dict[int, int] = {}
        for partition, offset, _key, value in records:
            progress[partition] = max(progress.get(partition, -1), offset)
            try:
                op = decode_op(value, self.sealer)
            except CorruptRecord as exc:
                log.warning("memory record %d@%d skipped: %s", offset, partition, exc)
                continue
            by_ns[op.namespace.key].append((partition, offset, op))
        followups: list[tuple[Namespace, str]] = []
        for key, items in by_ns.items():
            ns = items[0][2].namespace
            at, state = self._state(ns, gen)
            before = state
            top = at
            for _, offset, op in items:
                if offset <= at:
                    continue  # a writer installed it already
                state = mfold.apply(state, op)
                top = offset
            if top == at:
                continue
            deleted = self.folder.commit(ns, before if at >= 0 else None, state, top, gen)
            self.states[key] = (top, state)
            followups += [(ns, sid) for sid in sorted(deleted)]
        for ns, sid in followups:  # a proposal that raced a deletion: forget it now
            op = Forget(op_id=str(uuid.uuid4()), namespace=ns,
                        time=time.time_ns() // 1_000_000, actor=_system(),
                        source_session=sid, reason="session deleted")
            done = self.log.append(ns, encode_op(op, self.sealer))
            state, _ = self.folder.install(ns, done.partition, done.offset, op)
            self.states[ns.key] = (self.rows.offset(ns), state)
        self.rows.advance_folded(progress, gen)

    def _state(self, ns: Namespace, gen: int | None) -> tuple[int, Any]:
        row_offset = self.rows.offset(ns, gen)
        hit = self.states.get(ns.key)
        if hit is not None and hit[0] == row_offset:
            return hit
        return self.rows.load(ns, gen)

    # -- replay ---------------------------------------------------------------------
    def rebuild(self) -> int:
        """Fold the whole topic into a new generation, then point readers at it; the
        generation number."""
        from confluent_kafka import Consumer, TopicPartition

        gen = int(self.redis.incr(self.settings.keys.tenant_key("memory:generation:last")))
        gen = max(gen, self.rows.generation() + 1)
        c = Consumer(KafkaClients.from_settings(self.settings).consumer(
            private_group("memory-rebuild"), {"enable.partition.eof": True}))
        n = self.log.partitions()
        c.assign([TopicPartition(self.log.topic, p, -2) for p in range(n)])
        ends = {p: c.get_watermark_offsets(TopicPartition(self.log.topic, p), 10)[1]
                for p in range(n)}
        done = {p for p, end in ends.items() if end == 0}
        saved, self.states = self.states, {}
        try:
            while len(done) < n:
                msgs = c.consume(2000, 1.0)
                batch = []
                for m in msgs:
                    err = m.error()
                    p, o = int(m.partition() or 0), int(m.offset() or 0)
                    if err is not None:
                        if err.code() == -191:  # _PARTITION_EOF
                            done.add(p)
                        continue
                    batch.append((p, o, m.key() or b"", m.value() or b""))
                    if o >= ends[p] - 1:
                        done.add(p)
                if batch:
                    self.fold_batch(batch, gen)
        finally:
            c.close()
            self.states = saved
        self.redis.set(self.settings.keys.tenant_key("memory:generation"), gen)
        self.rows.refresh_generation()
        self.states = {}
        return gen

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self.log.close()


def _system() -> Any:
    from sessionstream.core.memory.model import ActorRef, Role

    return ActorRef(Role.OPERATOR, SYSTEM_ID)
