"""The store the framework adapters stand on: one sessionstream session, by id.

An adapter (the OpenAI Agents SDK ``Session``, the ADK session service, the LangGraph
saver) never talks to Kafka, Redis or files itself. It asks a :class:`SessionStore` for
the :class:`SessionHandle` of a session id and does four things with it:

``handle.events()``
    The session's admitted events, in seq order, as every reader derives them (the
    fleet: read back from the log; content opened, a shredded part as its placeholder).
``handle.session()``
    The same events as a core :class:`~sessionstream.core.session.Session` (for
    ``derive_messages()``, the compaction planner, the surface).
``handle.append(type, data, ...)`` / ``handle.append_many(drafts)``
    Append through the session's write-time rules (the catalog's schema, the turn/step
    and tool-call invariants); ``handle.acquire()`` takes the session for writing first,
    for a read-then-write. A refused event raises the core's ``InvariantViolation``
    / ``SchemaViolation`` and changes nothing. The first append creates the session (a
    ``session/start``) if it has no events yet: create-or-open by id.
``handle.flush()``
    The durability barrier: on return every event appended through this handle is in
    the log and admitted by readers (the fleet: acknowledged by Kafka and proven
    admitted; a JSONL file: written and fsynced; memory: a no-op).

One error, :class:`WriterConflict`, means "this write is not part of the session's
history": another writer holds or took the session (the fleet's lease and fencing), or
readers refused what this handle wrote. The events named in ``not_admitted`` are not in
the history; the handle forgets its writer, so the next append re-reads the session and
writes as its newest writer if nobody else holds it (a retry is safe). Adapters map it
to their framework's error (ADK: ``StaleSessionError``).

Backends, one contract (``tests/contract/store_contract.py`` runs over all of them)::

    MemoryStore()                      in-process, offline (tests, notebooks)
    JsonlStore(directory)              in-process, one ``<session id>.jsonl`` file each;
                                       one process at a time (no lease)
    FleetStore(WriterConfig)           Kafka + Redis through the fenced SessionWriter:
                                       any number of processes on any nodes

The fleet's writer holds the session's lease from the first append until
:meth:`SessionHandle.release` (or :meth:`SessionStore.close`); meanwhile a writer in
another process gets :class:`WriterConflict`, and an idle lease expires after the
config's ``lease_ttl_ms``. Handles are shared per store: ``store.open(sid)`` twice gives
the same handle, so two framework objects on one id in one process write one history.

Framework records the catalog has no type for go in as **plugin types**
(:func:`plugin_type`): a namespace of the adapter's own (``openai-agents/…``), never a
model-visible surface op, always ``ignorable`` — a reader without the plugin (the
worker, the dashboard, an older build) keeps and skips them instead of quarantining the
session as it does an unknown required type. Their data is content (sealed at rest,
``sessionstream delete`` shreds it): only the envelope is metadata.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sessionstream import redisconn
from sessionstream.core.catalog import Catalog, EventType, F, Obj, default_catalog
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonl import dumps_line, read_jsonl
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.session import Session
from sessionstream.producers.errors import (
    Fenced,
    LeaseExpired,
    LeaseUnavailable,
    ResumeRaceLost,
    SessionExists,
    SessionNotFound,
    WriterClosed,
)
from sessionstream.producers.fleet import flush_durably
from sessionstream.producers.lease import LeaseStore
from sessionstream.producers.resume import read_log
from sessionstream.producers.writer import SessionWriter, WriterConfig

__all__ = [
    "FleetStore",
    "JsonlStore",
    "MemoryStore",
    "SessionHandle",
    "SessionStore",
    "StoreError",
    "WriterConflict",
    "plugin_type",
]


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

    @abstractmethod
    def events(self) -> tuple[Event, ...]:
        """The admitted events, seq order (empty: the session does not exist yet)."""

    def session(self) -> Session | None:
        """The admitted events as a core Session (None: no events yet)."""
        events = self.events()
        return Session.from_events(events, catalog=self.store.catalog) if events else None

    def exists(self) -> bool:
        return bool(self.events())

    def append(self, type_or_draft: str | Draft, data: JsonValue = None, *,
               surface_op: SurfaceOp | str | None = None,
               source_event_seqs: Sequence[int] = (),
               turn_id: str | None = None, step_id: str | None = None) -> Event:
        """Append one event through the write-time rules (creates the session if new)."""
        draft = Draft.of(type_or_draft, data, surface_op, source_event_seqs, turn_id, step_id)
        return self.append_many([draft])[0]

    @abstractmethod
    def append_many(self, drafts: Sequence[Draft]) -> list[Event]:
        """Append drafts in order; the first refused one raises (the earlier ones stay
        appended, not yet flushed)."""

    @abstractmethod
    def flush(self) -> None:
        """The durability barrier for every event appended through this handle."""

    def acquire(self) -> None:
        """Take the session for writing now (creating it if new), so that what
        :meth:`events` returns next is the history the next append continues — for a
        read-then-write such as "pop the last item". The fleet: takes the lease."""
        with self._lock:
            if not self.exists():
                self.append_many([])

    def release(self) -> None:
        """Flush and give up writing (the fleet: release the lease). Appending again
        takes the session back."""
        self.flush()


class SessionStore(ABC):
    """Opens :class:`SessionHandle` objects by session id; one handle per id."""

    def __init__(self, event_types: Iterable[EventType] = ()) -> None:
        #: The default catalog plus the plugin types the adapters registered.
        self.catalog = _catalog(event_types)
        self._handles: dict[str, SessionHandle] = {}
        self._lock = threading.Lock()

    def register(self, event_types: Iterable[EventType]) -> None:
        """Add plugin types (an adapter registers its own); registering the same type
        again is a no-op, another type under a registered name an error."""
        with self._lock:
            for t in event_types:
                known = self.catalog.get(t.name)
                if known is None:
                    _check_plugin(t)
                    self.catalog.register_domain(t)
                elif known != t:
                    raise StoreError(f"event type {t.name!r} is already registered with "
                                     "another schema")

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

    def close(self) -> None:
        """Release every handle (flush, give up leases)."""
        with self._lock:
            handles = list(self._handles.values())
        for h in handles:
            h.release()


# ------------------------------------------------------------------- in-process


class _LocalHandle(SessionHandle):
    """A core Session in memory; ``_persist`` writes what a flush makes durable."""

    def __init__(self, store: SessionStore, session_id: str,
                 events: Sequence[Event] = ()) -> None:
        super().__init__(store, session_id)
        self._session: Session | None = (
            Session.from_events(events, catalog=store.catalog) if events else None)
        self._flushed = len(events)

    def events(self) -> tuple[Event, ...]:
        with self._lock:
            return self._session.events if self._session is not None else ()

    def session(self) -> Session | None:
        with self._lock:
            s = self._session
            return Session.from_events(s.events, catalog=self.store.catalog) if s else None

    def append_many(self, drafts: Sequence[Draft]) -> list[Event]:
        with self._lock:
            if self._session is None:
                self._session = Session.create(self.session_id, catalog=self.store.catalog)
            return [self._session.append(d) for d in drafts]

    def flush(self) -> None:
        with self._lock:
            if self._session is not None and len(self._session) > self._flushed:
                self._persist(self._session.events[self._flushed:])
                self._flushed = len(self._session)

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
                 event_types: Iterable[EventType] = ()) -> None:
        super().__init__(event_types)
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


class _FleetHandle(SessionHandle):
    store: FleetStore

    def __init__(self, store: FleetStore, session_id: str) -> None:
        super().__init__(store, session_id)
        self._writer: SessionWriter | None = None

    def _conflict(self, exc: Exception) -> WriterConflict:
        """Forget the writer (it is fenced or never started) and name the conflict."""
        w, self._writer = self._writer, None
        if w is not None:
            w.abandon()
        return WriterConflict(self.session_id, str(exc),
                              getattr(exc, "not_admitted", ()))

    def events(self) -> tuple[Event, ...]:
        with self._lock:
            w = self._writer
            if w is not None and w.holds_lease():
                return w.session.events  # the sole writer's copy is the history
            cfg = self.store.cfg
            if self.store.epoch(self.session_id) == 0:
                return ()  # never leased: no events (and no partition scan)
            return tuple(read_log(cfg, self.session_id).admitted)

    def _writer_or_open(self) -> SessionWriter:
        if self._writer is not None:
            return self._writer
        cfg, cat = self.store.cfg, self.store.catalog
        try:
            try:
                self._writer = SessionWriter.create(cfg, self.session_id, catalog=cat)
            except SessionExists:
                self._writer = SessionWriter.open(cfg, self.session_id, catalog=cat)
        except (*_CONFLICTS, SessionNotFound) as exc:
            # SessionNotFound here: create lost to another creator whose session/start
            # is not admitted yet — the same race, seen from the other side.
            raise self._conflict(exc) from exc
        return self._writer

    def acquire(self) -> None:
        with self._lock:
            self._writer_or_open()

    def append_many(self, drafts: Sequence[Draft]) -> list[Event]:
        with self._lock:
            w = self._writer_or_open()
            try:
                return [w.append(d) for d in drafts]
            except (*_CONFLICTS, WriterClosed) as exc:
                raise self._conflict(exc) from exc

    def flush(self) -> None:
        with self._lock:
            if self._writer is None:
                return
            try:
                flush_durably(self._writer, timeout=self.store.cfg.flush_timeout_s)
            except _CONFLICTS as exc:
                raise self._conflict(exc) from exc

    def release(self) -> None:
        with self._lock:
            w = self._writer
            if w is None:
                return
            try:
                self.flush()
            finally:
                if self._writer is not None:
                    self._writer = None
                    w.close()


class FleetStore(SessionStore):
    """Sessions in the tenant's Kafka topic, written through the fenced SessionWriter
    (lease, epoch, admission proof) and read back as readers derive them."""

    def __init__(self, cfg: WriterConfig, event_types: Iterable[EventType] = ()) -> None:
        super().__init__(event_types)
        if cfg.cipher is not None and cfg.cipher.catalog is not self.catalog:
            # Seal by this store's catalog (plugin types registered later included: it is
            # the same object): the default one knows no plugin type and would seal every
            # field of one, ids and versions too, as raw content, so a shredded session
            # would lose its structure along with its values.
            cfg = dataclasses.replace(
                cfg, cipher=dataclasses.replace(cfg.cipher, catalog=self.catalog))
        self.cfg = cfg
        self._leases: tuple[Any, LeaseStore] | None = None

    @classmethod
    def from_settings(cls, settings: Any = None,
                      event_types: Iterable[EventType] = ()) -> FleetStore:
        """From ``Settings`` (default: ``Settings.from_env()``)."""
        from sessionstream.core.settings import Settings

        s = settings if settings is not None else Settings.from_env()
        return cls(WriterConfig.from_settings(s), event_types)

    def epoch(self, session_id: str) -> int:
        """The session's lease epoch (0: no writer ever took it, so it has no events)."""
        with self._lock:
            if self._leases is None:
                client = redisconn.sync_redis(self.cfg.redis_url, cluster=self.cfg.redis_cluster)
                self._leases = (client, LeaseStore(client, self.cfg.key_prefix,
                                                   self.cfg.redis_url))
            leases = self._leases[1]
        return leases.current_epoch(self.cfg.tenant, session_id)

    def _new_handle(self, session_id: str) -> SessionHandle:
        return _FleetHandle(self, session_id)

    def close(self) -> None:
        super().close()
        leases, self._leases = self._leases, None
        if leases is not None:
            leases[0].close()
