"""LangGraph's ``BaseStore`` on sessionstream's long-term memory (docs/adr/0030).

``pip install 'sessionstream[langgraph]'``::

    from sessionstream.integrations.langgraph_store import SessionstreamStore
    from sessionstream.integrations.memory import FleetBackend      # InMemoryBackend offline

    store = SessionstreamStore(FleetBackend.from_settings(), user="ada",
                               index={"dims": 256, "embed": my_embed, "fields": ["text"]})
    graph = builder.compile(checkpointer=saver, store=store)

What LangGraph's own stores keep, plus what they cannot: every ``put`` is a memory
operation on the tenant's log (a new version of the item, the old one kept as history),
each item cites the sessions and seqs it came from when the caller passes them
(:meth:`SessionstreamStore.put_with_sources`: ``store.put_with_sources(ns, key, value,
[(session_id, [seqs])])``), and ``sessionstream delete SESSION``
forgets every item derived only from that session.

Mapping:

- a LangGraph namespace (a tuple of labels) is the memory namespace
  ``<tenant>/user/<user>/<labels…>`` of the store's ``user`` (labels escaped reversibly, so
  any label LangGraph accepts round-trips); a LangGraph key is a memory id derived from
  it, the item's content ``{"key", "value", "ttl"}``;
- ``PutOp`` is ``propose`` (``dedupe`` off: two keys with equal values are two items), a
  ``None`` value ``forget``; ``GetOp`` reads the current version; ``SearchOp`` filters
  with LangGraph's operators and, with an ``index`` config, ranks by cosine similarity of
  the configured ``embed`` (``score``), else by ``updated_at`` newest first (as
  ``SqliteStore``); ``ListNamespacesOp`` reads the tenant's namespace index;
- TTL (minutes) is ``expires_at``; ``refresh_on_read`` writes a ``touch``;
  :meth:`SessionstreamStore.sweep_ttl` forgets expired items.

Within one ``batch``, reads see the store as it was before the batch's writes, and of
several puts of one item the last wins (LangGraph's ``InMemoryStore`` semantics).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    validate_op_namespace,
)

from sessionstream.core.jsonvalue import thaw
from sessionstream.core.memory.model import Actor, AnyOp, Namespace, Role, Scope, Version
from sessionstream.core.memory.search import index_texts, matches
from sessionstream.integrations.memory import MemoryBackend, MemoryClient

__all__ = ["SessionstreamStore"]

_MINUTE_MS = 60_000


def _escape(label: str) -> str:
    out = []
    for ch in label:
        if ch == "%" or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


def _unescape(label: str) -> str:
    out, i = [], 0
    while i < len(label):
        if label[i] == "%" and i + 2 < len(label) + 1:
            out.append(chr(int(label[i + 1:i + 3], 16)))
            i += 3
        else:
            out.append(label[i])
            i += 1
    return "".join(out)


def _key_id(key: str) -> str:
    return "lg-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


def _when(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


class SessionstreamStore(BaseStore):
    """A LangGraph store over a :class:`~sessionstream.integrations.memory.MemoryBackend`."""

    supports_ttl: bool = True

    def __init__(self, backend: MemoryBackend, *, user: str = "langgraph",
                 index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        self.backend = backend
        self.user = user
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.mem = MemoryClient(backend, Actor(Role.AGENT, "langgraph", tenant=backend.tenant,
                                               user=user), clock=self._now)
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Any = None
        #: the value paths embedded (``fields``; ``text_fields`` as SqliteStore names it)
        self._fields: list[str] = ["$"]
        if index:
            self.index_config = dict(index)
            self.embeddings = ensure_embeddings(index.get("embed"))
            given: Any = dict(index).get("fields") or dict(index).get("text_fields")
            self._fields = list(given or ["$"])
        #: per namespace key: (state object, {memory id: [vectors]}) computed once
        self._vectors: dict[str, tuple[Any, dict[str, list[list[float]]]]] = {}

    def _now(self) -> int:
        return self.clock()

    # -- mapping ------------------------------------------------------------------------
    def _ns(self, labels: Sequence[str]) -> Namespace:
        return Namespace(self.backend.tenant, Scope.USER, self.user,
                         tuple(_escape(x) for x in labels))

    def _labels(self, ns: Namespace) -> tuple[str, ...] | None:
        if ns.scope is not Scope.USER or ns.owner != self.user:
            return None
        return tuple(_unescape(x) for x in ns.path)

    def _item(self, labels: tuple[str, ...], v: Version, first: Version,
              score: float | None = None, search: bool = False) -> Item:
        content = thaw(v.content)
        created, updated = _when(first.valid_from), _when(v.valid_from)
        if search:
            return SearchItem(labels, content["key"], content["value"], created, updated,
                              score)
        return Item(value=content["value"], key=content["key"], namespace=labels,
                    created_at=created, updated_at=updated)

    def _items(self, ns: Namespace) -> dict[str, tuple[Version, Version]]:
        """key -> (current version, the first version of its current life)."""
        out = {}
        now = self._now()
        for memory in self.backend.state(ns).memories.values():
            cur = memory.current
            if not cur.visible(now) or cur.content is None:
                continue
            first = cur
            for v in reversed(memory.versions[:-1]):
                if v.forgotten is not None or v.superseded_by is None:
                    break
                first = v
            out[str(thaw(cur.content)["key"])] = (cur, first)
        return out

    # -- the batch ----------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        touches: list[tuple[Namespace, str, int]] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[i] = self._get(op, touches)
            elif isinstance(op, SearchOp):
                results[i] = self._search(op, touches)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(op)
            elif isinstance(op, PutOp):
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = op
            else:
                raise ValueError(f"unknown store operation {type(op).__name__}")
        for ns, memory_id, expires in touches:
            self.mem.touch([memory_id], expires, namespace=ns)
        writes = [w for w in (self._put_op(op) for op in puts.values()) if w is not None]
        if writes:  # one flush and one fold for the batch's writes
            self.mem.apply(writes)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _refresh(self, requested: bool | None) -> bool:
        """Whether a read extends its items' TTL: asked for (BaseStore's methods ask by
        default) and allowed by the TTL config's ``refresh_on_read`` (off unless set,
        as in SqliteStore)."""
        allowed = bool(self.ttl_config and self.ttl_config.get("refresh_on_read", False))
        return allowed and requested is not False

    def _get(self, op: GetOp, touches: list[tuple[Namespace, str, int]]) -> Item | None:
        ns = self._ns(op.namespace)
        found = self._items(ns).get(op.key)
        if found is None:
            return None
        cur, first = found
        self._maybe_touch(ns, cur, self._refresh(op.refresh_ttl), touches)
        return self._item(op.namespace, cur, first)

    def _maybe_touch(self, ns: Namespace, v: Version, refresh: bool,
                     touches: list[tuple[Namespace, str, int]]) -> None:
        ttl = thaw(v.content).get("ttl")
        if refresh and ttl is not None:
            touches.append((ns, v.ref.id, self._now() + int(ttl * _MINUTE_MS)))

    def put_with_sources(self, namespace: tuple[str, ...], key: str, value: dict[str, Any],
                         sources: Sequence[tuple[str, Sequence[int]]], *,
                         index: Any = None, ttl: float | None = None) -> None:
        """``put``, citing the sessions and seqs the value was derived from: deleting
        every one of those sessions forgets the item (``sessionstream delete``)."""
        validate_op_namespace(PutOp(tuple(namespace), key, value))
        self._put(PutOp(tuple(namespace), key, value, index, ttl), sources)

    def _put(self, op: PutOp, sources: Sequence[tuple[str, Sequence[int]]] = ()) -> None:
        write = self._put_op(op, sources)
        if write is not None:
            self.mem.apply([write])

    def _put_op(self, op: PutOp, sources: Sequence[tuple[str, Sequence[int]]] = ()
                ) -> AnyOp | None:
        """The memory operation of a put (None: a delete of an item that is not there)."""
        ns = self._ns(op.namespace)
        memory_id = _key_id(op.key)
        if op.value is None:
            if self.backend.state(ns).get(memory_id) is None:
                return None
            return self.mem.forget_op([memory_id], namespace=ns, reason="deleted")
        ttl = op.ttl  # BaseStore.put resolved the default (None: no expiry)
        if op.index is False:
            paths: tuple[str, ...] | None = ()
        else:
            fields = op.index if op.index else self._fields
            paths = tuple("value" if f == "$" else f"value.{f}" for f in fields)
        return self.mem.propose_op({"key": op.key, "value": op.value, "ttl": ttl},
                                   kind="item", sources=sources, namespace=ns,
                                   memory_id=memory_id, dedupe=False, index=paths,
                                   expires_at=None if ttl is None else
                                   self._now() + int(ttl * _MINUTE_MS))

    def _search(self, op: SearchOp, touches: list[tuple[Namespace, str, int]]
                ) -> list[SearchItem]:
        prefix = op.namespace_prefix
        candidates: list[tuple[tuple[str, ...], Namespace, Version, Version]] = []
        for ns in self.backend.namespaces():
            labels = self._labels(ns)
            if labels is None or labels[:len(prefix)] != tuple(prefix):
                continue
            for cur, first in self._items(ns).values():
                if _filtered(thaw(cur.content)["value"], op.filter):
                    candidates.append((labels, ns, cur, first))
        scored: list[tuple[float | None, tuple[str, ...], Namespace, Version, Version]]
        if op.query and self.embeddings is not None:
            q = self.embeddings.embed_query(op.query)
            scored = [(self._score(ns, v, q), labels, ns, v, f)
                      for labels, ns, v, f in candidates]
            scored.sort(key=lambda t: (t[0] is None, -(t[0] or 0.0)))
        else:
            scored = [(None, labels, ns, v, f) for labels, ns, v, f in candidates]
            scored.sort(key=lambda t: (-t[3].valid_from, t[1], str(thaw(t[3].content)["key"])))
        page = scored[op.offset:op.offset + op.limit]
        refresh = self._refresh(op.refresh_ttl)
        for _, _, ns, v, _ in page:
            self._maybe_touch(ns, v, refresh, touches)
        return [self._item(labels, v, f, score, search=True)  # type: ignore[misc]
                for score, labels, _, v, f in page]

    def _score(self, ns: Namespace, v: Version, query: list[float]) -> float | None:
        import numpy as np

        texts = [t for t in index_texts(v.content, v.index) if t]
        if not texts:
            return None
        key = (ns.key, v.ref)
        cache = self._vectors.setdefault(ns.key, (None, {}))[1]
        vecs = cache.get(str(key))
        if vecs is None:
            vecs = cache[str(key)] = self.embeddings.embed_documents(texts)
        m = np.asarray(vecs, dtype=float)
        qv = np.asarray(query, dtype=float)
        norms = np.linalg.norm(m, axis=1) * (np.linalg.norm(qv) or 1.0)
        norms[norms == 0] = 1.0
        return float(np.max(m @ qv / norms))

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for ns in self.backend.namespaces():
            labels = self._labels(ns)
            if labels is None or not self._items(ns):
                continue
            if all(_matches(c, labels) for c in op.match_conditions or ()):
                found.add(labels if op.max_depth is None else labels[:op.max_depth])
        return sorted(found)[op.offset:op.offset + op.limit]

    # -- TTL ------------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Forget every expired item of this store's user; how many."""
        n = 0
        now = self._now()
        for ns in self.backend.namespaces():
            if self._labels(ns) is None:
                continue
            expired = [m.id for m in self.backend.state(ns).memories.values()
                       if m.current.forgotten is None and m.current.expires_at is not None
                       and now >= m.current.expires_at]
            if expired:
                self.mem.forget(expired, namespace=ns, reason="expired")
                n += len(expired)
        return n

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)


def _filtered(value: Any, flt: Any) -> bool:
    """LangGraph's filter, with dotted keys reaching into nested objects (``user.role``)
    when the value has no such literal key, as SqliteStore reads them."""
    if not flt:
        return True
    if not isinstance(value, dict):
        return False
    resolved: dict[str, Any] = {}
    for key in flt:
        if key in value or "." not in key:
            resolved[key] = value.get(key)
            continue
        node: Any = value
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        resolved[key] = node
    return matches(resolved, flt)


def _matches(condition: MatchCondition, labels: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(path) > len(labels):
        return False
    part = labels[:len(path)] if condition.match_type == "prefix" else labels[-len(path):]
    return all(p == "*" or p == label for p, label in zip(path, part, strict=True))
