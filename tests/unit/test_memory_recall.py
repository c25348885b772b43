"""Model-visible means logged: memory/recall events, their surface, sealing and explain."""

from __future__ import annotations

from pathlib import Path

from sessionstream.core.memory import Actor, Role
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.request import (
    PromptRegistry,
    RequestHeader,
    assemble,
    context_snapshot_ids,
    explain,
)
from sessionstream.core.sealed import DataClass
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient
from sessionstream.integrations.store import MemoryStore


def _client() -> MemoryClient:
    return MemoryClient(InMemoryBackend("default"), Actor(Role.AGENT, "bot", user="ada"))


def test_a_recall_is_logged_and_is_a_context_message_of_the_surface() -> None:
    mem = _client()
    v = mem.propose("Prefers a window seat", kind="preference", sources=[("s-1", [3])])
    handle = MemoryStore().open("s-2")
    handle.append("user/message", {"content": "book me a flight"})
    hits = mem.recall(handle, "seat")
    assert [h.version.ref for h in hits] == [v.ref]
    session = handle.session()
    assert session is not None
    (recall,) = [e for e in session.events if e.type == "memory/recall"]
    assert recall.data["ref"] == str(v.ref) and recall.data["key"].startswith("mem/")
    messages = list(session.derive_messages())
    assert messages[-1].content == "Prefers a window seat"
    assert messages[-1].kind.value == "context"
    request = assemble(messages, PromptRegistry(), header=RequestHeader(provider="p",
                                                                        model="m"),
                       snapshot_ids=context_snapshot_ids(session.events))
    parts = [p for p in explain(request) if p.get("memory")]
    assert parts == [{"part": "message", "index": 1, "role": "user", "kind": "context",
                      "seqs": [recall.seq],
                      "memory": {"ref": str(v.ref), "namespace": mem.namespace().key}}]


def test_the_copy_is_sealed_under_the_memory_key_and_shredding_it_reaches_the_copy(
        tmp_path: Path) -> None:
    mem = _client()
    mem.propose("Canary-91 likes jazz", kind="preference")
    handle = MemoryStore().open("s-3")
    mem.recall(handle, "jazz")
    session = handle.session()
    assert session is not None
    event = session.events[-1]
    store = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    cipher = ContentCipher(store, "default")
    sealed = cipher.seal_event(event)
    assert "Canary-91" not in str(sealed.data)
    classes = {p.data_class: p.key_session for p in sealed.sealed}
    # the query is the session's (surface); the memory's text is under the memory's key
    assert classes == {DataClass.SURFACE: "s-3", DataClass.MEMORY: event.data["key"]}
    assert cipher.open(sealed, sealed.sealed).data["content"] == "Canary-91 likes jazz"
    # the session's own keys do not open it: only the memory's key does
    store.shred("default", "s-3", (DataClass.SURFACE, DataClass.RAW), principal="t",
                reason="t")
    assert cipher.open(sealed, sealed.sealed).data["content"] == "Canary-91 likes jazz"
    store.shred("default", event.data["key"], (DataClass.MEMORY,), principal="t", reason="t")
    assert cipher.open(sealed, sealed.sealed).data["content"] == DELETED_TEXT
