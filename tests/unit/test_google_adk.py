"""The ADK session-service contract over the in-process backends (memory, JSONL files),
and the adapter's own rules: the session id mapping, a store without the ADK types."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionstream.integrations.google_adk import (
    EVENT_TYPES,
    SCOPE_VIEW,
    SESSION_VIEW,
    SessionstreamSessionService,
    stream_id,
)
from sessionstream.integrations.store import JsonlStore, MemoryStore
from tests.contract.adk_contract import AdkServiceContract, MakeService


class TestMemoryService(AdkServiceContract):
    @pytest.fixture
    def make_service(self) -> MakeService:
        store = MemoryStore(EVENT_TYPES)  # one process's memory: every service shares it
        return lambda: SessionstreamSessionService(store)


class TestJsonlService(AdkServiceContract):
    @pytest.fixture
    def make_service(self, tmp_path: Path) -> MakeService:
        return lambda: SessionstreamSessionService(JsonlStore(tmp_path, EVENT_TYPES))


def test_session_ids_are_readable_when_plain_and_a_digest_otherwise() -> None:
    assert stream_id("app", "u-1", "s_2") == "adk.app.u-1.s_2"
    odd = stream_id("my app", "u", "s")
    assert odd.startswith("adk-h.") and odd != stream_id("my app", "u", "t")
    # a dot inside a part cannot make two triples one id
    assert stream_id("a.b", "c", "d") != stream_id("a", "b.c", "d")


def test_the_service_registers_its_types_and_views_with_the_store_it_is_given() -> None:
    store = MemoryStore()
    SessionstreamSessionService(store)
    assert all(store.catalog.get(t.name) is t for t in EVENT_TYPES)
    assert set(store.views) == {SESSION_VIEW.name, SCOPE_VIEW.name}
    SessionstreamSessionService(store)  # a second service on the same store: the same
