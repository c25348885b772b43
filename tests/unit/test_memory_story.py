"""The issue's story through the plain API, offline: a session states a preference, the
extractor proposes it, a later session retrieves it by a paraphrased query and logs that
it did, a contradicting statement supersedes it, deleting the source session forgets it."""

from __future__ import annotations

from sessionstream.core.events import Draft
from sessionstream.core.memory import Actor, Role
from sessionstream.core.memory.extract import (
    Candidate,
    ExtractRequest,
    PatternModel,
    Said,
    ScriptedModel,
)
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient
from sessionstream.integrations.memory_extract import ended_user_messages, extract_session
from sessionstream.integrations.store import MemoryStore


def _turn(text: str) -> list[Draft]:
    return [Draft("turn/start", {}), Draft("user/message", {"content": text}),
            Draft("step/start", {}), Draft("assistant/message", {"content": "noted"}),
            Draft("step/end", {}), Draft("turn/end", {"reason": "completed"})]


def test_the_story() -> None:
    backend, store = InMemoryBackend("default"), MemoryStore()
    extractor = MemoryClient(backend, Actor(Role.EXTRACTOR, "x", user="ada"))
    agent = MemoryClient(backend, Actor(Role.AGENT, "bot", user="ada"))
    s1 = store.open("s1")
    s1.append_many(_turn("I prefer a window seat on long flights."))
    (placed,) = extract_session(extractor, "s1", s1.events(), PatternModel())
    assert placed.content == "Prefers a window seat on long flights"
    assert placed.sources[0].session_id == "s1" and placed.sources[0].seqs == (2,)
    assert placed.extractor.model == "pattern"
    # a later session: retrieved by a paraphrase, and the recall is logged
    s2 = store.open("s2")
    s2.append("user/message", {"content": "book me something to Tokyo"})
    hits = agent.recall(s2, "which seat does she like on flights?")
    assert hits[0].version.ref == placed.ref
    s2_events = s2.events()
    logged = next(e for e in s2_events if e.type == "memory/recall")
    assert logged.data["ref"] == str(placed.ref)
    # a contradiction supersedes it
    s3 = store.open("s3")
    s3.append_many(_turn("These days I prefer an aisle seat."))
    (newer,) = extract_session(extractor, "s3", s3.events(), PatternModel())
    assert newer.supersedes == (placed.ref,)
    assert [v.content for v in agent.list()] == ["Prefers an aisle seat"]
    # deleting s3 forgets what only it supports; the old memory stays superseded
    MemoryClient(backend, Actor(Role.OPERATOR, "dpo")).forget_session("s3")
    assert agent.list() == [] and agent.search("aisle") == []
    assert agent.explain(placed.ref.id)["versions"][0]["superseded_by"] == str(newer.ref)


def test_a_scripted_model_and_what_counts_as_said() -> None:
    store = MemoryStore()
    h = store.open("s9")
    h.append_many(_turn("first"))
    h.append_many([Draft("turn/start", {}), Draft("user/message", {"content": "open turn"})])
    assert [s.text for s in ended_user_messages(h.events())] == ["first"]
    model = ScriptedModel({"s9": [Candidate("fact", "Has two cats", (2,))]})
    assert model.extract(ExtractRequest("s9", (Said(2, "x"),)))[0].content == "Has two cats"
    client = MemoryClient(InMemoryBackend(), Actor(Role.EXTRACTOR, "x", user="ada"))
    (v,) = extract_session(client, "s9", h.events(), model)
    assert (v.content, v.extractor.prompt_version) == ("Has two cats", "script-1")
