"""The ADK ``BaseSessionService`` contract, written from ADK's documented behaviour.

ADK's own session tests are not shipped in the google-adk sdist (nor its wheel), so this
is our own suite of what a session service owes its callers: what ADK documents
(``BaseSessionService``, ``GetSessionConfig``, ``StaleSessionError``, the
``app:``/``user:``/``temp:`` prefixes of ``State``) and each behaviour ADK's repository
holds every registered backend to in its shared contract tests, restated here in our own
tests (docs/frameworks/google-adk.md lists them side by side).
Subclassed per backend: ``tests/unit/test_google_adk.py`` (memory, JSONL files) and
``tests/integration/test_google_adk_fleet.py`` (real Kafka + Redis). A subclass provides
``make_service``: a factory of services on one backend, each call a new service object
on the same storage (as another process would build one).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.integrations.google_adk import SessionstreamSessionService, stream_id

MakeService = Callable[[], SessionstreamSessionService]


def user_says(text: str, ts: float | None = None, **kw: Any) -> Event:
    e = Event(author="user", invocation_id="inv", content=types.Content(
        role="user", parts=[types.Part(text=text)]), **kw)
    if ts is not None:
        e.timestamp = ts
    return e


def agent_says(text: str, ts: float | None = None, **kw: Any) -> Event:
    e = Event(author="agent", invocation_id="inv", content=types.Content(
        role="model", parts=[types.Part(text=text)]), **kw)
    if ts is not None:
        e.timestamp = ts
    return e


def agent_calls(call_id: str, name: str, args: dict[str, Any]) -> Event:
    return Event(author="agent", invocation_id="inv", content=types.Content(
        role="model", parts=[types.Part(function_call=types.FunctionCall(
            id=call_id, name=name, args=args))]))


def tool_answers(call_id: str, name: str, response: dict[str, Any]) -> Event:
    return Event(author="agent", invocation_id="inv", content=types.Content(
        role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id=call_id, name=name, response=response))]))


def texts(session: Any) -> list[str]:
    return [p.text for e in session.events for p in (e.content.parts if e.content else [])
            if p.text is not None]


class AdkServiceContract:
    #: Whether delete_session crypto-shreds the ended session's content (the fleet).
    shreds = False

    @pytest.fixture
    def app(self) -> str:
        return f"app{uuid.uuid4().hex[:10]}"  # a fresh app per test: shared servers

    # -- create / get ---------------------------------------------------------------
    async def test_create_then_get_returns_the_session_with_its_state(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u1", state={"k": 1})
        assert s.id and s.app_name == app and s.user_id == "u1" and s.state == {"k": 1}
        got = await svc.get_session(app_name=app, user_id="u1", session_id=s.id)
        assert got is not None and got.id == s.id and got.state == {"k": 1} and got.events == []

    async def test_a_client_id_is_kept_stripped_and_a_second_create_is_refused(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u1", session_id=" s-1 ")
        assert s.id == "s-1"
        with pytest.raises(AlreadyExistsError):
            await svc.create_session(app_name=app, user_id="u1", session_id="s-1")
        # the same id under another user is another session
        other = await svc.create_session(app_name=app, user_id="u2", session_id="s-1")
        assert other.user_id == "u2"

    async def test_a_padded_id_reads_and_deletes_as_its_stripped_form(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="  pad  ")
        assert s.id == "pad"
        got = await svc.get_session(app_name=app, user_id="u", session_id=" pad ")
        assert got is not None and got.id == "pad"
        await svc.delete_session(app_name=app, user_id="u", session_id="pad  ")
        assert await svc.get_session(app_name=app, user_id="u", session_id="pad") is None

    async def test_get_of_an_unknown_session_is_none(self, make_service: MakeService,
                                                     app: str) -> None:
        svc = make_service()
        assert await svc.get_session(app_name=app, user_id="u", session_id="nope") is None
        await svc.create_session(app_name=app, user_id="u", session_id="yes")
        assert await svc.get_session(app_name=app, user_id="other", session_id="yes") is None

    # -- events ---------------------------------------------------------------------
    async def test_appended_events_read_back_whole_from_another_service(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="conv")
        sent = [user_says("weather in Paris?"), agent_calls("c1", "weather", {"city": "Paris"}),
                tool_answers("c1", "weather", {"temp": 21}), agent_says("21 degrees")]
        for e in sent:
            await svc.append_event(s, e)
        assert [e.id for e in s.events] == [e.id for e in sent]
        got = await make_service().get_session(app_name=app, user_id="u", session_id="conv")
        assert got is not None
        assert [(e.id, e.author, e.invocation_id) for e in got.events] == [
            (e.id, e.author, e.invocation_id) for e in sent]
        assert got.events[1].get_function_calls()[0].args == {"city": "Paris"}
        assert got.events[2].get_function_responses()[0].response == {"temp": 21}
        assert texts(got) == ["weather in Paris?", "21 degrees"]
        assert got.last_update_time == pytest.approx(sent[-1].timestamp)

    async def test_every_event_field_and_binary_part_reads_back_equal(
            self, make_service: MakeService, app: str) -> None:
        # a reader in another process gets the Session the writer holds, field for field:
        # inline bytes, grounding blobs, usage, transcriptions, actions, error fields
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", state={"k": "v"})
        assert await make_service().get_session(
            app_name=app, user_id="u", session_id=s.id) == s
        picture = types.Content(role="user", parts=[
            types.Part.from_bytes(data=b"\x89PNG\x00\xff", mime_type="image/png")])
        await svc.append_event(s, Event(
            author="user", invocation_id="inv", content=picture,
            grounding_metadata=types.GroundingMetadata(
                search_entry_point=types.SearchEntryPoint(sdk_blob=b"\x00blob"))))
        await svc.append_event(s, Event(
            author="agent", invocation_id="inv2", turn_complete=True, interrupted=True,
            content=types.Content(role="model", parts=[types.Part(text="done")]),
            actions=EventActions(artifact_delta={"report.pdf": 0},
                                 transfer_to_agent="billing", escalate=True),
            long_running_tool_ids={"job-1"}, error_code="E1", error_message="late",
            grounding_metadata=types.GroundingMetadata(web_search_queries=["q"]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=3, candidates_token_count=1, total_token_count=4),
            citation_metadata=types.CitationMetadata(), custom_metadata={"trace": "t1"},
            input_transcription=types.Transcription(text="in", finished=True),
            output_transcription=types.Transcription(text="out", finished=True)))
        got = await make_service().get_session(app_name=app, user_id="u", session_id=s.id)
        assert got == s
        assert got is not None and got.events[0].content == picture

    async def test_last_update_time_is_the_latest_event_timestamp(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u")
        later = s.last_update_time + 10
        await svc.append_event(s, user_says("later", ts=later))
        assert s.last_update_time == pytest.approx(later, abs=1e-6)
        got = await make_service().get_session(app_name=app, user_id="u", session_id=s.id)
        assert got is not None and got.last_update_time == pytest.approx(later, abs=1e-6)

    async def test_the_events_are_session_messages_for_derive_messages(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="msgs")
        for e in [user_says("hi"), agent_calls("c9", "lookup", {"q": "x"}),
                  tool_answers("c9", "lookup", {"r": 1}), agent_says("found")]:
            await svc.append_event(s, e)
        core = svc.store.open(stream_id(app, "u", "msgs")).session()
        assert core is not None
        msgs = core.derive_messages()
        assert [(m.role.value, m.content) for m in msgs] == [
            ("user", "hi"), ("assistant", ""), ("tool", {"r": 1}), ("assistant", "found")]
        assert msgs[1].tool_calls[0].name == "lookup"

    async def test_a_partial_event_is_not_stored(self, make_service: MakeService,
                                                 app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="p")
        await svc.append_event(s, agent_says("stream", partial=True))
        await svc.append_event(s, agent_says("final"))
        got = await svc.get_session(app_name=app, user_id="u", session_id="p")
        assert got is not None and texts(got) == ["final"]

    async def test_an_unmapped_event_is_kept_too(self, make_service: MakeService,
                                                 app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="odd")
        state_only = Event(author="agent", invocation_id="inv",
                           actions=EventActions(state_delta={"step": 2}))
        thought = Event(author="agent", invocation_id="inv", content=types.Content(
            role="model", parts=[types.Part(text="hmm", thought=True)]))
        await svc.append_event(s, state_only)
        await svc.append_event(s, thought)
        got = await svc.get_session(app_name=app, user_id="u", session_id="odd")
        assert got is not None and [e.id for e in got.events] == [state_only.id, thought.id]
        assert got.state == {"step": 2}
        assert got.events[1].content is not None
        assert got.events[1].content.parts[0].thought is True

    # -- state scopes ---------------------------------------------------------------
    async def test_state_scopes_app_user_session_and_temp(self, make_service: MakeService,
                                                          app: str) -> None:
        svc = make_service()
        s1 = await svc.create_session(app_name=app, user_id="u1", state={
            "app:theme": "dark", "user:lang": "fr", "own": 1, "temp:scratch": "x"})
        assert "temp:scratch" not in s1.state
        await svc.append_event(s1, agent_says("ok", actions=EventActions(state_delta={
            "app:version": 2, "user:lang": "de", "own": 2, "temp:t": "seen"})))
        assert s1.state["temp:t"] == "seen"  # visible to this invocation's copy
        s2 = await svc.create_session(app_name=app, user_id="u1")
        s3 = await svc.create_session(app_name=app, user_id="u2")
        assert s2.state == {"app:theme": "dark", "app:version": 2, "user:lang": "de"}
        assert s3.state == {"app:theme": "dark", "app:version": 2}
        other = make_service()
        got = await other.get_session(app_name=app, user_id="u1", session_id=s1.id)
        assert got is not None
        assert got.state == {"app:theme": "dark", "app:version": 2, "user:lang": "de", "own": 2}
        stored = got.events[0].actions.state_delta
        assert stored == {"app:version": 2, "user:lang": "de", "own": 2}  # temp: not stored

    async def test_get_user_state_has_raw_keys_and_is_empty_when_unknown(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        assert await svc.get_user_state(app_name=app, user_id="nobody") == {}
        await svc.create_session(app_name=app, user_id="u", state={"user:a": 1, "b": 2})
        assert await make_service().get_user_state(app_name=app, user_id="u") == {"a": 1}

    # -- GetSessionConfig -----------------------------------------------------------
    async def test_num_recent_events_and_after_timestamp(self, make_service: MakeService,
                                                         app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="cfg")
        for i in range(5):
            await svc.append_event(s, user_says(f"m{i}", ts=1000.0 + i))

        async def get(**kw: Any) -> list[str]:
            got = await svc.get_session(app_name=app, user_id="u", session_id="cfg",
                                        config=GetSessionConfig(**kw))
            assert got is not None
            return texts(got)

        assert await get(num_recent_events=2) == ["m3", "m4"]
        assert await get(num_recent_events=0) == []
        assert await get(after_timestamp=1002.0) == ["m2", "m3", "m4"]
        assert await get(num_recent_events=2, after_timestamp=1004.0) == ["m4"]
        with pytest.raises(ValueError, match="num_recent_events"):
            GetSessionConfig(num_recent_events=-1)

    # -- list / delete --------------------------------------------------------------
    async def test_list_sessions_per_user_and_for_all_oldest_first_without_events(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        a = await svc.create_session(app_name=app, user_id="u1", session_id="a",
                                     state={"x": 1})
        await svc.create_session(app_name=app, user_id="u1", session_id="b")
        await svc.create_session(app_name=app, user_id="u2", session_id="c")
        await svc.append_event(a, user_says("latest"))
        mine = (await make_service().list_sessions(app_name=app, user_id="u1")).sessions
        assert [s.id for s in mine] == ["b", "a"]  # a was updated last
        assert all(s.events == [] for s in mine) and mine[1].state == {"x": 1}
        everyone = (await svc.list_sessions(app_name=app)).sessions
        assert sorted((s.user_id, s.id) for s in everyone) == [
            ("u1", "a"), ("u1", "b"), ("u2", "c")]
        assert (await svc.list_sessions(app_name=app, user_id="nobody")).sessions == []

    async def test_delete_hides_the_session_and_a_new_one_may_take_its_id(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="d")
        await svc.append_event(s, user_says("old"))
        await svc.delete_session(app_name=app, user_id="u", session_id="d")
        await svc.delete_session(app_name=app, user_id="u", session_id="never")  # no-op
        assert await svc.get_session(app_name=app, user_id="u", session_id="d") is None
        assert (await svc.list_sessions(app_name=app, user_id="u")).sessions == []
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(s, user_says("after delete"))
        again = await svc.create_session(app_name=app, user_id="u", session_id="d")
        await svc.append_event(again, user_says("new"))
        got = await make_service().get_session(app_name=app, user_id="u", session_id="d")
        assert got is not None and texts(got) == ["new"]
        # the ended incarnation's log keeps its event: whole on a store without keys
        # (memory, files), its content shredded on the fleet; the new one is another log
        old = [e.data["content"] for e in svc.store.open(stream_id(app, "u", "d")).events()
               if e.type == "user/message"]
        assert old == [DELETED_TEXT if self.shreds else "old"]

    # -- stale writers --------------------------------------------------------------
    async def test_a_stale_copy_raises_stale_session_error_and_stores_nothing(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        await svc.create_session(app_name=app, user_id="u", session_id="st")
        first = await svc.get_session(app_name=app, user_id="u", session_id="st")
        second = await svc.get_session(app_name=app, user_id="u", session_id="st")
        assert first is not None and second is not None
        await svc.append_event(first, user_says("from first"))
        with pytest.raises(StaleSessionError):
            await svc.append_event(second, user_says("from second"))
        assert texts(second) == []
        fresh = await svc.get_session(app_name=app, user_id="u", session_id="st")
        assert fresh is not None and texts(fresh) == ["from first"]
        await svc.append_event(fresh, user_says("after reload"))
        got = await svc.get_session(app_name=app, user_id="u", session_id="st")
        assert got is not None and texts(got) == ["from first", "after reload"]

    async def test_append_to_a_session_never_created_is_session_not_found(
            self, make_service: MakeService, app: str) -> None:
        svc = make_service()
        s = await svc.create_session(app_name=app, user_id="u", session_id="real")
        ghost = s.model_copy(update={"id": "ghost"})
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(ghost, user_says("hello?"))
