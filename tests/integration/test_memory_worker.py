"""The memory folder on the real Kafka and Redis: records no writer installed are folded
into their namespace rows, a racing proposal gets its follow-up forget, and a rebuild
into a new generation equals the live rows."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionstream.core.memory import (
    Actor,
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
from sessionstream.core.settings import Settings
from sessionstream.governance.keys import FileKeyStore
from sessionstream.integrations.memory import FleetBackend, MemoryClient
from sessionstream.producers.memory_log import encode_op
from sessionstream.streams.memory_fold import MemoryWorker

pytestmark = pytest.mark.integration


def _raw(ns: Namespace, text: str, session: str) -> Propose:
    return Propose(op_id=str(uuid.uuid4()), namespace=ns, time=1,
                   actor=ActorRef(Role.EXTRACTOR, "x"), memory_id=str(uuid.uuid4()),
                   draft=Draft(kind="fact", content=text, sources=(Source(session, (1,)),),
                               extractor=Extractor(Method.MODEL, "x", "m", "p1")))


def test_the_worker_folds_what_no_writer_installed_and_a_rebuild_equals_it(
        settings: Settings, unique_topic: Callable[..., str], redis_prefix: str,
        tmp_path: Path) -> None:
    s = dataclasses.replace(settings, memory_topic_override=unique_topic(2),
                            key_prefix=redis_prefix)
    store = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    backend = FleetBackend(s, store, encryption=True)
    ns = Namespace("default", Scope.USER, "ada")
    # raw records, as a producer that does not fold (or a writer that died after its
    # produce) leaves them
    for i in range(5):
        backend.log.append(ns, encode_op(_raw(ns, f"fact number {i}", f"s{i}"),
                                         backend.sealer))
    reader = MemoryClient(FleetBackend(s, store, encryption=True),
                          Actor(Role.AGENT, "bot", user="ada"))
    assert reader.list() == []  # nothing folded yet
    worker = MemoryWorker(s, store, encryption=True)
    while worker.run_once(timeout=2.0):
        pass
    assert sorted(v.content for v in reader.list()) == [f"fact number {i}" for i in range(5)]
    # a proposal racing a deletion: the session is deleted, the record arrives after
    MemoryClient(backend, Actor(Role.OPERATOR, "op")).forget_session("s-late")
    backend.log.append(ns, encode_op(_raw(ns, "racing fact", "s-late"), backend.sealer))
    while worker.run_once(timeout=2.0):
        pass
    assert "racing fact" not in [v.content for v in reader.list()]
    live = dump(backend.rows().load(ns)[1])
    gen = worker.rebuild()
    assert backend.rows().refresh_generation() == gen
    rebuilt = dump(backend.rows().load(ns)[1])
    assert rebuilt["memories"] == live["memories"]
    assert sorted(v.content for v in reader.list()) == [f"fact number {i}" for i in range(5)]
    worker.close()
    backend.close()
