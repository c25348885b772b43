"""Google ADK's ``BaseMemoryService`` on sessionstream's long-term memory (docs/adr/0030).

The one-line switch::

    memory = InMemoryMemoryService()                                          # before
    memory = SessionstreamMemoryService(FleetBackend.from_settings(), store)  # after
    runner = Runner(agent=agent, app_name="app", session_service=sessions,
                    memory_service=memory)

An app's user's memories are the namespace ``<tenant>/user/<user_id>/<app_name>``.

- ``add_session_to_memory(session)`` / ``add_events_to_memory(...)`` run the extractor
  (a :class:`~sessionstream.core.memory.extract.MemoryModel`; the offline pattern model
  by default) over the user's texts and propose what it finds, each citing the
  sessionstream session and the seqs its ADK events were stored at (read from ``store``,
  the store of the ``SessionstreamSessionService``); adding a session again proposes
  duplicates, which collapse;
- ``add_memory`` writes explicit entries; ``search_memory`` ranks the namespace (BM25 +
  vectors) and returns ``MemoryEntry`` with ``id`` ``<memory id>@<version>`` and the
  provenance in ``custom_metadata``; ``delete_memory(id)`` forgets one memory;
- ``forget_session(app_name, user_id, session_id)``: what ADK lacks — every memory derived
  only from that session is forgotten, everywhere (``sessionstream delete`` of the
  session does the same for every namespace citing it).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from google.adk.events.event import Event as AdkEvent
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from sessionstream.core.jsonvalue import thaw
from sessionstream.core.memory.extract import MemoryModel, PatternModel, Said
from sessionstream.core.memory.model import Actor, Namespace, Role, Scope
from sessionstream.core.memory.search import Embedder
from sessionstream.integrations.google_adk import stream_id
from sessionstream.integrations.memory import (
    MemoryBackend,
    MemoryClient,
    MemoryNotFound,
    SearcherCache,
)
from sessionstream.integrations.memory_embed import default_embedder
from sessionstream.integrations.memory_extract import propose_extracted

log = logging.getLogger(__name__)

__all__ = ["SessionstreamMemoryService"]


class SessionstreamMemoryService(BaseMemoryService):
    """ADK memory with provenance and a per-session forget (see the module)."""

    def __init__(self, backend: MemoryBackend, store: Any = None, *,
                 model: MemoryModel | None = None, limit: int = 5,
                 embedder: Embedder | None = None) -> None:
        self.backend = backend
        self.store = store
        self.model = model or PatternModel()
        self.limit = limit
        #: search's embedder (None: the process's, ``Env.MEMORY_EMBEDDER``)
        self.embedder = embedder or default_embedder()
        #: one index cache for every call's client: a search reuses the namespace's
        #: index until the namespace changes
        self.searchers = SearcherCache()

    def _ns(self, app_name: str, user_id: str) -> Namespace:
        return Namespace(self.backend.tenant, Scope.USER, user_id, (app_name,))

    def _client(self, user_id: str, role: Role = Role.EXTRACTOR) -> MemoryClient:
        return MemoryClient(self.backend, Actor(role, "google-adk", tenant=self.backend.tenant,
                                                user=user_id), embedder=self.embedder,
                            searchers=self.searchers)

    async def _run(self, fn: Any, *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kw)

    # -- ingest ---------------------------------------------------------------------
    def _seqs(self, sid: str) -> dict[str, int]:
        """ADK event id -> the seq the session service stored it at."""
        if self.store is None:
            return {}
        out: dict[str, int] = {}
        for e in self.store.open(sid).events():
            adk = e.data.get("adk")
            if isinstance(adk, Mapping) and isinstance(adk.get("id"), str):
                out.setdefault(str(adk["id"]), e.seq)
        return out

    def _ingest(self, app: str, user: str, session_id: str | None,
                events: Sequence[AdkEvent]) -> int:
        sid = stream_id(app, user, session_id) if session_id else None
        seqs = self._seqs(sid) if sid else {}
        said = []
        for ev in events:
            if ev.author != "user" or not ev.content or not ev.content.parts:
                continue
            text = " ".join(p.text for p in ev.content.parts if p.text)
            seq = seqs.get(ev.id)
            if text and seq is not None:
                said.append(Said(seq, text))
        if sid is None:
            log.warning("add_events_to_memory without a session_id: %d events not "
                        "extracted (a memory must cite the session it comes from)", len(events))
            return 0
        if not said:
            return 0
        return len(propose_extracted(self._client(user), sid, said, self.model,
                                     namespace=self._ns(app, user), by="google-adk"))

    async def add_session_to_memory(self, session: AdkSession) -> None:
        await self._run(self._ingest, session.app_name, session.user_id, session.id,
                        list(session.events))

    async def add_events_to_memory(self, *, app_name: str, user_id: str,
                                   events: Sequence[AdkEvent], session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None
                                   ) -> None:
        await self._run(self._ingest, app_name, user_id, session_id, list(events))

    async def add_memory(self, *, app_name: str, user_id: str,
                         memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        def write() -> None:
            mem = self._client(user_id, Role.AGENT)
            for m in memories:
                text = " ".join(p.text for p in (m.content.parts or []) if p.text)
                kind = str((m.custom_metadata or {}).get("kind", "note"))
                if text:
                    mem.propose(text, kind=kind, namespace=self._ns(app_name, user_id))
        await self._run(write)

    # -- read -----------------------------------------------------------------------
    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        def search() -> SearchMemoryResponse:
            mem = self._client(user_id, Role.AGENT)
            out = []
            for h in mem.search(query, namespace=self._ns(app_name, user_id), k=self.limit):
                v = h.version
                text = v.content if isinstance(v.content, str) else str(thaw(v.content))
                out.append(MemoryEntry(
                    id=str(v.ref), author="memory",
                    content=types.Content(role="user", parts=[types.Part(text=text)]),
                    timestamp=dt.datetime.fromtimestamp(v.valid_from / 1000,
                                                        tz=dt.UTC).isoformat(),
                    custom_metadata={"namespace": h.namespace.key, "kind": v.kind,
                                     "score": round(h.score, 6), "status": v.status.value,
                                     "sources": [s.to_json() for s in v.sources]}))
            return SearchMemoryResponse(memories=out)
        return await self._run(search)

    # -- forget ---------------------------------------------------------------------
    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        if not memory_id:
            return
        mid = memory_id.rpartition("@")[0] or memory_id

        def forget() -> None:
            # ADK's in-memory service ignores an unknown id too
            with contextlib.suppress(MemoryNotFound):
                self._client(user_id, Role.AGENT).forget(
                    [mid], namespace=self._ns(app_name, user_id), reason="deleted")
        await self._run(forget)

    async def forget_session(self, *, app_name: str, user_id: str,
                             session_id: str) -> dict[str, Any]:
        """Forget what only that ADK session supports (in every namespace citing it)."""
        sid = stream_id(app_name, user_id, session_id)
        op = MemoryClient(self.backend, Actor(Role.OPERATOR, "google-adk",
                                              tenant=self.backend.tenant))
        return await self._run(op.forget_session, sid)
