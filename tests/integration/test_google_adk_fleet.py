"""The ADK session-service contract over the fleet backend (real Kafka + Redis, the fenced
SessionWriter, content sealed), and what only the fleet has: a stale copy on another
node gets ADK's StaleSessionError; a node that never wrote a session reads it from the
inline views, not the log; delete_session crypto-shreds and purges, and a legal hold
refuses it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.sessions.base_session_service import GetSessionConfig

from sessionstream.core.errors import LegalHold
from sessionstream.core.privacy import DELETED_TEXT, DataClass, KeyState
from sessionstream.core.settings import Settings
from sessionstream.governance.wiring import content_cipher
from sessionstream.integrations.google_adk import (
    EVENT_TYPES,
    SESSION_VIEW,
    SessionstreamSessionService,
    stream_id,
)
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig
from tests.contract.adk_contract import AdkServiceContract, texts, user_says
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


CANARY = "canary-adk-del-51e0"


@pytest.fixture
def make_service(writer_cfg: WriterConfig, tmp_path: Path) -> Any:
    """Services on the fleet, each on a new store with its own key cache: another
    process's (content sealed, the key files shared)."""
    made: list[FleetStore] = []
    settings = Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path)})

    def make() -> SessionstreamSessionService:
        cfg = dataclasses.replace(writer_cfg, cipher=content_cipher(settings))
        store = FleetStore(cfg, EVENT_TYPES)
        made.append(store)
        return SessionstreamSessionService(store)

    yield make
    for s in made:
        s.close()


class TestFleetService(AdkServiceContract):
    shreds = True


async def test_a_stale_copy_gets_stale_session_error_and_the_next_process_writes_at_once(
        writer_cfg: WriterConfig) -> None:
    a = SessionstreamSessionService(FleetStore(writer_cfg, EVENT_TYPES))
    b = SessionstreamSessionService(FleetStore(writer_cfg, EVENT_TYPES))
    await a.create_session(app_name="race", user_id="u", session_id="s")
    sa = await a.get_session(app_name="race", user_id="u", session_id="s")
    sb = await b.get_session(app_name="race", user_id="u", session_id="s")
    assert sa is not None and sb is not None
    await a.append_event(sa, user_says("from a"))
    with pytest.raises(StaleSessionError):
        await b.append_event(sb, user_says("from b"))
    # a fresh copy is current, and a's write handed the session on: b writes at once
    sb = await b.get_session(app_name="race", user_id="u", session_id="s")
    assert sb is not None and texts(sb) == ["from a"]
    await b.append_event(sb, user_says("from b"))
    with pytest.raises(StaleSessionError):  # now a's copy is the one behind
        await a.append_event(sa, user_says("from a, again"))
    got = await a.get_session(app_name="race", user_id="u", session_id="s")
    assert got is not None and texts(got) == ["from a", "from b"]
    await a.close()
    await b.close()


async def test_a_node_that_never_wrote_a_session_reads_it_from_the_views_not_the_log(
        make_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = make_service()
    s = await writer.create_session(app_name="views", user_id="u", session_id="s",
                                    state={"k": 1, "user:lang": "fr", "app:v": 2})
    for i in range(40):
        await writer.append_event(s, user_says(f"m{i}"))
    await writer.create_session(app_name="views", user_id="u2", session_id="t")

    def no_log(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read the log")

    monkeypatch.setattr("sessionstream.integrations.store.read_log", no_log)
    reader = make_service()  # another node: it never wrote these sessions
    got = await reader.get_session(app_name="views", user_id="u", session_id="s",
                                   config=GetSessionConfig(num_recent_events=3))
    assert got is not None and texts(got) == ["m37", "m38", "m39"]
    assert got.state == {"k": 1, "user:lang": "fr", "app:v": 2}
    whole = await reader.get_session(app_name="views", user_id="u", session_id="s")
    assert whole is not None and whole == s
    assert [(x.user_id, x.id) for x in (await reader.list_sessions(app_name="views")
                                        ).sessions] == [("u", "s"), ("u2", "t")]
    assert await reader.get_user_state(app_name="views", user_id="u") == {"lang": "fr"}
    assert await reader.get_session(app_name="views", user_id="u", session_id="no") is None


async def test_delete_session_shreds_the_content_and_purges_the_views(
        make_service: Any, writer_cfg: WriterConfig, redis_client: Any) -> None:
    svc = make_service()
    s = await svc.create_session(app_name="del", user_id="u", session_id="s",
                                 state={"secret": CANARY})
    await svc.append_event(s, user_says(f"{CANARY} my card"))
    sid = stream_id("del", "u", "s")
    assert (await svc.get_session(app_name="del", user_id="u", session_id="s")) is not None
    await svc.delete_session(app_name="del", user_id="u", session_id="s")
    keys = writer_cfg.keys
    cipher = svc.store.cfg.cipher
    assert cipher.store.lookup("default", sid, DataClass.SURFACE).state is KeyState.SHREDDED
    # the view left is the deletion's marker only: no event, no state
    head = redis_client.hgetall(keys.inline_view(sid, SESSION_VIEW.name))
    assert sorted(k for k in head if k.startswith("f:")) == ["f:h"]
    assert redis_client.llen(keys.inline_view_chunks(sid, SESSION_VIEW.name)) == 0
    reader = make_service()  # a fresh process: no cached key
    log = reader.store.open(sid).events()
    assert [e.data["content"] for e in log if e.type == "user/message"] == [DELETED_TEXT]
    assert "session/shred" in [e.type for e in log]
    assert await reader.get_session(app_name="del", user_id="u", session_id="s") is None


async def test_a_legal_hold_refuses_delete_session_and_keeps_the_session(
        make_service: Any) -> None:
    svc = make_service()
    await svc.create_session(app_name="hold", user_id="u", session_id="s")
    cipher = svc.store.cfg.cipher
    cipher.store.place_hold("default", stream_id("hold", "u", "s"), reason="case 12",
                            principal="dpo")
    with pytest.raises(LegalHold, match="case 12"):
        await svc.delete_session(app_name="hold", user_id="u", session_id="s")
    assert await svc.get_session(app_name="hold", user_id="u", session_id="s") is not None
