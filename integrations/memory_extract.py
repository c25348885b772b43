"""The extractor: ended turns of a session -> memory proposals, citing their seqs.

:func:`extract_session` runs a :class:`~sessionstream.core.memory.extract.MemoryModel`
over a session's user messages in turns that have ended, with the namespace's current
memories, and proposes each candidate as role ``extractor`` through the policy (a
candidate that names current memories it contradicts becomes a ``supersede``). Two
extractors racing on one turn propose duplicates; the fold collapses them.

:class:`ExtractorAgent` is the agent built like the compaction watcher: it follows the
tenant's change feed (its cursor in Redis, ``<p>:{<t>}:memory-extract:<name>``), and for
each session whose turns ended since its last look — at most once per ``as_of_seq``, with
a cooldown — reads the session and extracts. ``owner(session_id)`` says whose namespace a
session's memories go to (None: not extracted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from sessionstream.core.events import Event, SurfaceOp
from sessionstream.core.memory.extract import ExtractRequest, Known, MemoryModel, Said
from sessionstream.core.memory.model import Extractor, Method, Namespace, Version
from sessionstream.integrations.memory import MemoryClient

log = logging.getLogger(__name__)

__all__ = ["ExtractorAgent", "ended_user_messages", "extract_session", "propose_extracted"]


def ended_user_messages(events: Sequence[Event]) -> list[Said]:
    """The user's own messages (not summaries) of turns that have ended, with seqs."""
    out: list[Said] = []
    pending: list[Said] = []
    in_turn = False
    for e in events:
        if e.type == "turn/start":
            in_turn, pending = True, []
        elif e.type == "turn/end":
            out += pending
            in_turn, pending = False, []
        elif (e.type == "user/message" and e.surface_op is not SurfaceOp.REPLACE
              and isinstance(e.data.get("content"), str)):
            said = Said(e.seq, str(e.data["content"]))
            (pending if in_turn else out).append(said)
    return out


def extract_session(client: MemoryClient, session_id: str, events: Sequence[Event],
                    model: MemoryModel, *, namespace: Namespace | None = None,
                    since_seq: int = -1) -> list[Version]:
    """Propose what ``model`` finds in the ended turns of ``events`` (past
    ``since_seq``); the versions placed (pending ones included)."""
    said = tuple(s for s in ended_user_messages(events) if s.seq > since_seq)
    return propose_extracted(client, session_id, said, model, namespace=namespace)


def propose_extracted(client: MemoryClient, session_id: str, said: Sequence[Said],
                      model: MemoryModel, *, namespace: Namespace | None = None,
                      by: str = "extractor") -> list[Version]:
    """Ask ``model`` about ``said`` (a session's user messages with their seqs) and
    propose what it finds, citing ``session_id`` and those seqs (``by``: the extractor's
    name in provenance)."""
    if not said:
        return []
    ns = client.namespace(namespace)
    known = tuple(Known(v.ref.id, v.kind, v.content) for v in client.list(namespace=ns)
                  if isinstance(v.content, str))
    how = Extractor(Method.MODEL, by, model.name, model.prompt_version)
    out: list[Version] = []
    for c in model.extract(ExtractRequest(session_id, tuple(said), known)):
        sources = [(session_id, list(c.seqs))]
        if c.supersedes:
            out.append(client.supersede(list(c.supersedes), c.content, kind=c.kind,
                                        sources=sources, namespace=ns, extractor=how))
        else:
            out.append(client.propose(c.content, kind=c.kind, sources=sources,
                                      namespace=ns, extractor=how))
    return out


class ExtractorAgent:
    """Follows the tenant's change feed and extracts from sessions whose turns ended.

    ``read(session_id)``: the session's admitted events (e.g. a
    ``FleetStore.open(sid).events``); ``client_for(namespace)``: a client acting as the
    extractor for that namespace's owner; ``owner(session_id)``: the namespace.
    """

    def __init__(self, redis: Any, keys: Any, *, read: Callable[[str], Sequence[Event]],
                 client_for: Callable[[Namespace], MemoryClient],
                 owner: Callable[[str], Namespace | None], model: MemoryModel,
                 name: str = "default", cooldown_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = redis
        self.keys = keys
        self.read = read
        self.client_for = client_for
        self.owner = owner
        self.model = model
        self.name = name
        self.cooldown_s = cooldown_s
        self.clock = clock
        #: session -> (the last seq extracted from, when)
        self.seen: dict[str, tuple[int, float]] = {}
        self.proposed = 0

    def _cursor_key(self) -> str:
        return self.keys.tenant_key(f"memory-extract:{self.name}")

    def step(self, count: int = 500) -> int:
        """Read the feed past the cursor; extract from each session named; the number of
        sessions extracted from."""
        from sessionstream.core.rows import generation_of, read_change_entry

        gen = generation_of(self.redis.get(self.keys.generation()))
        cursor = self.redis.hgetall(self._cursor_key())
        since = _s(cursor.get(b"entry_id") or cursor.get("entry_id") or "0-0")
        if int(_s(cursor.get(b"generation") or cursor.get("generation") or gen)) != gen:
            since = "0-0"
        entries = self.redis.xrange(self.keys.tenant_changes(gen),
                                    "-" if since == "0-0" else "(" + since, "+", count=count)
        latest: dict[str, int] = {}
        last_id = since
        for eid, fields in entries:
            last_id = _s(eid)
            change = read_change_entry({_s(k): _s(v) for k, v in fields.items()})
            if change is not None and change.get("session"):
                latest[str(change["session"])] = int(change.get("as_of_seq", -1))
        done = 0
        for sid, as_of in latest.items():
            prev = self.seen.get(sid)
            if prev is not None and (prev[0] >= as_of
                                     or self.clock() - prev[1] < self.cooldown_s):
                continue
            ns = self.owner(sid)
            if ns is None:
                continue
            try:
                events = self.read(sid)
                placed = extract_session(self.client_for(ns), sid, events, self.model,
                                         namespace=ns,
                                         since_seq=-1 if prev is None else prev[0])
            except Exception as exc:  # one session never stops the agent (no content)
                log.warning("memory extraction of session %s failed: %s", sid,
                            type(exc).__name__)
                continue
            self.proposed += len(placed)
            self.seen[sid] = (events[-1].seq if events else as_of, self.clock())
            done += 1
        if last_id != since:
            self.redis.hset(self._cursor_key(), mapping={"generation": gen,
                                                         "entry_id": last_id})
        return done


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
