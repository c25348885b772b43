"""The store the framework adapters stand on: one sessionstream session, by id.

An adapter (the OpenAI Agents SDK ``Session``, the ADK session service, the LangGraph
saver) never talks to Kafka, Redis or files itself. It asks a :class:`SessionStore` for
the :class:`SessionHandle` of a session id and does three things with it:

``handle.write(plan)``
    One write, whole or not at all: the handle takes the session (the fleet: its lease,
    at once, on any node — docs/adr/0024), calls ``plan(session)`` with the core
    :class:`~sessionstream.core.session.Session` as it is now (None: no events yet),
    appends the drafts it returns through the session's write-time rules as one atomic
    batch (a refused draft raises the core's ``InvariantViolation`` /
    ``SchemaViolation`` / ``InvalidData`` and nothing of the batch is stored), makes
    them durable and hands the session on (the fleet: flushed, proven admitted, lease
    released). ``append`` / ``append_many`` are ``write`` of fixed drafts. With
    ``durable=False`` the handle keeps the session until :meth:`SessionHandle.flush`.
``handle.view(name, last=N)``
    An :class:`~sessionstream.integrations.views.InlineView` the adapter registered:
    a fold of the log the store keeps as it writes (the fleet: in Redis, settled with
    each write's flush), so a process that never wrote the session reads the last
    ``N`` entries in one call, not the log. A view behind the log (a writer that keeps
    no views wrote meanwhile, e.g. the compaction agent) is rebuilt from the log.
    ``handle.gather(name, gather, args)`` reads only the fields a walk over the view's
    pointers needs (a LangGraph checkpoint and its channel values), in one call.
``handle.events()`` / ``handle.session()``
    The session's admitted events in seq order as every reader derives them (the fleet:
    read back from the log; content opened, a shredded part as its placeholder).

One error, :class:`WriterConflict`, means "this write is not part of the session's
history": another writer holds the session right now, or took it while this write was
in flight (readers refused what this handle wrote: ``not_admitted``). Nothing of the
write is stored; reading again and retrying is safe. Adapters map it to their
framework's error (ADK: ``StaleSessionError``).

Backends, one contract (``tests/contract/store_contract.py`` runs over all of them)::

    MemoryStore()                      in-process, offline (tests, notebooks)
    JsonlStore(directory)              in-process, one ``<session id>.jsonl`` file each;
                                       one process at a time (no lease)
    FleetStore(WriterConfig)           Kafka + Redis through the fenced SessionWriter:
                                       any number of processes on any nodes

The fleet holds a session's lease only during a write (a short hold per call): a
stateless handler's next request, on another node, takes the session at once. Handles
are shared per store: ``store.open(sid)`` twice gives the same handle, so two framework
objects on one id in one process write one history.

Framework records the catalog has no type for go in as **plugin types**
(:func:`plugin_type`): a namespace of the adapter's own (``openai-agents/…``), never a
model-visible surface op, always ``ignorable`` — a reader without the plugin (the
worker, the dashboard, an older build) keeps and skips them instead of quarantining the
session as it does an unknown required type. Their data is content (sealed at rest,
``sessionstream delete`` shreds it): only the envelope is metadata.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sessionstream import redisconn
from sessionstream.core.catalog import Catalog, EventType, F, Obj, default_catalog
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonl import dumps_line, read_jsonl
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps
from sessionstream.core.privacy import unit_class
from sessionstream.core.rows import INLINE_VIEW_CHUNK, SEALED_PREFIX
from sessionstream.core.session import Session
from sessionstream.governance.rows import RowCipher
from sessionstream.integrations.views import InlineView, ViewGather, ViewSnapshot, ViewState
from sessionstream.producers.errors import (
    Fenced,
    LeaseExpired,
    LeaseUnavailable,
    ResumeRaceLost,
    SessionExists,
    SessionNotFound,
    WriterClosed,
)
from sessionstream.producers.lease import LeaseStore
from sessionstream.producers.resume import read_log
from sessionstream.producers.views import (
    INSTALL,
    READ,
    Gathered,
    ViewHead,
    ViewRead,
    ViewWrite,
    gather_script,
    view_args,
    view_keys,
)
from sessionstream.producers.writer import (
    NotHandedOver,
    SessionWriter,
    WriterConfig,
    release_durably,
)

__all__ = [
    "FleetStore",
    "JsonlStore",
    "MemoryStore",
    "Plan",
    "SessionHandle",
    "SessionStore",
    "StoreError",
    "WriterConflict",
    "plugin_type",
]

#: What a write asks of its adapter: the drafts to append, given the session as it is
#: (None: it has no events yet).
Plan = Callable[[Session | None], Sequence[Draft]]


class StoreError(SessionStreamError):
    """Root of the integration store's own errors (the core's still propagate)."""


class WriterConflict(StoreError):
    """A write that is not part of the session's history: another writer holds or took
    the session, or readers refused this handle's events (``not_admitted``)."""

    def __init__(self, session_id: str, detail: str, not_admitted: Sequence[str] = ()) -> None:
        self.session_id = session_id
        self.detail = detail
        self.not_admitted = list(not_admitted)
        super().__init__(
            f"session {session_id!r}: {detail}; the write is not part of the session's "
            "history — read the session again and retry, or leave it to its writer"
        )


def plugin_type(name: str, fields: Mapping[str, F] | None = None, *,
                description: str = "") -> EventType:
    """An ignorable, never model-visible event type in a plugin's own namespace.

    ``fields``: the data schema (extra fields are allowed anyway). Register it by
    passing it to a store (``MemoryStore(event_types=[...])``) or ``store.register([...])``.
    """
    return EventType(name, Obj(dict(fields or {})), ignorable=True, description=description)


def _check_plugin(t: EventType) -> None:
    if not t.ignorable:
        raise StoreError(f"plugin type {t.name!r} must be ignorable (build it with "
                         "plugin_type()): readers without the plugin quarantine the "
                         "session at an unknown required type")


def _catalog(event_types: Iterable[EventType]) -> Catalog:
    cat = default_catalog()
    for t in event_types:
        _check_plugin(t)
        cat.register_domain(t)
    return cat


class SessionHandle(ABC):
    """One session of a store, by id (see the module docstring for the contract)."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self._lock = threading.RLock()  # adapters call from worker threads
        #: The inline views' states, folded up to ``_folded`` events of the session.
        self._views: dict[str, ViewState] = {}
        self._folded = 0
        #: Whether the handle keeps the data of the events it wrote once they are handed
        #: on (the fleet keeps its writer's session between writes). False, for an adapter
        #: that reads only through views: it keeps their envelopes, and forgets the data
        #: of the ignorable events off the surface (``Session.forget_data``), so a long
        #: session of plugin records costs a handle O(events) small, not its values;
        #: ``events()`` and ``session()`` then read the log, and a plan sees the session's
        #: state (turns, calls), not those events' data.
        self.retain_events = True

    # -- reading ----------------------------------------------------------------------
    @abstractmethod
    def events(self) -> tuple[Event, ...]:
        """The admitted events, seq order (empty: the session does not exist yet)."""

    def session(self) -> Session | None:
        """The admitted events as a core Session (None: no events yet)."""
        events = self.events()
        return Session.from_events(events, catalog=self.store.catalog) if events else None

    def exists(self) -> bool:
        return bool(self.events())

    @abstractmethod
    def view(self, name: str, last: int | None = None, *,
             fields: bool = True) -> ViewSnapshot:
        """The inline view ``name`` (registered with the store): its last ``last``
        entries (None: all) and its fields (``fields=False``: none), as of the last
        durable write."""

    @abstractmethod
    def gather(self, name: str, gather: ViewGather, args: Sequence[str]) -> ViewSnapshot:
        """The fields of view ``name`` that ``gather`` takes (given ``args``), opened, as
        of the last durable write; no entries. One call on the fleet."""

    # -- writing ----------------------------------------------------------------------
    @abstractmethod
    def write(self, plan: Plan, *, durable: bool = True) -> list[Event]:
        """Take the session, append ``plan(session)``'s drafts as one atomic batch, make
        them durable (``durable``: else at :meth:`flush`) and hand the session on;
        returns the events. A refused draft raises and stores nothing.

        ``plan`` gets the session as it is (None: no events yet) and must not change it;
        it may raise to abort the write (nothing is stored). On a session that does not
        exist yet it is called with None before anything is taken (returning no drafts
        then creates nothing), and again with the session only if another writer
        started it meanwhile."""

    def append(self, type_or_draft: str | Draft, data: JsonValue = None, *,
               surface_op: SurfaceOp | str | None = None,
               source_event_seqs: Sequence[int] = (),
               turn_id: str | None = None, step_id: str | None = None) -> Event:
        """Append one event through the write-time rules (creates the session if new)."""
        draft = Draft.of(type_or_draft, data, surface_op, source_event_seqs, turn_id, step_id)
        return self.append_many([draft])[0]

    def append_many(self, drafts: Sequence[Draft], *, durable: bool = True) -> list[Event]:
        """Append ``drafts`` in order, atomically (see :meth:`write`)."""
        fixed = list(drafts)
        return self.write(lambda _session: fixed, durable=durable)

    @abstractmethod
    def flush(self) -> None:
        """Make every write of this handle durable and hand the session on (a no-op
        unless a write passed ``durable=False``)."""

    def release(self) -> None:
        """Give the session up (after :meth:`flush`): nothing is held between writes."""
        self.flush()

    # -- views ------------------------------------------------------------------------
    def _fold_views(self, session: Session, upto: int) -> None:
        """Fold the session's events from ``self._folded`` up to ``upto`` into every view
        (a view registered since: the whole log)."""
        views = self.store.views
        new = session.events_since(self._folded)[:upto - self._folded]
        for name, view in views.items():
            state = self._views.get(name)
            todo = new
            if state is None:
                state = self._views[name] = ViewState()
                todo = session.events[:upto]
            for e in todo:
                view.fold(state, e)
        self._folded = upto

    def _rebuild_views(self, events: Sequence[Event]) -> None:
        self._views = {name: v.build(events) for name, v in self.store.views.items()}
        self._folded = len(events)


class SessionStore(ABC):
    """Opens :class:`SessionHandle` objects by session id; one handle per id."""

    def __init__(self, event_types: Iterable[EventType] = (),
                 views: Iterable[InlineView] = ()) -> None:
        #: The default catalog plus the plugin types the adapters registered.
        self.catalog = _catalog(event_types)
        #: The inline views kept for every session of this store, by name.
        self.views: dict[str, InlineView] = {}
        self._handles: dict[str, SessionHandle] = {}
        self._lock = threading.Lock()
        self.register((), views)

    def register(self, event_types: Iterable[EventType],
                 views: Iterable[InlineView] = ()) -> None:
        """Add plugin types and inline views (an adapter registers its own); registering
        the same again is a no-op, another type or view under a registered name an
        error."""
        with self._lock:
            for t in event_types:
                known = self.catalog.get(t.name)
                if known is None:
                    _check_plugin(t)
                    self.catalog.register_domain(t)
                elif known != t:
                    raise StoreError(f"event type {t.name!r} is already registered with "
                                     "another schema")
            for v in views:
                had = self.views.get(v.name)
                if had is None:
                    self.views[v.name] = v
                elif type(had) is not type(v):
                    raise StoreError(f"inline view {v.name!r} is already registered")

    def open(self, session_id: str) -> SessionHandle:
        """The handle of ``session_id`` (nothing is created until the first append)."""
        if not isinstance(session_id, str) or not session_id:
            raise StoreError(f"a session id is a non-empty string, got {session_id!r}")
        with self._lock:
            handle = self._handles.get(session_id)
            if handle is None:
                handle = self._handles[session_id] = self._new_handle(session_id)
            return handle

    @abstractmethod
    def _new_handle(self, session_id: str) -> SessionHandle: ...

    def read_views(self, reads: Sequence[tuple[str, str, int | None]]) -> list[ViewSnapshot]:
        """Several inline views at once, in order: each ``(session id, view name, last)``
        read as :meth:`SessionHandle.view` reads it (the fleet: every view in one
        pipelined round trip, a stale one then rebuilt from the log as ``view`` does) —
        what a listing of many sessions, or a session with its shared state, reads."""
        return [self.open(sid).view(name, last) for sid, name, last in reads]

    def close(self) -> None:
        """Flush every handle (and, on the fleet, give back what a write still holds)."""
        with self._lock:
            handles = list(self._handles.values())
        for h in handles:
            h.release()


def _view_of(handle: SessionHandle, name: str) -> ViewState:
    if name not in handle.store.views:
        raise StoreError(f"no inline view {name!r} is registered with this store "
                         f"(registered: {sorted(handle.store.views) or 'none'})")
    return handle._views.get(name) or ViewState()


# ------------------------------------------------------------------- in-process


class _LocalHandle(SessionHandle):
    """A core Session in memory; ``_persist`` writes what a flush makes durable."""

    def __init__(self, store: SessionStore, session_id: str,
                 events: Sequence[Event] = ()) -> None:
        super().__init__(store, session_id)
        self._session: Session | None = (
            Session.from_events(events, catalog=store.catalog) if events else None)
        self._flushed = len(events)
        if events:
            self._rebuild_views(events)

    def events(self) -> tuple[Event, ...]:
        with self._lock:
            return self._session.events if self._session is not None else ()

    def session(self) -> Session | None:
        with self._lock:
            s = self._session
            return Session.from_events(s.events, catalog=self.store.catalog) if s else None

    def view(self, name: str, last: int | None = None, *,
             fields: bool = True) -> ViewSnapshot:
        with self._lock:
            state = _view_of(self, name)
            seq = self._session.next_seq - 1 if self._session is not None else -1
            return ViewSnapshot.of(state, seq, last, fields=fields)

    def gather(self, name: str, gather: ViewGather, args: Sequence[str]) -> ViewSnapshot:
        with self._lock:
            state = _view_of(self, name)
            seq = self._session.next_seq - 1 if self._session is not None else -1
            return ViewSnapshot.gathered(state, seq, gather, args)

    def write(self, plan: Plan, *, durable: bool = True) -> list[Event]:
        with self._lock:
            s = self._session
            drafts = list(plan(s))
            if not drafts:
                return []
            created = s is None
            if s is None:
                s = Session.create(self.session_id, catalog=self.store.catalog)
            savepoint = s.savepoint()
            try:
                events = [s.append(d) for d in drafts]
            except BaseException:
                s.rollback(savepoint)
                raise
            s.release(savepoint)
            self._session = s
            if created:
                self._rebuild_views(())
            self._fold_views(s, len(s))
            if durable:
                self._flush_locked()
            return events

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._session is not None and len(self._session) > self._flushed:
            self._persist(self._session.events_since(self._flushed))
            self._flushed = len(self._session)
            for state in self._views.values():
                state.published()

    def _persist(self, events: Sequence[Event]) -> None:
        """Memory: nothing to write."""


class MemoryStore(SessionStore):
    """Sessions in this process's memory: offline, gone with the process."""

    def _new_handle(self, session_id: str) -> SessionHandle:
        return _LocalHandle(self, session_id)


_SAFE_ID = re.compile(r"[A-Za-z0-9._-]+")


class _FileHandle(_LocalHandle):
    def __init__(self, store: JsonlStore, session_id: str) -> None:
        self.path = store.path_of(session_id)
        events = (read_jsonl(self.path, catalog=store.catalog)
                  if self.path.exists() else [])
        super().__init__(store, session_id, events)

    def _persist(self, events: Sequence[Event]) -> None:
        with open(self.path, "a", encoding="utf-8", newline="\n") as out:
            out.writelines(dumps_line(e) + "\n" for e in events)
            out.flush()
            os.fsync(out.fileno())


class JsonlStore(SessionStore):
    """One JSONL session file per id in ``directory`` (the format of ``sessionstream
    log``): offline and durable, for one process at a time."""

    def __init__(self, directory: str | os.PathLike[str],
                 event_types: Iterable[EventType] = (),
                 views: Iterable[InlineView] = ()) -> None:
        super().__init__(event_types, views)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path_of(self, session_id: str) -> Path:
        if not _SAFE_ID.fullmatch(session_id) or session_id.startswith("."):
            raise StoreError(f"session id {session_id!r} cannot name a file: use letters, "
                             "digits, '.', '_' and '-' (not leading '.') with JsonlStore")
        return self.directory / f"{session_id}.jsonl"

    def _new_handle(self, session_id: str) -> SessionHandle:
        return _FileHandle(self, session_id)


# ------------------------------------------------------------------------ fleet

#: The producers' errors that mean another writer has (or took) the session.
_CONFLICTS = (Fenced, LeaseUnavailable, ResumeRaceLost, LeaseExpired, SessionExists)


def _end_of(s: Session) -> tuple[int, str]:
    last = s.last_event
    return s.next_seq, last.event_id if last is not None else ""


class _FleetHandle(SessionHandle):
    """A session of the fleet, written one call at a time (docs/adr/0024): each write
    takes the lease, appends, flushes, settles the inline views and releases; the writer
    and its session stay in this process between writes, so the next write here
    continues without reading the log (or reads only what other nodes added)."""

    store: FleetStore

    def __init__(self, store: FleetStore, session_id: str) -> None:
        super().__init__(store, session_id)
        self._writer: SessionWriter | None = None
        #: The (seq, event id) the stored inline views are at, as far as this handle
        #: knows: what the next settle expects to find (a view elsewhere is rebuilt).
        self._stored_at: tuple[int, str] = (-1, "")
        #: The views whose state holds every field (folded from the whole log since a
        #: view that keeps no fields last forgot them): a stale one is installed from it.
        self._whole: set[str] = set()
        #: The writer's session forgot event data (``retain_events`` False).
        self._forgot = False

    def _held(self) -> SessionWriter | None:
        w = self._writer
        return w if w is not None and w.held else None

    # -- taking and handing on -------------------------------------------------------
    def _conflict(self, exc: Exception) -> WriterConflict:
        """Forget the writer (it is fenced or never started) and name the conflict."""
        self._drop()
        return WriterConflict(self.session_id, str(exc), getattr(exc, "not_admitted", ()))

    def _drop(self) -> None:
        w, self._writer = self._writer, None
        self._views, self._folded = {}, 0
        self._forgot = False
        if w is not None:
            w.abandon()

    def _rebuild_views(self, events: Sequence[Event]) -> None:
        super()._rebuild_views(events)
        self._whole = set(self._views)

    def _take(self) -> SessionWriter:
        """The writer holding the session now, its session the current history."""
        w = self._held()
        if w is not None:
            return w
        try:
            w = self._writer
            if w is not None:
                try:
                    w.retake()
                except NotHandedOver:
                    self._drop()
                    w = None
            if w is None:
                w = self._writer = SessionWriter.take(self.store.cfg, self.session_id,
                                                      catalog=self.store.catalog)
                self._views, self._folded, self._forgot = {}, 0, False
        except (*_CONFLICTS, SessionNotFound, WriterClosed) as exc:
            raise self._conflict(exc) from exc
        s = w.session
        if self._forgot and self._views.keys() != self.store.views.keys():
            # a view registered since: the session no longer holds what it must fold
            self._rebuild_views(read_log(self.store.cfg, self.session_id).admitted)
            self._folded = s.next_seq
        if self._folded != s.next_seq:  # new here, or others wrote since our last write
            if self._views:
                self._fold_views(s, s.next_seq)
            else:
                self._rebuild_views(s.events)
            for state in self._views.values():
                state.published()  # as their writers stored it (a settle finds out if not)
        last = s.last_event
        assert last is not None
        self._stored_at = (last.seq, last.event_id)
        return w

    def _hand_on(self, w: SessionWriter) -> None:
        """Flush durably, settle the inline views, release the lease."""
        cfg = self.store.cfg
        writes = [v for name in self._views
                  if (v := self._view_write(w.session, name)) is not None]
        try:
            stale = release_durably(w, writes, timeout=cfg.flush_timeout_s)
        except _CONFLICTS as exc:
            raise self._conflict(exc) from exc
        last = w.session.last_event
        assert last is not None
        self._stored_at = (last.seq, last.event_id)
        if stale:
            views = self.store.views
            whole = [n for n in stale if views[n].keeps_fields or n in self._whole]
            if whole:
                self.store._install(self.session_id, last, {n: self._views[n] for n in whole})
            if len(whole) < len(stale):  # forgotten fields: rebuilt from the log
                self.store._install_from_log(self.session_id,
                                             [n for n in stale if n not in whole])
        for name, state in self._views.items():
            state.published()
            if not self.store.views[name].keeps_fields:
                state.fields.clear()
                self._whole.discard(name)
        if not self.retain_events:
            w.session.forget_data(w.session.next_seq)
            self._forgot = True

    def _view_write(self, s: Session, name: str) -> ViewWrite | None:
        """What changed in view ``name`` since it was stored, as one settle's write."""
        state = self._views[name]
        low, dirty, gone = state.changes()
        last = s.last_event
        assert last is not None
        if low is None and not dirty and not gone and self._stored_at[0] == last.seq:
            return None
        keep = -1 if low is None else low // INLINE_VIEW_CHUNK
        push = ([] if low is None
                else self.store._chunks(self.session_id, name, state.entries, keep))
        return ViewWrite(
            name, self._stored_at, (last.seq, last.event_id), len(state.entries), keep,
            push,
            {k: self.store._field(self.session_id, name, k, state.fields[k]) for k in dirty},
            sorted(gone))

    # -- the handle -------------------------------------------------------------------
    def events(self) -> tuple[Event, ...]:
        with self._lock:
            w = self._writer
            if self._forgot and w is not None and w.held:
                self._hand_on(w)  # its session forgot data: what it holds goes to the log
            if w is not None and not self._forgot and (
                    w.held or self.store.handed_off_at(self.session_id) == _end_of(w.session)):
                return w.session.events  # ours is the history (nobody wrote since)
            if self.store.epoch(self.session_id) == 0:
                return ()  # never leased: no events (and no partition scan)
            return tuple(read_log(self.store.cfg, self.session_id).admitted)

    def session(self) -> Session | None:
        with self._lock:
            w = self._held()
            if w is not None and not self._forgot:
                return Session.from_events(w.session.events, catalog=self.store.catalog)
        return super().session()

    def write(self, plan: Plan, *, durable: bool = True) -> list[Event]:
        with self._lock:
            planned: list[Draft] | None = None
            if self._writer is None and self.store.epoch(self.session_id) == 0:
                planned = list(plan(None))  # a new session: nothing to take yet
                if not planned:
                    return []  # and nothing to write: nothing is created
            w = self._take()
            s = w.session
            try:
                if planned is None or len(s) > 1:  # (someone else started it meanwhile)
                    planned = list(plan(s))
                events = w.append_many(planned) if planned else []
            except BaseException:
                if durable:
                    self._give_back(w)
                raise
            self._fold_views(s, len(s))
            if durable:
                self._hand_on(w)
            return events

    def _give_back(self, w: SessionWriter) -> None:
        """Release after a write whose plan or batch was refused (nothing appended)."""
        with contextlib.suppress(WriterConflict):  # the refusal is what the caller needs
            self._hand_on(w)

    def flush(self) -> None:
        with self._lock:
            w = self._held()
            if w is not None:
                self._hand_on(w)

    def view(self, name: str, last: int | None = None, *,
             fields: bool = True) -> ViewSnapshot:
        with self._lock:
            w = self._held_view(name)
            if w is not None:  # a write with durable=False holds it: ours is the view
                return ViewSnapshot.of(_view_of(self, name), w.session.next_seq - 1, last,
                                       fields=fields)
        return self.store._read_view(self.session_id, name, last, fields)

    def gather(self, name: str, gather: ViewGather, args: Sequence[str]) -> ViewSnapshot:
        with self._lock:
            w = self._held_view(name)
            if w is not None:
                return ViewSnapshot.gathered(_view_of(self, name), w.session.next_seq - 1,
                                             gather, args)
        return self.store._gather(self.session_id, name, gather, args)

    def _held_view(self, name: str) -> SessionWriter | None:
        """The writer if a write with durable=False holds the session and view ``name``
        is read from its state; a view that keeps no fields is read from Redis, after
        the held write is flushed."""
        w = self._held()
        view = self.store.views.get(name)
        if w is not None and view is not None and not view.keeps_fields:
            self._hand_on(w)
            return None
        return w


class FleetStore(SessionStore):
    """Sessions in the tenant's Kafka topic, written through the fenced SessionWriter
    (lease, epoch, admission proof) and read back as readers derive them; the inline
    views in Redis beside them."""

    def __init__(self, cfg: WriterConfig, event_types: Iterable[EventType] = (),
                 views: Iterable[InlineView] = ()) -> None:
        super().__init__(event_types, views)
        if cfg.cipher is not None and cfg.cipher.catalog is not self.catalog:
            # Seal by this store's catalog (plugin types registered later included: it is
            # the same object): the default one knows no plugin type and would seal every
            # field of one, ids and versions too, as raw content, so a shredded session
            # would lose its structure along with its values.
            cfg = dataclasses.replace(
                cfg, cipher=dataclasses.replace(cfg.cipher, catalog=self.catalog))
        self.cfg = cfg
        self._client: Any = None
        self._leases: LeaseStore | None = None
        self._scripts: dict[str, Any] = {}
        self._gathers: dict[str, Any] = {}  # the registered gather scripts, by Lua body
        self._rows = RowCipher(cfg.cipher) if cfg.cipher is not None else None

    @classmethod
    def from_settings(cls, settings: Any = None, event_types: Iterable[EventType] = (),
                      views: Iterable[InlineView] = ()) -> FleetStore:
        """From ``Settings`` (default: ``Settings.from_env()``)."""
        from sessionstream.core.settings import Settings

        s = settings if settings is not None else Settings.from_env()
        return cls(WriterConfig.from_settings(s), event_types, views)

    # -- Redis ------------------------------------------------------------------------
    def _redis(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = redisconn.sync_redis(self.cfg.redis_url,
                                                    cluster=self.cfg.redis_cluster)
                self._leases = LeaseStore(self._client, self.cfg.key_prefix,
                                          self.cfg.redis_url)
                self._scripts = {"read": self._client.register_script(READ),
                                 "install": self._client.register_script(INSTALL)}
                self._gathers = {}
            return self._client

    def redis(self) -> Any:
        """The store's Redis client, for an adapter's own keys beside the sessions' (the
        LangGraph saver's thread index): one connection pool per store."""
        return self._redis()

    def epoch(self, session_id: str) -> int:
        """The session's lease epoch (0: no writer ever took it, so it has no events)."""
        self._redis()
        assert self._leases is not None
        return self._leases.current_epoch(self.cfg.tenant, session_id)

    def handed_off_at(self, session_id: str) -> tuple[int, str]:
        """(next seq, last event id) of the session's last hand-off."""
        self._redis()
        assert self._leases is not None
        return self._leases.handoff(self.cfg.tenant, session_id)

    # -- inline views -----------------------------------------------------------------
    def _seal(self, session_id: str, name: str, field: str, text: str) -> str:
        if self._rows is None:
            return text
        return self._rows.seal(session_id, f"fv:{name}", f"fv:{name}:{field}", text)

    def opens(self, session_id: str, name: str) -> bool:
        """Whether this store opens the sealed content of view ``name`` of the session
        now: False once the session's key is shredded (or the key store cannot say). An
        adapter that keeps in memory a value it wrote asks before it serves it, as a read
        of the view would (the content may have been deleted since)."""
        rows = self._rows
        if rows is None or not rows.cipher.enabled:
            return True  # this store writes the view's content clear
        cls = unit_class(f"fv:{name}")
        if cls is None:
            return True  # a class stored clear
        try:
            found = rows.cipher.store.lookup(rows.tenant, session_id, cls)
        except SessionStreamError:
            return False
        return found.key is not None

    def _open(self, session_id: str, name: str, field: str, stored: str) -> str | None:
        """The clear text; None when it does not open here (sealed, and this store has no
        cipher or the key is shredded): the reader then takes the log's placeholders."""
        if self._rows is None:
            return None if stored.startswith(SEALED_PREFIX) else stored
        return self._rows.open(session_id, f"fv:{name}", f"fv:{name}:{field}", stored)

    def _chunks(self, session_id: str, name: str, entries: Sequence[JsonValue],
                start: int) -> list[str]:
        """The chunk texts from chunk ``start`` on (sealed when content is)."""
        out = []
        for i in range(start, (len(entries) + INLINE_VIEW_CHUNK - 1) // INLINE_VIEW_CHUNK):
            part = entries[i * INLINE_VIEW_CHUNK:(i + 1) * INLINE_VIEW_CHUNK]
            out.append(self._seal(session_id, name, f"c{i}", canonical_dumps(list(part))))
        return out

    def _field(self, session_id: str, name: str, key: str, value: JsonValue) -> str:
        text = canonical_dumps(value)
        if self.views[name].is_clear(key):
            return text  # metadata a gather follows (InlineView.clear_fields)
        return self._seal(session_id, name, f"f:{key}", text)

    def _install(self, session_id: str, last: Event, views: Mapping[str, ViewState]) -> None:
        """Write ``views`` whole (they were behind the log, or missing), if the session
        has not moved on since ``last`` (else the next writer or reader does it)."""
        self._redis()
        for name, state in views.items():
            write = ViewWrite(name, None, (last.seq, last.event_id), len(state.entries), 0,
                              self._chunks(session_id, name, state.entries, 0),
                              {k: self._field(session_id, name, k, v)
                               for k, v in state.fields.items()})
            keys = [self.cfg.keys.lease(session_id),
                    *view_keys(self.cfg.keys, session_id, [write])]
            self._scripts["install"](keys=keys, args=[last.seq + 1, last.event_id,
                                                      *view_args([write])])

    def _registered(self, name: str) -> InlineView:
        view = self.views.get(name)
        if view is None:
            raise StoreError(f"no inline view {name!r} is registered with this store "
                             f"(registered: {sorted(self.views) or 'none'})")
        return view

    def _read_view(self, session_id: str, name: str, last: int | None,
                   fields: bool = True) -> ViewSnapshot:
        """One Redis call; a view behind the log is rebuilt from the log (and installed)."""
        self._registered(name)
        self._redis()
        raw = self._scripts["read"](**self._read_call(session_id, name, last, fields))
        return self._resolve(session_id, name, last, fields, ViewRead.parse(raw))

    def read_views(self, reads: Sequence[tuple[str, str, int | None]]) -> list[ViewSnapshot]:
        out: list[ViewSnapshot | None] = [None] * len(reads)
        todo = []
        for i, (sid, name, last) in enumerate(reads):
            self._registered(name)
            handle = self._handles.get(sid)
            if isinstance(handle, _FleetHandle) and handle._held() is not None:
                out[i] = handle.view(name, last)  # a write with durable=False holds it
            else:
                todo.append(i)
        if todo:
            client = self._redis()
            with client.pipeline(transaction=False) as pipe:
                for i in todo:
                    self._scripts["read"](**self._read_call(*reads[i]), client=pipe)
                raws = pipe.execute()
            for i, raw in zip(todo, raws, strict=True):
                sid, name, last = reads[i]
                out[i] = self._resolve(sid, name, last, True, ViewRead.parse(raw))
        return [snap for snap in out if snap is not None]

    def _read_call(self, session_id: str, name: str, last: int | None,
                   fields: bool = True) -> dict[str, Any]:
        """The keys and arguments of one READ."""
        keys = self.cfg.keys
        return {"keys": [keys.lease(session_id), keys.inline_view(session_id, name),
                         keys.inline_view_chunks(session_id, name)],
                "args": [-1 if last is None else last, 1 if fields else 0]}

    def _resolve(self, session_id: str, name: str, last: int | None, fields: bool,
                 got: ViewRead) -> ViewSnapshot:
        """The snapshot a READ found, or (stale, shredded, missing) the log's."""
        if got.fresh:
            snap = self._decode(session_id, name, got, last)
            if snap is not None:
                return snap
        rebuilt = self._from_log(session_id, name, got)
        if isinstance(rebuilt, ViewSnapshot):
            return rebuilt
        state, seq = rebuilt
        return ViewSnapshot.of(state, seq, last, "log", fields=fields)

    def _from_log(self, session_id: str, name: str, got: ViewHead
                  ) -> ViewSnapshot | tuple[ViewState, int]:
        """A view Redis could not serve (stale, shredded, missing), rebuilt from the log
        (and installed), with its seq; or the empty snapshot of a session that has no
        events (no such session: answered from Redis alone)."""
        if got.handoff_next_seq <= 0 and got.seq is None and self.epoch(session_id) == 0:
            return ViewSnapshot(-1, 0, source="redis")  # no such session
        rebuilt = self._rebuild(session_id, name, got.handoff_next_seq, got.handoff_last_id)
        return ViewSnapshot(-1, 0, source="log") if rebuilt is None else rebuilt

    def _gather(self, session_id: str, name: str, gather: ViewGather,
                args: Sequence[str]) -> ViewSnapshot:
        """One Redis call (the gather's script); a view behind the log is rebuilt from
        the log (and installed) and the gather taken from it."""
        view = self._registered(name)
        client = self._redis()
        script = self._gathers.get(gather.lua)
        if script is None:
            script = self._gathers[gather.lua] = client.register_script(
                gather_script(gather.lua))
        keys = self.cfg.keys
        head = keys.inline_view(session_id, name)
        for _ in range(3):  # the view may move between the gather and its second read
            got = Gathered.parse(script(keys=[keys.lease(session_id), head], args=list(args)))
            if not got.fresh:
                break
            wanted = got.fetch_wanted(client, head)
            if wanted is None:
                continue
            fields: dict[str, JsonValue] = {}
            for k, stored in (*got.fields.items(), *wanted.items()):
                text = stored if view.is_clear(k) else self._open(session_id, name,
                                                                   f"f:{k}", stored)
                if text is None:
                    break  # a shredded key: the log's placeholders instead
                fields[k] = json.loads(text)
            else:
                assert got.seq is not None
                return ViewSnapshot(got.seq, got.count, (), fields, "redis")
            break
        rebuilt = self._from_log(session_id, name, got)
        if isinstance(rebuilt, ViewSnapshot):
            return rebuilt
        state, seq = rebuilt
        return ViewSnapshot.gathered(state, seq, gather, args, "log")

    def _decode(self, session_id: str, name: str, got: ViewRead,
                last: int | None) -> ViewSnapshot | None:
        entries: list[JsonValue] = []
        for i, chunk in enumerate(got.chunks, start=got.first_chunk):
            text = self._open(session_id, name, f"c{i}", chunk)
            if text is None:
                return None  # a shredded key: the log's placeholders instead
            entries.extend(json.loads(text))
        fields: dict[str, JsonValue] = {}
        for k, v in got.fields.items():
            text = self._open(session_id, name, f"f:{k}", v)
            if text is None:
                return None
            fields[k] = json.loads(text)
        if last is not None:
            entries = entries[-last:] if last > 0 else []
        assert got.seq is not None
        return ViewSnapshot(got.seq, got.count, entries, fields, "redis")

    def _rebuild(self, session_id: str, name: str, handoff_next_seq: int,
                 handoff_last_id: str) -> tuple[ViewState, int] | None:
        """The view from the log and its seq (None: no events), installed if the
        hand-off read with it has not moved since."""
        events = read_log(self.cfg, session_id).admitted
        if not events:
            return None
        state = self.views[name].build(events)
        if handoff_next_seq == len(events) and handoff_last_id == events[-1].event_id:
            self._install(session_id, events[-1], {name: state})
        return state, events[-1].seq

    def _install_from_log(self, session_id: str, names: Sequence[str]) -> None:
        """Rebuild ``names`` from the log and install them (if the session has not moved
        on meanwhile): views a writer found stale and no longer holds whole."""
        events = read_log(self.cfg, session_id).admitted
        if events:
            self._install(session_id, events[-1],
                          {n: self.views[n].build(events) for n in names})

    def _new_handle(self, session_id: str) -> SessionHandle:
        return _FleetHandle(self, session_id)

    def close(self) -> None:
        super().close()
        client, self._client = self._client, None
        self._leases = None
        if client is not None:
            client.close()
