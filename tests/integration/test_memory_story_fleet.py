"""The issue's story on the real Kafka and Redis, through the plain API, LangGraph's
BaseStore and ADK's memory service: a harness session states a preference, it becomes a
memory (explicitly and through the extractor), a later session retrieves it by a
paraphrased query and logs that it did, a contradicting statement supersedes it, and
deleting the source session forgets it everywhere."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from sessionstream.core.events import Draft
from sessionstream.core.memory import Actor, Role
from sessionstream.core.memory.extract import PatternModel
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.service import Governance
from sessionstream.integrations.memory import FleetBackend, LineageCascade, MemoryClient
from sessionstream.integrations.memory_embed import ModelEmbedder
from sessionstream.integrations.memory_extract import extract_session
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.audit import WriterAuditLog
from sessionstream.producers.resume import read_log
from sessionstream.producers.writer import WriterConfig
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


def _turn(text: str) -> list[Draft]:
    return [Draft("turn/start", {}), Draft("user/message", {"content": text}),
            Draft("step/start", {}), Draft("assistant/message", {"content": "noted"}),
            Draft("step/end", {}), Draft("turn/end", {"reason": "completed"})]


@pytest.fixture
def fleet(writer_cfg: WriterConfig, settings: Settings, unique_topic: Callable[..., str],
          redis_prefix: str, redis_client: redis.Redis, tmp_path: Path) -> dict[str, object]:
    keys = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(keys, "default"))
    mset = dataclasses.replace(settings, memory_topic_override=unique_topic(4),
                               key_prefix=redis_prefix)

    def backend() -> FleetBackend:
        return FleetBackend(mset, keys, encryption=True)

    gov = Governance(cfg, keys, redis_client, audit=WriterAuditLog(cfg), principal="dpo",
                     memory=LineageCascade(backend()))
    return {"cfg": cfg, "backend": backend, "gov": gov}


def test_the_story_through_the_plain_api(fleet: dict[str, object]) -> None:
    cfg, backend, gov = fleet["cfg"], fleet["backend"], fleet["gov"]
    sessions = FleetStore(cfg)  # type: ignore[arg-type]
    harness = MemoryClient(backend(), Actor(Role.AGENT, "harness", user="ada"))  # type: ignore[operator]
    extractor = MemoryClient(backend(), Actor(Role.EXTRACTOR, "x", user="ada"))  # type: ignore[operator]
    s1 = sessions.open("story-1")
    s1.append_many(_turn("I prefer a window seat on long flights."))
    said = next(e for e in s1.events() if e.type == "user/message")
    explicit = harness.propose("Prefers a window seat on long flights", kind="preference",
                               sources=[("story-1", [said.seq])])
    (extracted,) = extract_session(extractor, "story-1", s1.events(), PatternModel())
    assert extracted.ref == explicit.ref  # the two ways in collapse into one memory
    # a later session, another process: found by a paraphrase, and the recall logged
    later = MemoryClient(backend(), Actor(Role.AGENT, "harness", user="ada"))  # type: ignore[operator]
    s2 = FleetStore(cfg).open("story-2")  # type: ignore[arg-type]
    s2.append("user/message", {"content": "book my flight to Osaka"})
    hits = later.recall(s2, "what seat does she like on a plane flight")
    assert hits[0].version.ref == explicit.ref
    # ...and, with the memory-model extra's embedder, by words it does not contain
    model = MemoryClient(backend(), Actor(Role.AGENT, "harness", user="ada"),  # type: ignore[operator]
                         embedder=ModelEmbedder())
    assert model.search("her spot on airplanes")[0].version.ref == explicit.ref
    # a contradiction supersedes it
    s3 = sessions.open("story-3")
    s3.append_many(_turn("These days I prefer an aisle seat."))
    (newer,) = extract_session(extractor, "story-3", s3.events(), PatternModel())
    assert newer.supersedes == (explicit.ref,)
    assert [v.content for v in later.list()] == ["Prefers an aisle seat"]
    # deleting the source session forgets it everywhere
    report = gov.delete("story-1", reason="user request")  # type: ignore[attr-defined]
    assert str(explicit.ref) in report.memory.forgotten
    assert "window" not in str(later.show(explicit.ref.id))
    logged = [e for e in read_log(cfg, "story-2").admitted  # type: ignore[arg-type]
              if e.type == "memory/recall"]
    assert logged[0].data["content"] == DELETED_TEXT
    assert [v.content for v in later.list()] == ["Prefers an aisle seat"]
    sessions.close()


def test_the_story_through_langgraphs_store(fleet: dict[str, object]) -> None:
    from sessionstream.integrations.langgraph_store import SessionstreamStore

    cfg, backend, gov = fleet["cfg"], fleet["backend"], fleet["gov"]
    sessions = FleetStore(cfg)  # type: ignore[arg-type]
    h = sessions.open("lg-story-1")
    h.append_many(_turn("I prefer a window seat."))
    seq = next(e.seq for e in h.events() if e.type == "user/message")
    store = SessionstreamStore(backend(), user="ada")  # type: ignore[operator]
    store.put_with_sources(("prefs",), "seat", {"text": "Prefers a window seat"},
                           [("lg-story-1", [seq])])
    other = SessionstreamStore(backend(), user="ada")  # type: ignore[operator]
    assert other.get(("prefs",), "seat").value == {"text": "Prefers a window seat"}
    assert [i.key for i in other.search(("prefs",), filter={"text": "Prefers a window seat"})
            ] == ["seat"]
    store.put(("prefs",), "seat", {"text": "Prefers an aisle seat"})  # a new version
    assert other.get(("prefs",), "seat").value == {"text": "Prefers an aisle seat"}
    store.put_with_sources(("prefs",), "meal", {"text": "Vegetarian"}, [("lg-story-1", [seq])])
    gov.delete("lg-story-1")  # type: ignore[attr-defined]
    assert other.get(("prefs",), "meal") is None  # derived only from the deleted session
    assert other.get(("prefs",), "seat").value == {"text": "Prefers an aisle seat"}
    assert other.list_namespaces() == [("prefs",)]
    sessions.close()


def test_the_story_through_adks_memory_service(fleet: dict[str, object]) -> None:
    from google.adk.events.event import Event
    from google.genai import types

    from sessionstream.integrations.google_adk import (
        EVENT_TYPES,
        SessionstreamSessionService,
        stream_id,
    )
    from sessionstream.integrations.google_adk_memory import SessionstreamMemoryService

    cfg, backend, gov = fleet["cfg"], fleet["backend"], fleet["gov"]

    async def run() -> None:
        store = FleetStore(cfg, EVENT_TYPES)  # type: ignore[arg-type]
        sessions = SessionstreamSessionService(store)
        memory = SessionstreamMemoryService(backend(), store)  # type: ignore[operator]
        s = await sessions.create_session(app_name="travel", user_id="ada")
        await sessions.append_event(s, Event(author="user", invocation_id="i",
                                             content=types.Content(role="user", parts=[
                                                 types.Part(text="I prefer a window seat.")])))
        await memory.add_session_to_memory(s)
        found = await memory.search_memory(app_name="travel", user_id="ada",
                                           query="seat preference")
        assert found.memories[0].content.parts[0].text == "Prefers a window seat"
        gov.delete(stream_id("travel", "ada", s.id))  # type: ignore[attr-defined]
        assert (await memory.search_memory(app_name="travel", user_id="ada",
                                           query="window seat")).memories == []
        store.close()

    asyncio.run(run())
