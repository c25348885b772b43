"""The store contract over the in-process backends: memory and a JSONL directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessionstream.core.events import Draft
from sessionstream.core.jsonl import read_jsonl
from sessionstream.integrations.store import JsonlStore, MemoryStore, SessionStore, StoreError
from tests.contract.store_contract import NOTE, MakeStore, StoreContract


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def make_store(self) -> MakeStore:
        # One process's memory: every "other store" is that process's store.
        stores: dict[tuple[str, ...], SessionStore] = {}

        def make(event_types: Any = ()) -> SessionStore:
            key = tuple(t.name for t in event_types)
            if key not in stores:
                stores[key] = MemoryStore(event_types)
            return stores[key]

        return make


class TestJsonlStore(StoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> MakeStore:
        return lambda event_types=(): JsonlStore(tmp_path, event_types)


def test_a_jsonl_session_is_a_log_file_the_cli_reads(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path, [NOTE])
    h = store.open("s-1")
    h.append_many([Draft("user/message", {"content": "deferred"})], durable=False)
    assert not (tmp_path / "s-1.jsonl").exists()  # nothing durable before the flush
    h.flush()
    h.append("user/message", {"content": "hi"})  # a durable write: in the file on return
    events = read_jsonl(tmp_path / "s-1.jsonl", catalog=store.catalog)
    assert [e.type for e in events] == ["session/start", "user/message", "user/message"]


def test_a_jsonl_store_refuses_an_id_that_cannot_name_a_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot name a file"):
        JsonlStore(tmp_path).open("../escape")
