"""The ADK session-service contract over the fleet backend (real Kafka + Redis, the fenced
SessionWriter), and what only the fleet has: a second process's writer gets ADK's
StaleSessionError while the first holds the session."""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.errors import StaleSessionError

from sessionstream.integrations.google_adk import EVENT_TYPES, SessionstreamSessionService
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig
from tests.contract.adk_contract import AdkServiceContract, texts, user_says
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


class TestFleetService(AdkServiceContract):
    @pytest.fixture
    def make_service(self, writer_cfg: WriterConfig) -> Any:
        made: list[FleetStore] = []

        def make() -> SessionstreamSessionService:
            store = FleetStore(writer_cfg, EVENT_TYPES)  # a new store: another process's
            made.append(store)
            return SessionstreamSessionService(store)

        yield make
        for s in made:
            s.close()


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
