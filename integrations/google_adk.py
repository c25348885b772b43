"""Google ADK's ``BaseSessionService`` on sessionstream (``pip install sessionstream[google-adk]``).

The one-line switch::

    service = DatabaseSessionService("sqlite+aiosqlite:///s.db")            # before
    service = SessionstreamSessionService(FleetStore.from_settings())       # after

An ADK session ``(app_name, user_id, id)`` is one sessionstream session (its id:
:func:`stream_id`). Every ADK event that is not ``partial`` is stored, whole, in the
``adk`` field of the session events it maps to (content: sealed at rest, shredded by
``sessionstream delete``); that field is what :meth:`get_session` gives back:

================================  =====================================================
ADK event                         session events (``data.adk`` = the ADK event)
================================  =====================================================
author ``user``, text parts       ``user/message`` {content} (an open turn ends first)
an agent's text / function calls  ``assistant/message`` {content, tool_calls} and a
                                  ``tool/call`` per call, in a step of a turn
an agent's function responses     ``tool/result`` {call_id, status ok, content}, in a step
anything else (state only,        ``google-adk/event`` (a plugin type: ignorable, never on
thoughts, code, files, a mapping  the model surface)
the core rules refuse)
``create_session``                ``google-adk/session`` {app_name, user_id, state}
``delete_session``                ``google-adk/deleted`` (appended: history is kept)
================================  =====================================================

State: session-scoped keys fold from the events' ``state_delta``; ``temp:`` keys are
never stored (the base class trims them before the write). ``app:`` and ``user:`` keys
live in sessions of their own — ``adk.app.<app>`` and ``adk.user.<app>.<user>`` — as
``google-adk/state`` deltas; the user's session also indexes that user's ADK sessions
(``google-adk/index``) for :meth:`list_sessions`. Those shared sessions are written
append-flush-release (retrying while another process holds them), so every process of
the fleet folds the same app and user state.

Stale writers: a :class:`~google.adk.sessions.Session` remembers the last sequence number
it saw (``_storage_update_marker``). Appending through a copy that is behind the
stored session, or from a process whose writer lost the session to another (the fleet's
lease and epoch fencing, on every node), raises ADK's ``StaleSessionError`` and stores
nothing; reload with :meth:`get_session` and retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State
from google.genai import types

from sessionstream.core.errors import InvariantViolation, SchemaViolation
from sessionstream.core.events import Draft, Event
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.session import Session
from sessionstream.integrations.store import (
    SessionHandle,
    SessionStore,
    WriterConflict,
    plugin_type,
)

__all__ = ["EVENT_TYPES", "SessionstreamSessionService", "stream_id"]

CREATED = "google-adk/session"
DELETED = "google-adk/deleted"
EVENT = "google-adk/event"
STATE = "google-adk/state"
INDEX = "google-adk/index"

#: The plugin types of this adapter (pass them to the store: ``FleetStore(cfg, EVENT_TYPES)``).
EVENT_TYPES = (
    plugin_type(CREATED, description="ADK create_session: the session (re)starts here."),
    plugin_type(DELETED, description="ADK delete_session: the session reads as absent."),
    plugin_type(EVENT, description="An ADK event with no core type (data.adk)."),
    plugin_type(STATE, description="An app:/user: state delta (data.delta, raw keys)."),
    plugin_type(INDEX, description="An ADK session created/deleted, or a user seen."),
)

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_T = TypeVar("_T")


def stream_id(app_name: str, user_id: str, session_id: str) -> str:
    """The sessionstream session id of an ADK session: readable when every part is
    plain (letters, digits, ``_``, ``-``), else a digest (one id per triple either way)."""
    parts = (app_name, user_id, session_id)
    if all(_PLAIN.fullmatch(p) for p in parts):
        return "adk." + ".".join(parts)
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]
    return f"adk-h.{digest}"


def _scope_id(kind: str, *parts: str) -> str:
    if all(_PLAIN.fullmatch(p) for p in parts):
        return f"adk.{kind}." + ".".join(parts)
    return f"adk-h.{kind}." + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


def _dump(event: AdkEvent) -> dict[str, Any]:
    out: dict[str, Any] = event.model_dump(mode="json", exclude_none=True, by_alias=True)
    return out


def _placeholder(event: Event) -> AdkEvent:
    """An ADK event for a stored one whose content is shredded: its role kept (a tool
    result is a ``user``-role part in ADK), the text the deletion placeholder, so the
    framework reads it without crashing."""
    user = event.type == "user/message"
    role = "user" if user or event.type == "tool/result" else "model"
    return AdkEvent(
        id=event.event_id, invocation_id=event.turn_id or "",
        author="user" if user else "model", timestamp=event.time / 1000,
        content=types.Content(role=role, parts=[types.Part(text=DELETED_TEXT)]))


class _View:
    """An ADK session folded from its sessionstream events (since the last create)."""

    def __init__(self, events: Sequence[Event]) -> None:
        start = None
        for i in range(len(events) - 1, -1, -1):
            if events[i].type == CREATED:
                start = i
                break
        self.exists = start is not None and not any(
            e.type == DELETED for e in events[start:])
        self.last_seq = events[-1].seq if events else -1
        self.state: dict[str, Any] = {}
        self.events: list[AdkEvent] = []
        self.created = 0.0
        if start is None:
            return
        head = events[start]
        init = head.data.get("state")
        self.state = dict(thaw(init)) if isinstance(init, Mapping) else {}
        created = head.data.get("created")
        self.created = float(created) if isinstance(created, int | float) else head.time / 1000
        for e in events[start + 1:]:
            if "adk" not in e.data:
                continue
            raw = e.data["adk"]
            try:
                ev = AdkEvent.model_validate(thaw(raw)) if isinstance(raw, Mapping) else None
            except ValueError:
                ev = None
            if ev is None:
                self.events.append(_placeholder(e))
                continue
            self.events.append(ev)
            if ev.actions and ev.actions.state_delta:
                self.state.update(_session_util.extract_state_delta(
                    ev.actions.state_delta)["session"])

    @property
    def last_update_time(self) -> float:
        return self.events[-1].timestamp if self.events else self.created


def _text(parts: Sequence[types.Part]) -> str:
    return "".join(p.text or "" for p in parts)


def _mapped(cs: Session, event: AdkEvent, adk: dict[str, Any]) -> list[Draft]:
    """The core drafts of an ADK event where it maps to messages and tools ([] if not)."""
    parts = list(event.content.parts or []) if event.content else []
    if not parts:
        return []
    texts = [p for p in parts if p.text is not None and not p.thought]
    calls = [p.function_call for p in parts if p.function_call]
    results = [p.function_response for p in parts if p.function_response]
    if len(texts) + len(calls) + len(results) != len(parts):
        return []  # thoughts, code, files: kept whole as a plugin event
    out: list[Draft] = []
    if event.author == "user" and texts and not calls and not results:
        if cs.open_turn is not None:
            if cs.open_step is not None:
                out.append(Draft("step/end", {}))
            out.append(Draft("turn/end", {"reason": "interrupted" if cs.pending_calls
                                          else "completed"}))
        out.append(Draft("user/message", {"content": _text(texts), "adk": adk}))
        return out
    if event.author == "user" or cs.open_step is not None:
        return []
    if results and not texts and not calls:
        if cs.open_turn is None or any(not r.id for r in results):
            return []
        out.append(Draft("step/start", {}))
        for i, r in enumerate(results):
            data: dict[str, Any] = {"call_id": r.id, "status": "ok",
                                    "content": r.model_dump(mode="json")["response"]}
            if i == 0:
                data["adk"] = adk
            out.append(Draft("tool/result", data))
        out.append(Draft("step/end", {}))
        return out
    if results or any(not c.id or not c.name for c in calls):
        return []
    if cs.open_turn is None:
        out.append(Draft("turn/start", {}))
    tool_calls = [{"call_id": c.id, "name": c.name, "arguments": dict(c.args or {})}
                  for c in calls]
    msg: dict[str, Any] = {"content": _text(texts), "adk": adk}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    out += [Draft("step/start", {}), Draft("assistant/message", msg)]
    out += [Draft("tool/call", dict(tc)) for tc in tool_calls]
    out.append(Draft("step/end", {}))
    return out


def _drafts(cs: Session | None, event: AdkEvent) -> list[Draft]:
    """The drafts of one ADK event against the session ``cs`` as it is: the mapped ones
    if the core rules take them (tried under a savepoint, so the session is left as it
    was), else one plugin event."""
    adk = _dump(event)
    if cs is not None:
        drafts = _mapped(cs, event, adk)
        if drafts:
            savepoint = cs.savepoint()
            try:
                for d in drafts:
                    cs.append(d)
                return drafts
            except (InvariantViolation, SchemaViolation):
                pass
            finally:
                cs.rollback(savepoint)
    return [Draft(EVENT, {"adk": adk})]


def _exists(cs: Session | None) -> bool:
    """An ADK session exists from its last create until a delete after it."""
    if cs is None:
        return False
    for e in reversed(cs.events):
        if e.type == DELETED:
            return False
        if e.type == CREATED:
            return True
    return False


class SessionstreamSessionService(BaseSessionService):
    """ADK sessions on a sessionstream :class:`~integrations.store.SessionStore`.

    ``store`` must know this adapter's plugin types (``EVENT_TYPES``). ``shared_retry_s``
    bounds how long a write to the shared app/user sessions waits for another process
    holding them. Calls run in a worker thread (the store blocks on Kafka and Redis).
    """

    def __init__(self, store: SessionStore, *, shared_retry_s: float = 30.0) -> None:
        missing = [t.name for t in EVENT_TYPES if store.catalog.get(t.name) is None]
        if missing:
            raise ValueError(f"the store does not know the ADK event types {missing}: build "
                             "it with event_types=google_adk.EVENT_TYPES")
        self.store = store
        self.shared_retry_s = shared_retry_s

    # -- plumbing -------------------------------------------------------------------
    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    def _shared(self, sid: str, drafts: list[Draft]) -> None:
        """One write to a session many processes write (app/user state), retried while
        another process is writing it."""
        handle = self.store.open(sid)
        deadline = time.monotonic() + self.shared_retry_s
        delay = 0.02
        while True:
            try:
                handle.append_many(drafts)
                return
            except WriterConflict:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @staticmethod
    def _fold_state(handle: SessionHandle) -> tuple[dict[str, Any], list[Event]]:
        state: dict[str, Any] = {}
        events = list(handle.events())
        for e in events:
            if e.type == STATE and isinstance(e.data.get("delta"), Mapping):
                state.update(thaw(e.data["delta"]))
        return state, events

    def _app_sid(self, app: str) -> str:
        return _scope_id("app", app)

    def _user_sid(self, app: str, user: str) -> str:
        return _scope_id("user", app, user)

    def _write_scoped(self, app: str, user: str, delta: Mapping[str, Any]) -> None:
        deltas = _session_util.extract_json_safe_state_delta(dict(delta))
        if deltas["app"]:
            self._shared(self._app_sid(app), [Draft(STATE, {"delta": deltas["app"]})])
        if deltas["user"]:
            self._shared(self._user_sid(app, user), [Draft(STATE, {"delta": deltas["user"]})])

    def _merged(self, app: str, user: str, view: _View, sid: str,
                events: list[AdkEvent]) -> AdkSession:
        state = dict(view.state)
        app_state, _ = self._fold_state(self.store.open(self._app_sid(app)))
        user_state, _ = self._fold_state(self.store.open(self._user_sid(app, user)))
        state.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
        state.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
        s = AdkSession(app_name=app, user_id=user, id=sid, state=state, events=events,
                       last_update_time=view.last_update_time)
        s._storage_update_marker = f"seq:{view.last_seq}"
        return s

    # -- the service ----------------------------------------------------------------
    async def create_session(self, *, app_name: str, user_id: str,
                             state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> AdkSession:
        return await self._run(self._create, app_name, user_id, state, session_id)

    def _create(self, app: str, user: str, state: dict[str, Any] | None,
                session_id: str | None) -> AdkSession:
        sid = (session_id.strip() if session_id else None) or _new_id()
        handle = self.store.open(stream_id(app, user, sid))
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        record = {"app_name": app, "user_id": user, "session_id": sid,
                  "state": deltas["session"], "created": time.time()}

        def plan(cs: Session | None) -> list[Draft]:
            if _exists(cs):
                raise AlreadyExistsError(f"Session with id {sid} already exists.")
            return [Draft(CREATED, record)]

        try:
            handle.write(plan)
        except WriterConflict as exc:
            raise AlreadyExistsError(f"Session with id {sid} is being written by "
                                     f"another writer: {exc.detail}") from exc
        user_drafts = [Draft(INDEX, {"session_id": sid, "action": "created"})]
        if deltas["user"]:
            user_drafts.append(Draft(STATE, {"delta": deltas["user"]}))
        self._shared(self._user_sid(app, user), user_drafts)
        app_drafts = [Draft(INDEX, {"user_id": user, "action": "seen"})]
        if deltas["app"]:
            app_drafts.append(Draft(STATE, {"delta": deltas["app"]}))
        self._shared(self._app_sid(app), app_drafts)
        view = _View(handle.events())
        return self._merged(app, user, view, sid, [])

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> AdkSession | None:
        return await self._run(self._get, app_name, user_id, session_id, config)

    def _get(self, app: str, user: str, session_id: str,
             config: GetSessionConfig | None) -> AdkSession | None:
        sid = session_id.strip() if session_id else session_id
        view = _View(self.store.open(stream_id(app, user, sid)).events())
        if not view.exists:
            return None
        events = view.events
        if config is not None:
            if config.num_recent_events is not None:
                events = events[-config.num_recent_events:] if config.num_recent_events else []
            if config.after_timestamp is not None:
                events = [e for e in events if e.timestamp >= config.after_timestamp]
        return self._merged(app, user, view, sid, list(events))

    async def list_sessions(self, *, app_name: str,
                            user_id: str | None = None) -> ListSessionsResponse:
        return await self._run(self._list, app_name, user_id)

    def _list(self, app: str, user: str | None) -> ListSessionsResponse:
        if user is None:
            _, events = self._fold_state(self.store.open(self._app_sid(app)))
            users = list(dict.fromkeys(e.data["user_id"] for e in events
                                       if e.type == INDEX and "user_id" in e.data))
        else:
            users = [user]
        out: list[AdkSession] = []
        for u in users:
            _, events = self._fold_state(self.store.open(self._user_sid(app, u)))
            ids = dict.fromkeys(e.data["session_id"] for e in events
                                if e.type == INDEX and "session_id" in e.data)
            for sid in ids:
                view = _View(self.store.open(stream_id(app, u, sid)).events())
                if view.exists:
                    out.append(self._merged(app, u, view, sid, []))
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=out)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._run(self._delete, app_name, user_id, session_id)

    def _delete(self, app: str, user: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        handle = self.store.open(stream_id(app, user, sid))
        try:
            if not handle.write(lambda cs: [Draft(DELETED, {})] if _exists(cs) else []):
                return
        except WriterConflict as exc:
            raise StaleSessionError(str(exc)) from exc
        self._shared(self._user_sid(app, user),
                     [Draft(INDEX, {"session_id": sid, "action": "deleted"})])

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        state, _ = await self._run(self._fold_state,
                                   self.store.open(self._user_sid(app_name, user_id)))
        return state

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._run(self._append, session, event)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    def _append(self, session: AdkSession, event: AdkEvent) -> None:
        handle = self.store.open(stream_id(session.app_name, session.user_id, session.id))
        marker = session._storage_update_marker

        def plan(cs: Session | None) -> list[Draft]:
            if not _exists(cs):
                raise SessionNotFoundError(f"Session {session.id} not found.")
            assert cs is not None
            if marker is not None and marker != f"seq:{cs.next_seq - 1}":
                raise StaleSessionError(
                    "The session has been modified in storage since it was loaded. "
                    "Please reload the session before appending more events.")
            return _drafts(cs, event)

        try:
            stored = handle.write(plan)
        except WriterConflict as exc:
            raise StaleSessionError(
                f"another writer holds or took session {session.id}: {exc.detail}. "
                "Reload the session before appending more events.") from exc
        session._storage_update_marker = f"seq:{stored[-1].seq}"
        if event.actions and event.actions.state_delta:
            self._write_scoped(session.app_name, session.user_id, event.actions.state_delta)

    async def close(self) -> None:
        """Flush and release every session this service wrote (the fleet: the leases)."""
        await self._run(self.store.close)


def _new_id() -> str:
    return str(uuid.uuid4())
