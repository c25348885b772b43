"""The store contract over the fleet backend (real Kafka + Redis, the fenced SessionWriter),
and what only the fleet has: a second writer gets the one named error, WriterConflict."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

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


def test_a_second_store_cannot_write_while_the_first_holds_the_session(
        writer_cfg: WriterConfig) -> None:
    a, b = FleetStore(writer_cfg, [NOTE]), FleetStore(writer_cfg, [NOTE])
    a.open("race-1").append("user/message", {"content": "from a"})
    a.open("race-1").flush()
    with pytest.raises(WriterConflict, match="leased by writer") as info:
        b.open("race-1").append("user/message", {"content": "from b"})
    assert info.value.session_id == "race-1"
    # b still reads the one history; after a releases, b writes on after it
    assert [e.type for e in b.open("race-1").events()] == ["session/start", "user/message"]
    a.open("race-1").release()
    b.open("race-1").append("user/message", {"content": "from b"})
    b.open("race-1").flush()
    contents = [e.data["content"] for e in a.open("race-1").events()
                if e.type == "user/message"]
    assert contents == ["from a", "from b"]
    a.close()
    b.close()


def test_a_writer_that_lost_the_session_gets_writer_conflict_naming_its_refused_events(
        writer_cfg: WriterConfig) -> None:
    cfg = dataclasses.replace(writer_cfg, lease_ttl_ms=60_000)
    mine = FleetStore(cfg)
    h = mine.open("fenced-1")
    h.append("user/message", {"content": "one"})
    h.flush()
    thief = SessionWriter.open(cfg, "fenced-1", steal=True)  # another node takes over
    thief.append("user/message", {"content": "thief"})
    thief.flush()
    lost = h.append("user/message", {"content": "lost"})  # produced; readers refuse it
    with pytest.raises(WriterConflict) as info:
        h.flush()
    assert lost.event_id in info.value.not_admitted
    thief.close()
    # the history has no trace of the refused write; a retry writes as the newest writer
    h.append("user/message", {"content": "retried"})
    h.flush()
    contents = [e.data["content"] for e in FleetStore(cfg).open("fenced-1").events()
                if e.type == "user/message"]
    assert contents == ["one", "thief", "retried"]
    mine.close()
