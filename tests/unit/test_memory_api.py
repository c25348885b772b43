"""The memory API over the in-memory backend: the backend contract, and the search."""

from __future__ import annotations

import pytest

from sessionstream.core.memory import Role
from sessionstream.integrations.memory import InMemoryBackend
from tests.contract.memory_contract import MakeBackend, MemoryContract, client


class TestInMemoryBackend(MemoryContract):
    @pytest.fixture
    def make_backend(self) -> MakeBackend:
        backend = InMemoryBackend("default")
        return lambda: backend


def test_forgetting_destroys_every_record_key_of_the_content() -> None:
    backend = InMemoryBackend("default")
    mem = client(backend, "ada")
    a = mem.propose("Prefers tea", kind="preference", sources=[("s-1", [1])])
    mem.propose("Prefers  tea", kind="preference", sources=[("s-2", [2])])  # a duplicate
    mem.forget([a.ref.id])
    assert len(backend.shredded) == 2  # the first record's key and the duplicate's


def test_hybrid_search_ranks_the_lexical_and_vector_matches() -> None:
    mem = client(InMemoryBackend("default"), "ada")
    for text in ("Prefers a window seat", "Allergic to peanuts", "Works at the museum",
                 "Lives near the station"):
        mem.propose(text, kind="fact")
    assert mem.search("windw seat")[0].version.content == "Prefers a window seat"  # typo
    assert mem.search("peanuts", mode="lexical")[0].version.content == "Allergic to peanuts"
    listed = [h.version.ref.id for h in mem.search(None, k=2)]  # no query: by id, paged
    assert len(listed) == 2 and listed == sorted(listed)
    assert [h.version.ref.id for h in mem.search(None, k=2, offset=2)] != listed


def test_search_filters_follow_langgraph_operators() -> None:
    mem = client(InMemoryBackend("default"), "ada")
    mem.propose({"text": "red shoes", "size": 38}, kind="note", index=["text"])
    mem.propose({"text": "red hat", "size": 56}, kind="note", index=["text"])
    hits = mem.search("red", filter={"size": {"$gt": 40}})
    assert [h.version.content["text"] for h in hits] == ["red hat"]


def test_only_an_operator_forgets_a_whole_session() -> None:
    from sessionstream.core.memory.errors import MemoryRefused

    with pytest.raises(MemoryRefused, match="operator"):
        client(InMemoryBackend("default"), "ada", role=Role.AGENT).forget_session("s")
