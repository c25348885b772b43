"""The store contract over the fleet backend (real Kafka + Redis, the fenced SessionWriter),
and what only the fleet has: a second writer gets the one named error, WriterConflict."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sessionstream.core.events import Draft
from sessionstream.integrations.store import FleetStore, WriterConflict
from sessionstream.producers.writer import SessionWriter, WriterConfig
from tests.contract.store_contract import NOTE, StoreContract
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


class TestFleetStore(StoreContract):
    @pytest.fixture
    def make_store(self, writer_cfg: WriterConfig) -> Any:
        made: list[FleetStore] = []

        def make(event_types: Any = ()) -> FleetStore:
            store = FleetStore(writer_cfg, event_types)
            made.append(store)
            return store

        yield make
        for s in made:
            s.close()


def test_the_next_write_from_another_store_takes_the_session_at_once(
        writer_cfg: WriterConfig) -> None:
    """A store is what one process of a stateless tier holds: its write hands the session
    on, so another process's write continues it at once — no lease to wait out."""
    cfg = dataclasses.replace(writer_cfg, lease_ttl_ms=60_000)  # a wait would be visible
    a, b = FleetStore(cfg, [NOTE]), FleetStore(cfg, [NOTE])
    for i in range(3):
        a.open("handoff-1").append("user/message", {"content": f"a{i}"})
        b.open("handoff-1").append("user/message", {"content": f"b{i}"})
    contents = [e.data["content"] for e in FleetStore(cfg).open("handoff-1").events()
                if e.type == "user/message"]
    assert contents == ["a0", "b0", "a1", "b1", "a2", "b2"]
    # a continued its own session object: no resume happened (no end-seed, no repair)
    types = [e.type for e in a.open("handoff-1").events()]
    assert "session/end-seed" not in types and types[0] == "session/start"
    a.close()
    b.close()


def test_a_write_while_another_process_holds_the_session_gets_writer_conflict(
        writer_cfg: WriterConfig) -> None:
    a, b = FleetStore(writer_cfg, [NOTE]), FleetStore(writer_cfg, [NOTE])
    a.open("race-1").append("user/message", {"content": "from a"})
    # a's next write is in flight (held until its flush): b's write is refused, whole
    a.open("race-1").append_many([Draft("user/message", {"content": "held"})],
                                 durable=False)
    with pytest.raises(WriterConflict, match="leased by writer") as info:
        b.open("race-1").append("user/message", {"content": "from b"})
    assert info.value.session_id == "race-1"
    a.open("race-1").flush()  # a's write ends: the session is handed on
    b.open("race-1").append("user/message", {"content": "from b"})
    contents = [e.data["content"] for e in a.open("race-1").events()
                if e.type == "user/message"]
    assert contents == ["from a", "held", "from b"]
    a.close()
    b.close()


def test_a_writer_that_lost_the_session_gets_writer_conflict_naming_its_refused_events(
        writer_cfg: WriterConfig) -> None:
    cfg = dataclasses.replace(writer_cfg, lease_ttl_ms=60_000)
    mine = FleetStore(cfg)
    h = mine.open("fenced-1")
    h.append("user/message", {"content": "one"})
    # a write in flight (held until its flush) when another node takes the session over
    two = h.append_many([Draft("user/message", {"content": "two"})], durable=False)[0]
    thief = SessionWriter.open(cfg, "fenced-1", steal=True)
    thief.append("user/message", {"content": "thief"})
    thief.flush()
    lost = h.append_many([Draft("user/message", {"content": "lost"})], durable=False)[0]
    with pytest.raises(WriterConflict) as info:
        h.flush()
    assert lost.event_id in info.value.not_admitted
    thief.close()
    # the history has no trace of the refused write; a retry writes as the newest writer
    h.append("user/message", {"content": "retried"})
    contents = [e.data["content"] for e in FleetStore(cfg).open("fenced-1").events()
                if e.type == "user/message"]
    # "two" was produced before the thief read the log: admitted if it had landed by
    # then, refused (and named) if not — either way the history holds no refused event
    expected = ["one", "thief", "retried"] if two.event_id in info.value.not_admitted \
        else ["one", "two", "thief", "retried"]
    assert contents == expected
    mine.close()
