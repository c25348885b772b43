"""Memory as a projection of the batch cycle (ADR 0026 "How a new projection plugs in"),
on the real Kafka and Redis: the memory folder driven by the kafka engine and the cycle
reaches what the pure fold of the same records reaches (rows, feed, progress), through a
writer's install in between (the two agree, the row never moves back), a redelivery and
a restart."""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessionstream.core.memory import (
    ActorRef,
    Draft,
    Extractor,
    Method,
    Namespace,
    Propose,
    Role,
    Scope,
    Source,
)
from sessionstream.core.memory.fold import dump
from sessionstream.core.pipeline import Record
from sessionstream.core.settings import Settings
from sessionstream.governance.keys import FileKeyStore
from sessionstream.integrations.memory import FleetBackend
from sessionstream.producers.memory_log import decode_op, encode_op
from sessionstream.streams.fold import Batch
from sessionstream.streams.memory_fold import MemoryWorker

mfold = importlib.import_module("sessionstream.core.memory.fold")

pytestmark = pytest.mark.integration

A = Namespace("default", Scope.USER, "ada")
B = Namespace("default", Scope.USER, "bob")


def _op(ns: Namespace, text: str, session: str) -> Propose:
    return Propose(op_id=str(uuid.uuid4()), namespace=ns, time=1,
                   actor=ActorRef(Role.EXTRACTOR, "x"), memory_id=str(uuid.uuid4()),
                   draft=Draft(kind="fact", content=text, sources=(Source(session, (1,)),),
                               extractor=Extractor(Method.MODEL, "x", "m", "p1")))


class Fixture:
    def __init__(self, s: Settings, store: FileKeyStore) -> None:
        self.s = s
        self.store = store
        self.backend = FleetBackend(s, store, encryption=True)
        self.n = 0

    def raw(self, ns: Namespace) -> None:
        """A record no writer folds (a producer that does not, or a writer that died)."""
        self.n += 1
        self.backend.log.append(ns, encode_op(_op(ns, f"raw {self.n}", f"s{self.n}"),
                                              self.backend.sealer))

    def written(self, ns: Namespace) -> None:
        """A writer's record, folded into its row before append returns (ADR 0030 A2)."""
        self.n += 1
        self.backend.append(_op(ns, f"written {self.n}", f"s{self.n}"))

    def records(self) -> list[Record]:
        end = self.backend.log.read(0, 0, 10_000)
        topic = self.backend.log.topic
        return [Record(topic, 0, off, key, value, None) for off, key, value in end]

    def worker(self) -> MemoryWorker:
        return MemoryWorker(self.s, self.store, encryption=True)

    def row(self, ns: Namespace) -> tuple[int, dict[str, Any]]:
        at, state = self.backend.rows().load(ns)
        return at, dump(state)

    def reference(self, ns: Namespace) -> tuple[int, dict[str, Any]]:
        """The pure fold of the namespace's records, from the topic."""
        state, top = mfold.init(), -1
        for r in self.records():
            op = decode_op(r.value or b"", self.backend.sealer)
            if op.namespace.key == ns.key:
                state, top = mfold.apply(state, op), r.offset
        return top, dump(state)

    def feed(self) -> list[dict[str, Any]]:
        return [c for _, c in self.backend.rows().changes(count=10_000)]

    def agree(self) -> None:
        """Rows equal the reference, the feed names every memory of each namespace with
        offsets that only move forward, the progress is the partition's last offset."""
        feed = self.feed()
        for ns in (A, B):
            assert self.row(ns) == self.reference(ns)
            mine = [c for c in feed if c["ns"] == ns.key]
            offsets = [c["offset"] for c in mine]
            assert offsets == sorted(offsets)
            named = {i for c in mine for i in c["changed"]}
            assert named == {m["id"] for m in self.reference(ns)[1]["memories"]}
        assert self.backend.rows().folded(0) == self.records()[-1].offset


def drain(worker: MemoryWorker) -> None:
    while worker.run_once(timeout=2.0):
        pass


def test_the_cycle_folds_memory_as_the_pure_fold_with_a_writer_a_redelivery_and_a_restart(
        settings: Settings, unique_topic: Callable[..., str], redis_prefix: str,
        tmp_path: Path) -> None:
    s = dataclasses.replace(settings, memory_topic_override=unique_topic(1),
                            key_prefix=redis_prefix)
    f = Fixture(s, FileKeyStore(tmp_path / "keys", cache_ttl_s=0))
    for ns in (A, B, A, A, B):
        f.raw(ns)
    worker = f.worker()
    drain(worker)
    f.agree()
    assert worker.folder.holds(A.key) and worker.folder.holds(B.key)

    # a writer in between: a raw record of A, then a writer's, which folds both into the
    # row before the worker sees them. The worker folds the two on the state it keeps
    # and writes the same offset: stale, so it forgets A and never moves the row back.
    f.raw(A)
    f.written(A)
    installed = f.row(A)
    drain(worker)
    assert f.row(A) == installed
    assert not worker.folder.holds(A.key)
    f.raw(A)  # the next record of A: folded on the stored row
    f.raw(B)
    drain(worker)
    f.agree()

    # a redelivery changes nothing: not through the cycle (the progress) nor the folder
    # itself (each namespace's offset)
    rows, feed = {ns.key: f.row(ns) for ns in (A, B)}, f.feed()
    records = f.records()
    report = worker.loop.run_until_complete(worker.cycle.process(records))
    assert (report.sessions_written, report.skipped) == (0, len(records))
    folded = worker.loop.run_until_complete(worker.folder.fold(
        Batch(records, records[0].topic, worker.rows.generation(), {})))
    assert (folded.writes, folded.skipped) == ([], len(records))
    assert {ns.key: f.row(ns) for ns in (A, B)} == rows and f.feed() == feed
    worker.close()

    # a restart: a new worker starts after the progress in Redis and folds on the rows
    for ns in (B, A, B):
        f.raw(ns)
    again = f.worker()
    drain(again)
    f.agree()
    again.close()
    f.backend.close()
