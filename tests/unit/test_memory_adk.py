"""ADK's memory service on long-term memory: memories extracted from a session cite the
sessionstream session and seqs, search returns them with their provenance, one memory
or a whole session can be forgotten — and other users are out of reach."""

from __future__ import annotations

import asyncio

import pytest
from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

from sessionstream.integrations.google_adk import (
    EVENT_TYPES,
    SessionstreamSessionService,
    stream_id,
)
from sessionstream.integrations.google_adk_memory import SessionstreamMemoryService
from sessionstream.integrations.memory import InMemoryBackend
from sessionstream.integrations.store import MemoryStore


def _said(text: str, author: str = "user") -> Event:
    return Event(author=author, invocation_id="inv",
                 content=types.Content(role="user" if author == "user" else "model",
                                       parts=[types.Part(text=text)]))


def test_the_adk_memory_service() -> None:
    async def run() -> None:
        store = MemoryStore(event_types=EVENT_TYPES)
        sessions = SessionstreamSessionService(store)
        memory = SessionstreamMemoryService(InMemoryBackend("default"), store)
        s1 = await sessions.create_session(app_name="travel", user_id="ada")
        await sessions.append_event(s1, _said("Hi. I prefer a window seat on long flights."))
        await sessions.append_event(s1, _said("Noted!", author="agent"))
        await memory.add_session_to_memory(s1)
        await memory.add_session_to_memory(s1)  # again: the duplicate collapses
        got = await memory.search_memory(app_name="travel", user_id="ada",
                                         query="which seat on flights")
        (entry,) = got.memories
        assert entry.content.parts[0].text == "Prefers a window seat on long flights"
        (source,) = entry.custom_metadata["sources"]
        assert source["session_id"] == stream_id("travel", "ada", s1.id)
        seqs = [e.seq for e in store.open(source["session_id"]).events()
                if e.type == "user/message"]
        assert source["seqs"] == seqs[:1]
        # another user, or another app, sees nothing
        assert (await memory.search_memory(app_name="travel", user_id="bob",
                                           query="window seat")).memories == []
        assert (await memory.search_memory(app_name="other", user_id="ada",
                                           query="window seat")).memories == []
        # explicit memories, deleted by the id search gave
        await memory.add_memory(app_name="travel", user_id="ada", memories=[MemoryEntry(
            content=types.Content(parts=[types.Part(text="Vegetarian")]))])
        veg = (await memory.search_memory(app_name="travel", user_id="ada",
                                          query="vegetarian")).memories[0]
        await memory.delete_memory(app_name="travel", user_id="ada", memory_id=veg.id)
        assert (await memory.search_memory(app_name="travel", user_id="ada",
                                           query="vegetarian")).memories == []
        # the per-session forget ADK lacks
        report = await memory.forget_session(app_name="travel", user_id="ada",
                                             session_id=s1.id)
        assert report["forgotten"] and (await memory.search_memory(
            app_name="travel", user_id="ada", query="window seat")).memories == []

    asyncio.run(run())


def test_add_events_to_memory_cites_only_the_events_the_session_stored(
        caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        store = MemoryStore(event_types=EVENT_TYPES)
        sessions = SessionstreamSessionService(store)
        memory = SessionstreamMemoryService(InMemoryBackend("default"), store)
        s = await sessions.create_session(app_name="travel", user_id="ada")
        await sessions.append_event(s, _said("I live in Lyon."))
        late = _said("I am allergic to peanuts.")
        await sessions.append_event(s, late)
        never_stored = _said("I work as a pilot.")  # not in the session: nothing to cite
        await memory.add_events_to_memory(app_name="travel", user_id="ada",
                                          events=[late, never_stored], session_id=s.id)
        found = await memory.search_memory(app_name="travel", user_id="ada",
                                           query="allergic pilot Lyon")
        texts = [m.content.parts[0].text for m in found.memories]
        assert texts == ["Allergic to peanuts"]  # neither the earlier event nor the unstored
        seq = [e.seq for e in store.open(stream_id("travel", "ada", s.id)).events()
               if e.type == "user/message"][1]
        assert found.memories[0].custom_metadata["sources"][0]["seqs"] == [seq]
        # without a session id nothing can be cited: nothing is extracted, and it says so
        with caplog.at_level("WARNING"):
            await memory.add_events_to_memory(app_name="travel", user_id="bob",
                                              events=[_said("I live in Oslo.")])
        assert "without a session_id" in caplog.text and "Oslo" not in caplog.text
        assert (await memory.search_memory(app_name="travel", user_id="bob",
                                           query="Oslo")).memories == []

    asyncio.run(run())
