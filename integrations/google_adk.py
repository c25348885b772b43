"""Google ADK's ``BaseSessionService`` on sessionstream (``pip install sessionstream[google-adk]``).

The one-line switch::

    service = DatabaseSessionService("sqlite+aiosqlite:///s.db")           # before
    service = SessionstreamSessionService(FleetStore.from_settings())      # after

An ADK session ``(app_name, user_id, id)`` is one sessionstream session (its id:
:func:`stream_id`). Every ADK event that is not ``partial`` is stored, whole, in the
``adk`` field of the session events it maps to (content: sealed at rest, shredded with
the session); that field is what :meth:`get_session` gives back:

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
``create_session``                ``google-adk/session`` {state, scoped, created, …}
``delete_session``                ``google-adk/deleted`` {generation, complete}, and the
                                  session's content crypto-shredded (the fleet)
================================  =====================================================

Reads come from two inline views (docs/adr/0025), kept by every write in the same call
that settles it, so a process that never wrote a session reads it in one round trip:

- :data:`SESSION_VIEW` of each ADK session: its ADK events (as stored: validated once,
  when ADK built them) and a head — exists, created, last update, the session state one
  field per key, and the app/user state this session wrote;
- :data:`SCOPE_VIEW` of the user's and the app's *scope* sessions (``adk-user.<app>.<user>``,
  ``adk-app.<app>``): their state (one last-writer-wins register per key: value, event
  time, event id) and an index — the user's session ids, the app's user ids — that
  :meth:`list_sessions` reads.

The event is the one durable write: its ``state_delta`` (``app:`` and ``user:`` keys
included) is in it. The scope sessions are derived from it right after (a register
takes a value only if it is newer, so a delta applied twice or late changes nothing),
and a session whose app/user writes did not reach its scope sessions (a process died
in between) is repaired by the next ``get_session`` or ``list_sessions`` that reads it,
on any node. An index entry is written *before* the session it names, so the index
is a superset of the sessions, and a reader checks each listed session's own head.

``delete_session`` ends the session's *incarnation*: the session's first stream
(:func:`stream_id`) then points at a new generation (``<id>.<n>``) that a later
``create_session`` of the same id starts, and the ended incarnation's content is
crypto-shredded (the fleet, through ``sessionstream.governance``, as ``sessionstream
delete`` does: keys destroyed, inline views purged).

Stale writers: a :class:`~google.adk.sessions.Session` remembers where it was read
(``_storage_update_marker``: the generation and the last sequence number). Appending
through a copy that is behind, or while another process writes the session, raises
ADK's ``StaleSessionError`` and stores nothing; reload with :meth:`get_session` and retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
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

from sessionstream.core.catalog import F
from sessionstream.core.errors import InvariantViolation, LegalHold, SchemaViolation
from sessionstream.core.events import Draft, Event
from sessionstream.core.jsonvalue import JsonValue, thaw
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.rows import INLINE_VIEW_CHUNK
from sessionstream.core.session import Session
from sessionstream.integrations.store import (
    FleetStore,
    SessionHandle,
    SessionStore,
    WriterConflict,
    plugin_type,
)
from sessionstream.integrations.views import InlineView, ViewSnapshot, ViewState

__all__ = ["EVENT_TYPES", "SCOPE_VIEW", "SESSION_VIEW", "ScopeView", "SessionView",
           "SessionstreamSessionService", "stream_id"]

log = logging.getLogger(__name__)

CREATED = "google-adk/session"
DELETED = "google-adk/deleted"
EVENT = "google-adk/event"
STATE = "google-adk/state"
INDEX = "google-adk/index"

#: The plugin types of this adapter (the service registers them with its store). A
#: deletion's fields are declared, so they stay clear (metadata): the marker is read
#: after the session's content is shredded.
EVENT_TYPES = (
    plugin_type(CREATED, description="ADK create_session: the session (re)starts here."),
    plugin_type(DELETED, {"generation": F("int", required=False),
                          "complete": F("bool", required=False)},
                description="ADK delete_session: the session reads as absent; a later "
                            "create starts generation `generation`."),
    plugin_type(EVENT, description="An ADK event with no core type (data.adk)."),
    plugin_type(STATE, description="An app:/user: state delta (data.delta, raw keys; "
                                   "data.ts and data.src order it)."),
    plugin_type(INDEX, description="An ADK session created/deleted, or a user seen."),
)

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_T = TypeVar("_T")

#: Entries a get_session(after_timestamp=…) reads first, before it reads them all.
_PROBE = 4 * INLINE_VIEW_CHUNK


def stream_id(app_name: str, user_id: str, session_id: str, generation: int = 0) -> str:
    """The sessionstream session id of an ADK session: readable when every part is
    plain (letters, digits, ``_``, ``-``), else a digest (one id per triple either way).
    ``generation``: the incarnation after that many deletions (``<id>.<n>``)."""
    parts = (app_name, user_id, session_id)
    if all(_PLAIN.fullmatch(p) for p in parts):
        base = "adk." + ".".join(parts)
    else:
        base = "adk-h." + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]
    return f"{base}.{generation}" if generation else base


def _scope_id(kind: str, *parts: str) -> str:
    """The scope session of an app (``adk-app.<app>``) or a user (``adk-user.<app>.<user>``):
    a prefix no :func:`stream_id` has."""
    if all(_PLAIN.fullmatch(p) for p in parts):
        return f"adk-{kind}." + ".".join(parts)
    return f"adk-{kind}-h." + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


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


def _ts(entry: JsonValue) -> float:
    """The timestamp of a stored ADK event."""
    return _num(entry.get("timestamp"), 0.0) if isinstance(entry, Mapping) else 0.0


def _num(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else default


# ------------------------------------------------------------------------ the views

#: A last-writer-wins register: [value, event time (s), source event id].
Register = list[JsonValue]


def _newer(a: Sequence[JsonValue], b: Sequence[JsonValue]) -> bool:
    """Register ``a`` wins over ``b``: a later event time, ties broken by the id."""
    return (_num(a[1], 0.0), str(a[2])) > (_num(b[1], 0.0), str(b[2]))


@dataclass(frozen=True)
class _Head:
    """An ADK session's head (the view field ``h``)."""

    on: bool = False
    created: float = 0.0
    updated: float = 0.0
    #: The generation the id's current incarnation is (kept by the first stream).
    generation: int = 0
    #: False while a deletion has ended the session but not yet shredded it.
    complete: bool = True

    @classmethod
    def of(cls, fields: Mapping[str, JsonValue]) -> _Head:
        h = fields.get("h")
        if not isinstance(h, Mapping):
            return cls()
        gen = h.get("generation")
        return cls(bool(h.get("on")), _num(h.get("created"), 0.0),
                   _num(h.get("updated"), 0.0), gen if isinstance(gen, int) else 0,
                   h.get("complete") is not False)

    def to_json(self) -> dict[str, JsonValue]:
        return {"on": self.on, "created": self.created, "updated": self.updated,
                "generation": self.generation, "complete": self.complete}


_SESSION, _APP, _USER = "s:", "a:", "u:"


def _clear_state(state: ViewState) -> None:
    for name in [k for k in state.fields if k.startswith((_SESSION, _APP, _USER))]:
        state.delete(name)


def _fold_delta(state: ViewState, delta: Mapping[str, JsonValue], ts: float,
                src: str) -> None:
    """A ``state_delta``: session keys as they are, ``app:``/``user:`` keys as the
    registers this session wrote (``temp:`` keys are never stored)."""
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            state.set(_APP + key[len(State.APP_PREFIX):], [value, ts, src])
        elif key.startswith(State.USER_PREFIX):
            state.set(_USER + key[len(State.USER_PREFIX):], [value, ts, src])
        elif not key.startswith(State.TEMP_PREFIX):
            state.set(_SESSION + key, value)


class SessionView(InlineView):
    """An ADK session as :meth:`~SessionstreamSessionService.get_session` reads it: the
    ADK events since the last create (entries: each as stored, a JSON object), the head
    (field ``h``: :class:`_Head`), the session state (``s:<key>``) and the app/user
    registers this session wrote (``a:<key>``, ``u:<key>``)."""

    name = "google-adk/session"

    def fold(self, state: ViewState, event: Event) -> None:
        t, d = event.type, event.data
        if t == CREATED:
            state.truncate(0)
            _clear_state(state)
            created = _num(d.get("created"), event.time / 1000)
            state.set("h", _Head(True, created, created).to_json())
            init = d.get("state")
            if isinstance(init, Mapping):
                for k, v in init.items():
                    state.set(_SESSION + k, v)
            scoped = d.get("scoped")
            src = d.get("src") if isinstance(d.get("src"), str) else event.event_id
            if isinstance(scoped, Mapping):
                for scope, prefix in (("app", _APP), ("user", _USER)):
                    part = scoped.get(scope)
                    if isinstance(part, Mapping):
                        for k, v in part.items():
                            state.set(prefix + k, [v, created, src])
        elif t == DELETED:
            state.truncate(0)
            _clear_state(state)
            head = _Head.of(state.fields)
            gen = d.get("generation")
            state.set("h", _Head(False, head.created, head.updated,
                                 gen if isinstance(gen, int) else head.generation,
                                 d.get("complete") is not False).to_json())
        elif "adk" in d:
            head = _Head.of(state.fields)
            if not head.on:
                return
            raw = d["adk"]
            entry: Mapping[str, Any] = raw if isinstance(raw, Mapping) else _dump(
                _placeholder(event))
            state.push(entry)
            ts = _num(entry.get("timestamp"), event.time / 1000)
            state.set("h", _Head(True, head.created, ts, head.generation).to_json())
            actions = entry.get("actions")
            if isinstance(actions, Mapping):
                delta = actions.get("stateDelta", actions.get("state_delta"))
                if isinstance(delta, Mapping) and delta:
                    src = entry.get("id")
                    _fold_delta(state, delta, ts, src if isinstance(src, str)
                                else event.event_id)


class ScopeView(InlineView):
    """An app's or a user's scope session: its state as registers (``k:<key>``: value,
    event time, event id — the newest wins, so applying a delta twice or late changes
    nothing) and its index (entries: the user's session ids, or the app's user ids)."""

    name = "google-adk/scope"

    def fold(self, state: ViewState, event: Event) -> None:
        t, d = event.type, event.data
        if t == STATE:
            delta = d.get("delta")
            if not isinstance(delta, Mapping):
                return
            ts = _num(d.get("ts"), event.time / 1000)
            src = d.get("src") if isinstance(d.get("src"), str) else event.event_id
            for key, value in delta.items():
                now: Register = [value, ts, src]
                cur = state.fields.get("k:" + key)
                if not isinstance(cur, Sequence) or len(cur) != 3 or _newer(now, cur):
                    state.set("k:" + key, now)
        elif t == INDEX:
            if state.aux is None:
                state.aux = set(state.entries)
            member = d.get("session_id", d.get("user_id"))
            if not isinstance(member, str):
                return
            if d.get("action") == "deleted":
                if member in state.aux:
                    at = state.entries.index(member)
                    state.splice(at, state.entries[at + 1:])
                    state.aux.discard(member)
            elif member not in state.aux:
                state.push(member)
                state.aux.add(member)


#: The inline views the service reads (registered with its store).
SESSION_VIEW = SessionView()
SCOPE_VIEW = ScopeView()


def _registers(snap: ViewSnapshot) -> dict[str, Register]:
    """A scope view's state registers, by raw key."""
    return {k[2:]: list(v) for k, v in snap.fields.items()
            if k.startswith("k:") and isinstance(v, Sequence) and len(v) == 3}


# ---------------------------------------------------------------------- the mapping


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


def _drafts(cs: Session, event: AdkEvent, adk: dict[str, Any]) -> list[Draft]:
    """The drafts of one ADK event (``adk``: its stored form) against the session ``cs``
    as it is: the mapped ones if the core rules take them (tried under a savepoint, so
    the session is left as it was), else one plugin event."""
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


def _head(handle: SessionHandle) -> _Head:
    """The head of the session ``handle`` holds (call inside a write: it is current)."""
    return _Head.of(handle.view(SESSION_VIEW.name, 0).fields)


def _marker(generation: int, seq: int) -> str:
    return f"{generation}/{seq}"


def _parse_marker(marker: str | None) -> tuple[int, int] | None:
    if marker is None:
        return None
    gen, _, seq = marker.partition("/")
    try:
        return int(gen), int(seq)
    except ValueError:
        return None


class _NewScope(Exception):
    """A scope session's first write: register it with its parent first."""


class _Moved(Exception):
    """The id's current incarnation is another generation (``complete``: False while
    the deletion that ended the one before has not shredded it yet)."""

    def __init__(self, generation: int, complete: bool) -> None:
        self.generation = generation
        self.complete = complete


@dataclass(frozen=True)
class _Found:
    """An ADK session as read: its generation and its view snapshot."""

    generation: int
    snap: ViewSnapshot

    @cached_property
    def head(self) -> _Head:
        return _Head.of(self.snap.fields)


class SessionstreamSessionService(BaseSessionService):
    """ADK sessions on a sessionstream :class:`~integrations.store.SessionStore` (its
    plugin types and views are registered here). A write waits while another process
    writes the same session — up to ``conflict_wait_s`` for an ADK session (then
    ``StaleSessionError``), ``shared_retry_s`` for a scope session (the user's index and
    state, the app's) — and then decides on the session as that write left it. Calls run
    in a worker thread (the store blocks on Kafka and Redis).
    """

    def __init__(self, store: SessionStore, *, shared_retry_s: float = 30.0,
                 conflict_wait_s: float = 5.0) -> None:
        store.register(EVENT_TYPES, [SESSION_VIEW, SCOPE_VIEW])
        self.store = store
        self.shared_retry_s = shared_retry_s
        self.conflict_wait_s = conflict_wait_s

    # -- plumbing -------------------------------------------------------------------
    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    def _app_sid(self, app: str) -> str:
        return _scope_id("app", app)

    def _user_sid(self, app: str, user: str) -> str:
        return _scope_id("user", app, user)

    @staticmethod
    def _write(handle: SessionHandle, plan: Callable[[Session | None], list[Draft]],
               wait_s: float) -> list[Event]:
        """One write, tried again while another process is writing the session (for up to
        ``wait_s``): the plan then decides on the session as that write left it — as a
        database waits for a lock, then finds the row changed or not."""
        deadline = time.monotonic() + wait_s
        delay = 0.005
        while True:
            try:
                return handle.write(plan)
            except WriterConflict:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def _shared(self, sid: str, plan: Callable[[Session | None], list[Draft]]) -> None:
        """One write to a scope session, which many processes write."""
        self._write(self.store.open(sid), plan, self.shared_retry_s)

    def _index(self, app: str, user: str, sid: str, action: str) -> None:
        """The user's index of sessions (a user's first session registers the user in
        the app's index first: an index names at least every session that exists)."""
        entry = {"session_id": sid, "action": action}
        registered: list[bool] = []

        def plan(cs: Session | None) -> list[Draft]:
            if cs is None and action == "created" and not registered:
                raise _NewScope
            return [Draft(INDEX, entry)] if cs is not None or action == "created" else []

        try:
            self._shared(self._user_sid(app, user), plan)
        except _NewScope:
            self._shared(self._app_sid(app), lambda _cs: [Draft(INDEX, {
                "user_id": user, "action": "seen"})])
            registered.append(True)
            self._shared(self._user_sid(app, user), plan)

    def _apply_scoped(self, app: str, user: str, records: Mapping[str, Mapping[str, Register]],
                      origin: str) -> None:
        """Write ``records`` (scope → key → register) to the app's and the user's scope
        sessions: one STATE event per source event, in one write per scope."""
        for scope, sid in (("app", self._app_sid(app)), ("user", self._user_sid(app, user))):
            regs = records.get(scope)
            if not regs:
                continue
            by_src: dict[tuple[float, str], dict[str, JsonValue]] = {}
            for key, (value, ts, src) in regs.items():
                by_src.setdefault((_num(ts, 0.0), str(src)), {})[key] = value
            drafts = [Draft(STATE, {"delta": delta, "ts": ts, "src": src, "session": origin})
                      for (ts, src), delta in sorted(by_src.items())]
            try:
                self._shared(sid, _fixed(drafts))
            except WriterConflict:
                # The event holds the delta: the next read of the session applies it.
                log.warning("session %s: %s state not applied yet (its scope session "
                            "stayed busy); the next get_session of the session applies it",
                            origin, scope)

    def _read(self, app: str, user: str, sid: str, last: int | None
              ) -> tuple[_Found, ViewSnapshot, ViewSnapshot]:
        """The session's current incarnation, the user's and the app's scope views: one
        round trip (two for a session re-created after a deletion)."""
        snap, user_scope, app_scope = self.store.read_views([
            (stream_id(app, user, sid), SESSION_VIEW.name, last),
            (self._user_sid(app, user), SCOPE_VIEW.name, 0),
            (self._app_sid(app), SCOPE_VIEW.name, 0)])
        found = _Found(0, snap)
        head = found.head
        if not head.on and head.generation:
            gen = head.generation
            found = _Found(gen, self.store.open(stream_id(app, user, sid, gen)).view(
                SESSION_VIEW.name, last))
        return found, user_scope, app_scope

    def _state(self, app: str, user: str, sid: str, fields: Mapping[str, JsonValue],
               user_regs: Mapping[str, Register], app_regs: Mapping[str, Register]
               ) -> dict[str, Any]:
        """The merged state ADK sees; app/user writes of this session that are newer
        than the scope registers (a process died before applying them) are applied now."""
        state: dict[str, Any] = {}
        behind: dict[str, dict[str, Register]] = {}
        for name, value in fields.items():
            if name.startswith(_SESSION):
                state[name[len(_SESSION):]] = thaw(value)
            elif name.startswith((_APP, _USER)) and isinstance(value, Sequence) \
                    and len(value) == 3:
                scope, regs = ("app", app_regs) if name.startswith(_APP) else (
                    "user", user_regs)
                have = regs.get(name[2:])
                if have is None or _newer(value, have):
                    behind.setdefault(scope, {})[name[2:]] = list(value)
        if behind:
            self._apply_scoped(app, user, behind, stream_id(app, user, sid))
            app_regs = {**app_regs, **behind.get("app", {})}
            user_regs = {**user_regs, **behind.get("user", {})}
        state.update({State.APP_PREFIX + k: thaw(r[0]) for k, r in app_regs.items()})
        state.update({State.USER_PREFIX + k: thaw(r[0]) for k, r in user_regs.items()})
        return state

    def _session(self, app: str, user: str, sid: str, found: _Found,
                 user_regs: Mapping[str, Register], app_regs: Mapping[str, Register],
                 events: list[AdkEvent]) -> AdkSession:
        head = found.head
        state = self._state(app, user, sid, found.snap.fields, user_regs, app_regs)
        s = AdkSession(app_name=app, user_id=user, id=sid, state=state, events=events,
                       last_update_time=head.updated)
        s._storage_update_marker = _marker(found.generation, found.snap.seq)
        return s

    # -- the service ----------------------------------------------------------------
    async def create_session(self, *, app_name: str, user_id: str,
                             state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> AdkSession:
        return await self._run(self._create, app_name, user_id, state, session_id)

    def _create(self, app: str, user: str, state: dict[str, Any] | None,
                session_id: str | None) -> AdkSession:
        sid = (session_id.strip() if session_id else None) or _new_id()
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        created = time.time()
        src = _new_id()
        record = {"app_name": app, "user_id": user, "session_id": sid,
                  "state": deltas["session"], "created": created, "src": src,
                  "scoped": {"app": deltas["app"], "user": deltas["user"]}}
        self._index(app, user, sid, "created")  # first: the index names every session
        gen, unfinished = 0, False
        while True:
            handle = self.store.open(stream_id(app, user, sid, gen))

            def plan(cs: Session | None, handle: SessionHandle = handle,
                     gen: int = gen) -> list[Draft]:
                if cs is not None:
                    head = _head(handle)
                    if head.on:
                        raise AlreadyExistsError(f"Session with id {sid} already exists.")
                    if head.generation > gen:
                        raise _Moved(head.generation, head.complete)
                return [Draft(CREATED, record)]

            try:
                stored = self._write(handle, plan, self.conflict_wait_s)
                break
            except _Moved as moved:
                gen = moved.generation
                unfinished = not moved.complete
            except WriterConflict as exc:
                raise AlreadyExistsError(f"Session with id {sid} is being written by "
                                         f"another writer: {exc.detail}") from exc
        if unfinished:  # a deletion of the id stopped before its shred: finish it
            self._end(app, user, sid, gen - 1, unindex=False)
        scoped = {scope: {k: [v, created, src] for k, v in deltas[scope].items()}
                  for scope in ("app", "user") if deltas[scope]}
        if scoped:
            self._apply_scoped(app, user, scoped, handle.session_id)
        user_scope, app_scope = self.store.read_views([
            (self._user_sid(app, user), SCOPE_VIEW.name, 0),
            (self._app_sid(app), SCOPE_VIEW.name, 0)])
        merged = dict(deltas["session"])
        merged.update({State.APP_PREFIX + k: thaw(r[0])
                       for k, r in _registers(app_scope).items()})
        merged.update({State.USER_PREFIX + k: thaw(r[0])
                       for k, r in _registers(user_scope).items()})
        s = AdkSession(app_name=app, user_id=user, id=sid, state=merged, events=[],
                       last_update_time=created)
        s._storage_update_marker = _marker(gen, stored[-1].seq)
        return s

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> AdkSession | None:
        return await self._run(self._get, app_name, user_id, session_id, config)

    def _get(self, app: str, user: str, session_id: str,
             config: GetSessionConfig | None) -> AdkSession | None:
        sid = session_id.strip() if session_id else session_id
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        last = recent if recent is not None else (_PROBE if after is not None else None)
        found, user_scope, app_scope = self._read(app, user, sid, last)
        if not found.head.on:
            return None
        entries = list(found.snap.entries)
        if recent is None and after is not None and found.snap.count > len(entries) \
                and entries and _ts(entries[0]) >= after:
            # more than the probe is that recent: read them all
            found = _Found(found.generation, self.store.open(
                stream_id(app, user, sid, found.generation)).view(SESSION_VIEW.name))
            entries = list(found.snap.entries)
        if after is not None:
            entries = [x for x in entries if _ts(x) >= after]
        events = [AdkEvent.model_validate(x) for x in entries]
        return self._session(app, user, sid, found, _registers(user_scope),
                             _registers(app_scope), events)

    async def list_sessions(self, *, app_name: str,
                            user_id: str | None = None) -> ListSessionsResponse:
        return await self._run(self._list, app_name, user_id)

    def _list(self, app: str, user: str | None) -> ListSessionsResponse:
        if user is None:
            (app_scope,) = self.store.read_views([(self._app_sid(app), SCOPE_VIEW.name,
                                                   None)])
            users = [u for u in app_scope.entries if isinstance(u, str)]
            scopes = self.store.read_views([(self._user_sid(app, u), SCOPE_VIEW.name, None)
                                            for u in users])
        else:
            users = [user]
            scopes = self.store.read_views([(self._user_sid(app, user), SCOPE_VIEW.name,
                                             None), (self._app_sid(app), SCOPE_VIEW.name, 0)])
            app_scope = scopes.pop()
        pairs = [(u, sid) for u, scope in zip(users, scopes, strict=True)
                 for sid in scope.entries if isinstance(sid, str)]
        heads = self.store.read_views([(stream_id(app, u, sid), SESSION_VIEW.name, 0)
                                       for u, sid in pairs])
        found = [_Found(0, snap) for snap in heads]
        moved = [(i, f.head.generation) for i, f in enumerate(found)
                 if not f.head.on and f.head.generation]
        if moved:  # sessions re-created after a deletion: their current incarnation
            again = self.store.read_views([(stream_id(app, *pairs[i], gen),
                                            SESSION_VIEW.name, 0) for i, gen in moved])
            for (i, gen), snap in zip(moved, again, strict=True):
                found[i] = _Found(gen, snap)
        app_regs = _registers(app_scope)
        user_regs = {u: _registers(scope) for u, scope in zip(users, scopes, strict=True)}
        out: list[AdkSession] = []
        for (u, sid), f in zip(pairs, found, strict=True):
            if f.head.on:
                out.append(self._session(app, u, sid, f, user_regs[u], app_regs, []))
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=out)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._run(self._delete, app_name, user_id, session_id)

    def _delete(self, app: str, user: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        first = self.store.open(stream_id(app, user, sid))
        head = _Head.of(first.view(SESSION_VIEW.name, 0).fields)
        gen = 0
        if not head.on and head.generation:
            gen = head.generation
            live = _Head.of(self.store.open(stream_id(app, user, sid, gen)).view(
                SESSION_VIEW.name, 0).fields).on
            if not head.complete:  # a deletion that stopped before its shred: finish it
                self._end(app, user, sid, gen - 1, unindex=not live)
            if not live:
                return
        elif not head.on:
            return  # never created (or deleted and never created again)
        self._check_hold(stream_id(app, user, sid, gen))
        try:
            if gen:  # the incarnation itself reads as deleted (a stale copy's append)
                self._write(self.store.open(stream_id(app, user, sid, gen)),
                            lambda cs: [Draft(DELETED, {})] if cs is not None else [],
                            self.conflict_wait_s)
            ended = self._write(first, lambda cs: [Draft(DELETED, {
                "generation": gen + 1, "complete": False})]
                if cs is not None and (gen or _head(first).on) else [], self.conflict_wait_s)
        except WriterConflict as exc:
            raise StaleSessionError(str(exc)) from exc
        if ended:  # (else another process deleted it meanwhile)
            self._end(app, user, sid, gen)

    def _end(self, app: str, user: str, sid: str, gen: int, *, unindex: bool = True) -> None:
        """Shred the ended incarnation ``gen`` (the fleet), then record the deletion
        complete on the first stream (which also writes its views again: the shred
        purged them if ``gen`` is 0) and drop the id from the user's index."""
        first = self.store.open(stream_id(app, user, sid))
        self._shred(stream_id(app, user, sid, gen))
        try:
            self._write(first, lambda cs: [Draft(DELETED, {"generation": gen + 1,
                                                           "complete": True})]
                        if cs is not None else [], self.conflict_wait_s)
        except WriterConflict as exc:
            raise StaleSessionError(str(exc)) from exc
        if unindex:
            self._index(app, user, sid, "deleted")

    def _governance(self) -> Any:
        """The tenant's governance (crypto-shred, purge, audit) when the store has keys."""
        store = self.store
        cipher = store.cfg.cipher if isinstance(store, FleetStore) else None
        if cipher is None:
            return None
        from sessionstream import redisconn
        from sessionstream.governance.service import Governance
        from sessionstream.producers.audit import WriterAuditLog

        assert isinstance(store, FleetStore)
        cfg = store.cfg
        client = redisconn.sync_redis(cfg.redis_url, cluster=cfg.redis_cluster,
                                      decode_responses=True)
        return Governance(cfg, cipher.store, client, audit=WriterAuditLog(cfg),
                          principal="google-adk")

    def _check_hold(self, sid: str) -> None:
        """A legal hold refuses the deletion before anything is written."""
        gov = self._governance()
        if gov is None:
            return
        try:
            hold = gov.store.hold_on(gov.tenant, sid)
        finally:
            gov.redis.close()
        if hold is not None:
            raise LegalHold(hold.scope, hold.reason)

    def _shred(self, sid: str) -> None:
        """Crypto-shred the session ``sid`` and purge its Redis rows and inline views, as
        ``sessionstream delete`` does (a store without keys keeps the content: memory,
        JSONL, a fleet without a cipher)."""
        gov = self._governance()
        if gov is None:
            return
        try:
            gov.delete(sid, reason="google-adk delete_session", scope="delete")
        finally:
            gov.redis.close()

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._run(self._user_state, app_name, user_id)

    def _user_state(self, app: str, user: str) -> dict[str, Any]:
        snap = self.store.open(self._user_sid(app, user)).view(SCOPE_VIEW.name, 0)
        return {k: thaw(r[0]) for k, r in _registers(snap).items()}

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._run(self._append, session, event)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    def _append(self, session: AdkSession, event: AdkEvent) -> None:
        app, user, sid = session.app_name, session.user_id, session.id
        seen = _parse_marker(session._storage_update_marker)
        gen = seen[0] if seen is not None else self._generation(app, user, sid)
        handle = self.store.open(stream_id(app, user, sid, gen))
        adk = _dump(event)  # the one stored form: the view and the scoped state read it

        def plan(cs: Session | None) -> list[Draft]:
            if cs is None or not _head(handle).on:
                raise SessionNotFoundError(f"Session {sid} not found.")
            if seen is not None and seen[1] != cs.next_seq - 1:
                raise StaleSessionError(
                    "The session has been modified in storage since it was loaded. "
                    "Please reload the session before appending more events.")
            return _drafts(cs, event, adk)

        try:
            stored = self._write(handle, plan, self.conflict_wait_s)
        except WriterConflict as exc:
            raise StaleSessionError(
                f"another writer holds or took session {sid}: {exc.detail}. "
                "Reload the session before appending more events.") from exc
        session._storage_update_marker = _marker(gen, stored[-1].seq)
        delta = adk.get("actions", {}).get("stateDelta")
        if delta:
            scoped = _session_util.extract_state_delta(delta)
            records = {scope: {k: [v, event.timestamp, event.id]
                               for k, v in scoped[scope].items()}
                       for scope in ("app", "user") if scoped[scope]}
            if records:
                self._apply_scoped(app, user, records, handle.session_id)

    def _generation(self, app: str, user: str, sid: str) -> int:
        """The current incarnation of an id (for a Session this service did not load)."""
        head = _Head.of(self.store.open(stream_id(app, user, sid)).view(
            SESSION_VIEW.name, 0).fields)
        return head.generation if not head.on else 0

    async def close(self) -> None:
        """Flush what a write left held, give it up, and close the store's clients."""
        await self._run(self.store.close)


def _fixed(drafts: list[Draft]) -> Callable[[Session | None], list[Draft]]:
    return lambda _cs: drafts


def _new_id() -> str:
    return str(uuid.uuid4())
