"""LangGraph's BaseStore on long-term memory, offline: what LangGraph users rely on and
what only ours has (history, provenance, forgetting by session)."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.base import InvalidNamespaceError, PutOp

from sessionstream.core.memory import Actor, Role
from sessionstream.integrations.langgraph_store import SessionstreamStore
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient


def test_put_get_search_list_and_delete() -> None:
    store = SessionstreamStore(InMemoryBackend(), user="ada")
    store.put(("docs", "a"), "k1", {"text": "red shoes", "size": 38})
    store.put(("docs", "b\n"), "k2", {"text": "red hat", "size": 56})  # any label
    assert store.get(("docs", "a"), "k1").value == {"text": "red shoes", "size": 38}
    assert [i.key for i in store.search(("docs",), filter={"size": {"$gt": 40}})] == ["k2"]
    # a filter key is a literal path, never code: an injection finds nothing
    assert store.search(("docs",), filter={"size') OR 1=1 --": 1}) == []
    assert store.list_namespaces(prefix=("docs",)) == [("docs", "a"), ("docs", "b\n")]
    store.delete(("docs", "a"), "k1")
    assert store.get(("docs", "a"), "k1") is None
    assert store.list_namespaces() == [("docs", "b\n")]
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", {"v": 1})])


def test_a_put_keeps_history_and_another_user_sees_nothing() -> None:
    backend = InMemoryBackend()
    store = SessionstreamStore(backend, user="ada")
    store.put(("prefs",), "seat", {"v": "window"})
    store.put(("prefs",), "seat", {"v": "aisle"})
    mem = MemoryClient(backend, Actor(Role.AGENT, "x", user="ada"))
    ns = store._ns(("prefs",))
    (memory_id,) = list(backend.state(ns).memories)
    versions = mem.explain(memory_id, namespace=ns)["versions"]
    assert [v["live"] for v in versions] == [False, True]  # the old value is history
    assert SessionstreamStore(backend, user="bob").get(("prefs",), "seat") is None


def test_a_session_deleted_forgets_the_items_it_alone_supports() -> None:
    backend = InMemoryBackend()
    store = SessionstreamStore(backend, user="ada")
    store.put_with_sources(("prefs",), "meal", {"v": "vegetarian"}, [("s-1", [4])])
    store.put_with_sources(("prefs",), "seat", {"v": "window"}, [("s-1", [5]), ("s-2", [1])])
    MemoryClient(backend, Actor(Role.OPERATOR, "dpo")).forget_session("s-1")
    assert store.get(("prefs",), "meal") is None
    assert store.get(("prefs",), "seat").value == {"v": "window"}


def test_async_index_with_an_embed_function_and_ttl() -> None:
    now = [1_000_000]

    def embed(texts: list[str]) -> list[list[float]]:
        return [[float(t.count("a")), float(t.count("e")), 1.0] for t in texts]

    store = SessionstreamStore(InMemoryBackend(), user="ada", clock=lambda: now[0],
                               index={"dims": 3, "embed": embed, "fields": ["text"]},
                               ttl={"default_ttl": 1, "refresh_on_read": True})

    async def run() -> None:
        await store.aput(("n",), "a", {"text": "aaaa"})
        await store.aput(("n",), "e", {"text": "eeee"})
        hits = await store.asearch(("n",), query="aaa")
        assert [h.key for h in hits] == ["a", "e"] and hits[0].score > hits[1].score
        now[0] += 50_000  # 50 s: within the minute, and the read extends it
        assert await store.aget(("n",), "a") is not None
        now[0] += 30_000  # "e" is past its minute, "a" was refreshed 30 s ago
        assert await store.aget(("n",), "e") is None
        assert await store.asweep_ttl() == 1
        assert (await store.aget(("n",), "a")) is not None

    asyncio.run(run())
