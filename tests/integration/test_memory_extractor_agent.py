"""The extractor agent follows the tenant's change feed in Redis (as the worker writes it):
it extracts from sessions whose turns ended, once per as_of_seq, resumes from its cursor
in Redis, and leaves a session alone when nobody owns its memories."""

from __future__ import annotations

import redis

from sessionstream.core.events import Draft
from sessionstream.core.memory import Actor, Namespace, Role, Scope
from sessionstream.core.memory.extract import PatternModel
from sessionstream.core.rows import CHANGE_FIELD, KeySpace, change_entry
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient
from sessionstream.integrations.memory_extract import ExtractorAgent
from sessionstream.integrations.store import MemoryStore


def _turn(text: str) -> list[Draft]:
    return [Draft("turn/start", {}), Draft("user/message", {"content": text}),
            Draft("step/start", {}), Draft("assistant/message", {"content": "ok"}),
            Draft("step/end", {}), Draft("turn/end", {"reason": "completed"})]


def test_the_agent_follows_the_feed_and_resumes_from_its_cursor(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    keys = KeySpace("default", redis_prefix)
    store, backend = MemoryStore(), InMemoryBackend("default")
    owners = {"s-ada": Namespace("default", Scope.USER, "ada")}

    def feed(sid: str) -> None:  # what the worker appends after folding a session
        last = store.open(sid).events()[-1].seq
        redis_client.xadd(keys.tenant_changes(1),
                          {CHANGE_FIELD: change_entry(sid, last, last, ["surface"])})

    def agent() -> ExtractorAgent:
        return ExtractorAgent(
            redis_client, keys, read=lambda sid: store.open(sid).events(),
            client_for=lambda ns: MemoryClient(backend, Actor(Role.EXTRACTOR, "x",
                                                              user=ns.owner)),
            owner=owners.get, model=PatternModel(), cooldown_s=0)

    store.open("s-ada").append_many(_turn("I prefer green tea."))
    store.open("s-nobody").append_many(_turn("I prefer coffee."))
    feed("s-ada")
    feed("s-nobody")
    first = agent()
    assert first.step() == 1 and first.proposed == 1
    reader = MemoryClient(backend, Actor(Role.AGENT, "bot", user="ada"))
    assert [v.content for v in reader.list()] == ["Prefers green tea"]
    assert reader.list()[0].extractor.model == "pattern"
    # a new agent (a restart) resumes after the entries it handled
    again = agent()
    assert again.step() == 0
    store.open("s-ada").append_many(_turn("My home town is Bergen."))
    feed("s-ada")
    assert again.step() == 1
    assert sorted(v.content for v in reader.list()) == ["Home town is Bergen",
                                                        "Prefers green tea"]
