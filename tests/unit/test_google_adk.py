"""The ADK session-service contract over the in-process backends (memory, JSONL files),
and the adapter's own rules: the session id mapping, the types and views it registers,
what a process that dies between two writes leaves (and how the next read repairs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event_actions import EventActions

from sessionstream.integrations.google_adk import (
    EVENT_TYPES,
    SCOPE_VIEW,
    SESSION_VIEW,
    SessionstreamSessionService,
    stream_id,
)
from sessionstream.integrations.store import JsonlStore, MemoryStore
from tests.contract.adk_contract import AdkServiceContract, MakeService, agent_says


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


class _Died(Exception):
    """The process stopped here."""


class _DiesBeforeItsScopedState(SessionstreamSessionService):
    """A process that dies right after its event is durable: the app/user state it
    derives from the event never reaches the scope sessions."""

    def _apply_scoped(self, *args: Any, **kwargs: Any) -> None:
        raise _Died


class _DiesAfterTheIndex(SessionstreamSessionService):
    """A process that dies after indexing a new session, before writing it."""

    def _index(self, *args: Any) -> None:
        super()._index(*args)
        raise _Died


def _says(text: str, ts: float, delta: dict[str, Any]) -> Any:
    return agent_says(text, ts=ts, actions=EventActions(state_delta=delta))


async def test_a_delta_a_dead_process_did_not_apply_is_applied_by_the_next_read() -> None:
    store = MemoryStore()
    ok = SessionstreamSessionService(store)
    await ok.create_session(app_name="a", user_id="u", session_id="s")
    dying = _DiesBeforeItsScopedState(store)
    s = await dying.get_session(app_name="a", user_id="u", session_id="s")
    assert s is not None
    with pytest.raises(_Died):
        await dying.append_event(s, _says("x", 100.0, {"user:lang": "fr", "app:v": 1,
                                                       "own": 2}))
    # the event is stored, its app/user delta not derived yet: other sessions miss it
    assert await ok.get_user_state(app_name="a", user_id="u") == {}
    assert (await ok.create_session(app_name="a", user_id="u")).state == {}
    got = await ok.get_session(app_name="a", user_id="u", session_id="s")  # repairs
    assert got is not None and got.state == {"user:lang": "fr", "app:v": 1, "own": 2}
    assert await ok.get_user_state(app_name="a", user_id="u") == {"lang": "fr"}
    assert (await ok.create_session(app_name="a", user_id="u")).state == {
        "user:lang": "fr", "app:v": 1}


async def test_a_late_repair_does_not_undo_a_newer_value() -> None:
    store = MemoryStore()
    ok = SessionstreamSessionService(store)
    a = await ok.create_session(app_name="a", user_id="u", session_id="a")
    b = await ok.create_session(app_name="a", user_id="u", session_id="b")
    with pytest.raises(_Died):
        await _DiesBeforeItsScopedState(store).append_event(
            a, _says("older", 100.0, {"user:lang": "fr"}))
    await ok.append_event(b, _says("newer", 200.0, {"user:lang": "de"}))
    got = await ok.get_session(app_name="a", user_id="u", session_id="a")  # the repair
    assert got is not None and got.state == {"user:lang": "de"}
    listed = (await ok.list_sessions(app_name="a", user_id="u")).sessions
    assert {s.id: s.state for s in listed} == {"a": {"user:lang": "de"},
                                              "b": {"user:lang": "de"}}
    assert await ok.get_user_state(app_name="a", user_id="u") == {"lang": "de"}


async def test_a_session_indexed_but_never_written_is_not_listed_and_its_id_stays_free(
        ) -> None:
    store = MemoryStore()
    with pytest.raises(_Died):
        await _DiesAfterTheIndex(store).create_session(app_name="a", user_id="u",
                                                       session_id="s")
    ok = SessionstreamSessionService(store)
    assert (await ok.list_sessions(app_name="a", user_id="u")).sessions == []
    assert (await ok.list_sessions(app_name="a")).sessions == []
    assert await ok.get_session(app_name="a", user_id="u", session_id="s") is None
    await ok.create_session(app_name="a", user_id="u", session_id="s")
    assert [x.id for x in (await ok.list_sessions(app_name="a")).sessions] == ["s"]


async def test_a_session_re_created_after_a_deletion_is_a_new_generation() -> None:
    store = MemoryStore()
    svc = SessionstreamSessionService(store)
    for n in range(3):
        s = await svc.create_session(app_name="a", user_id="u", session_id="s",
                                     state={"n": n})
        await svc.append_event(s, agent_says(f"life {n}"))
        got = await svc.get_session(app_name="a", user_id="u", session_id="s")
        assert got is not None and got.state == {"n": n} and len(got.events) == 1
        assert [x.state for x in (await svc.list_sessions(app_name="a")).sessions] == [
            {"n": n}]
        await svc.delete_session(app_name="a", user_id="u", session_id="s")
        assert await svc.get_session(app_name="a", user_id="u", session_id="s") is None
    # each life is its own log; the first stream holds the first and the pointer
    assert [len(store.open(stream_id("a", "u", "s", g)).events()) > 0 for g in range(4)] \
        == [True, True, True, False]


class _ShredsRecorded(SessionstreamSessionService):
    """Records what it shreds (the memory store has no keys); ``die`` stops the process
    at its next shred."""

    def __init__(self, store: MemoryStore, shredded: list[str], die: bool = False) -> None:
        super().__init__(store)
        self.shredded = shredded
        self.die = die

    def _shred(self, sid: str) -> None:
        if self.die:
            raise _Died
        self.shredded.append(sid)


@pytest.mark.parametrize("then", ["delete", "create"])
async def test_a_deletion_that_died_before_its_shred_is_finished_by_the_next_call(
        then: str) -> None:
    store, shredded = MemoryStore(), []
    svc = _ShredsRecorded(store, shredded)
    await svc.create_session(app_name="a", user_id="u", session_id="s")
    with pytest.raises(_Died):
        await _ShredsRecorded(store, shredded, die=True).delete_session(
            app_name="a", user_id="u", session_id="s")
    assert await svc.get_session(app_name="a", user_id="u", session_id="s") is None
    assert shredded == []  # deleted, not shredded yet
    if then == "delete":
        await svc.delete_session(app_name="a", user_id="u", session_id="s")
        assert (await svc.list_sessions(app_name="a", user_id="u")).sessions == []
    else:
        await svc.create_session(app_name="a", user_id="u", session_id="s")
        assert [x.id for x in (await svc.list_sessions(app_name="a", user_id="u")
                               ).sessions] == ["s"]
    assert shredded == [stream_id("a", "u", "s")]
    if then == "delete":
        await svc.delete_session(app_name="a", user_id="u", session_id="s")
        assert shredded == [stream_id("a", "u", "s")]  # finished once, not again
    else:
        await svc.delete_session(app_name="a", user_id="u", session_id="s")
        assert shredded == [stream_id("a", "u", "s"), stream_id("a", "u", "s", 1)]
