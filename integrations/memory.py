"""Long-term memory for agents: the plain Python API and its backends (docs/adr/0030).

A :class:`MemoryClient` is what a harness, a tool or an adapter holds::

    from sessionstream.integrations.memory import InMemoryBackend, MemoryClient
    from sessionstream.core.memory import Actor, Role

    mem = MemoryClient(InMemoryBackend("default"),        # FleetBackend.from_settings()
                       Actor(Role.AGENT, "support-bot", user="ada"))
    v = mem.propose("Prefers a window seat", kind="preference",
                    sources=[("sess-1", [4])])           # the events it comes from
    hits = mem.search("window seat")                      # ranked, this user's namespace
    mem.recall(handle, "seat preference")                 # search + log memory/recall
    mem.forget_session("sess-1")                          # lineage: what only it supports

Every write goes through the policy (``DEFAULT_POLICY``: who may write what where, and
what waits for a confirmation) before anything is appended; every read is of one
namespace (there is no cross-namespace path for a bug to leak through). The client
never sees Kafka or Redis: a :class:`MemoryBackend` does.

Backends, one contract (``tests/contract/memory_contract.py`` runs over both)::

    InMemoryBackend(tenant)        the pure fold in this process (tests, notebooks)
    FleetBackend(settings, ...)    the tenant's memory topic + Redis rows: a write is
                                   durable and folded into its namespace's row before it
                                   returns, so any process finds it at once
"""

from __future__ import annotations

import builtins
import importlib
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sessionstream.core.memory.policy as mpolicy
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.events import Draft as EventDraft
from sessionstream.core.events import SurfaceOp
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, thaw
from sessionstream.core.memory.errors import MemoryLogError, MemoryRefused
from sessionstream.core.memory.fold import MemoryState
from sessionstream.core.memory.model import (
    Actor,
    ActorRef,
    AnyOp,
    Confirm,
    Draft,
    Extractor,
    Forget,
    Method,
    Namespace,
    Propose,
    Ref,
    Role,
    Scope,
    Source,
    Supersede,
    Touch,
    Version,
)
from sessionstream.core.memory.search import (
    Bm25Index,
    Embedder,
    Hit,
    fuse,
    index_texts,
    matches,
)
from sessionstream.integrations.memory_embed import default_embedder

#: the fold module (the package exports a function of the same name)
mfold = importlib.import_module("sessionstream.core.memory.fold")

__all__ = ["FleetBackend", "InMemoryBackend", "LineageCascade", "MemoryBackend",
           "MemoryClient", "MemoryHit", "MemoryNotFound", "Searcher"]

SYSTEM = ActorRef(Role.OPERATOR, "sessionstream-memory")


class MemoryNotFound(MemoryLogError):
    """No memory with that id in the namespace (or not one this actor may see)."""

    def __init__(self, memory_id: str, namespace: str) -> None:
        self.memory_id = memory_id
        super().__init__(f"no memory {memory_id!r} in namespace {namespace!r} (list them: "
                         "`sessionstream memory list`)")


# ------------------------------------------------------------------------------ backends


class MemoryBackend(ABC):
    """Where a tenant's memory operations go and its namespace states come from."""

    tenant: str

    @abstractmethod
    def append(self, op: AnyOp) -> MemoryState:
        """Append ``op`` durably and return its namespace's state with it folded in (and
        every operation before it): read-your-writes for every process."""

    def append_many(self, ops: Sequence[AnyOp]) -> list[MemoryState]:
        """Append ``ops`` in order; each one's namespace state after the whole batch.
        Not atomic: an error leaves the operations appended before it in place (each is
        idempotent by its op id, so appending the batch again is safe)."""
        states = [self.append(op) for op in ops]
        last = {op.namespace.key: st for op, st in zip(ops, states, strict=True)}
        return [last[op.namespace.key] for op in ops]

    @abstractmethod
    def state(self, namespace: Namespace) -> MemoryState:
        """The namespace's current state (every operation appended before this call)."""

    @abstractmethod
    def namespaces(self) -> list[Namespace]:
        """The tenant's namespaces that hold or held memories."""

    @abstractmethod
    def citing(self, session_id: str) -> list[Namespace]:
        """The namespaces with a version citing ``session_id``."""

    @abstractmethod
    def mark_deleted(self, session_id: str) -> None:
        """Remember ``session_id`` as deleted (writers refuse to cite it from now on)."""

    @abstractmethod
    def deleted(self, session_ids: Iterable[str]) -> set[str]:
        """Which of ``session_ids`` are deleted."""

    def hold_on(self, namespace: Namespace) -> str | None:
        """The reason of a legal hold on the namespace or its tenant (None: none)."""
        return None

    def place_hold(self, namespace: Namespace, reason: str, principal: str) -> None:
        raise MemoryLogError("this backend keeps no legal holds")

    def release_hold(self, namespace: Namespace) -> bool:
        return False

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release clients (nothing is held between calls otherwise)."""


class InMemoryBackend(MemoryBackend):
    """The pure fold in this process: the reference every backend equals."""

    def __init__(self, tenant: str = "default") -> None:
        self.tenant = tenant
        self._states: dict[str, MemoryState] = {}
        self._ns: dict[str, Namespace] = {}
        self._deleted: set[str] = set()
        self._lock = threading.Lock()
        #: operation ids whose content keys a forget destroyed (the fleet shreds them)
        self.shredded: set[str] = set()
        self._holds: dict[str, str] = {}  # namespace key ("" the tenant) -> reason

    def _check(self, namespace: Namespace) -> None:
        if namespace.tenant != self.tenant:
            raise MemoryRefused("this backend", namespace.key, "reach another tenant",
                                f"it serves tenant {self.tenant!r}")

    def append(self, op: AnyOp) -> MemoryState:
        self._check(op.namespace)
        followups: list[str] = []
        with self._lock:
            key = op.namespace.key
            before = self._states.get(key, mfold.init())
            after = mfold.apply(before, op)
            self.shredded |= {o for _, o in mfold.newly_forgotten(before, after)}
            self._states[key] = after
            self._ns[key] = op.namespace
            cited = {s.session_id for i, m in after.memories.items()
                     if before.memories.get(i) is not m for v in m.versions
                     for s in v.sources}
            followups = sorted((cited & self._deleted) - after.deleted_sessions)
        for sid in followups:  # a proposal that raced a deletion
            after = self.append(_forget_session_op(op.namespace, sid, op.time))
        return after

    def state(self, namespace: Namespace) -> MemoryState:
        self._check(namespace)
        with self._lock:
            return self._states.get(namespace.key, mfold.init())

    def namespaces(self) -> list[Namespace]:
        with self._lock:
            return [self._ns[k] for k in sorted(self._ns)]

    def citing(self, session_id: str) -> list[Namespace]:
        with self._lock:
            return [self._ns[k] for k, s in sorted(self._states.items())
                    if any(src.session_id == session_id for m in s.memories.values()
                           for v in m.versions for src in v.sources)]

    def mark_deleted(self, session_id: str) -> None:
        with self._lock:
            self._deleted.add(session_id)

    def deleted(self, session_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return set(session_ids) & self._deleted

    def hold_on(self, namespace: Namespace) -> str | None:
        return self._holds.get(namespace.key) or self._holds.get("")

    def place_hold(self, namespace: Namespace | None, reason: str, principal: str) -> None:
        self._holds["" if namespace is None else namespace.key] = reason

    def release_hold(self, namespace: Namespace | None) -> bool:
        return self._holds.pop("" if namespace is None else namespace.key, None) is not None


def _forget_session_op(namespace: Namespace, session_id: str, at: int) -> Forget:
    return Forget(op_id=str(uuid.uuid4()), namespace=namespace, time=at, actor=SYSTEM,
                  source_session=session_id, reason="session deleted")


class FleetBackend(MemoryBackend):
    """The tenant's memory topic and its Redis rows (docs/adr/0030, amended).

    ``append`` produces the sealed record (acks=all, flushed), then folds the namespace's
    records up to it into the namespace's row (the rows and the worker's progress say
    where folding stands; only what lies past it is read back from the topic) and
    returns that state: a search in any process right after it finds the memory.
    ``state`` is one HGET of the row's offset, and the row loaded when it moved.
    """

    def __init__(self, settings: Any, key_store: Any = None, *, encryption: bool | None = None,
                 redis: Any = None) -> None:
        from sessionstream.governance.memory import MemorySealer
        from sessionstream.producers.memory_log import MemoryLog

        self.settings = settings
        self.tenant = settings.tenant
        enabled = settings.encryption if encryption is None else encryption
        self.sealer = MemorySealer(key_store, settings.tenant,
                                   enabled=enabled and key_store is not None)
        self.log = MemoryLog(settings)
        self._redis = redis
        self._rows: Any = None
        self._cache: dict[str, tuple[int, MemoryState]] = {}
        self._lock = threading.RLock()
        self._installing: dict[int, threading.Lock] = {}
        #: the memory keys this backend's writes destroyed (forgotten content)
        self.shredded: set[str] = set()

    @classmethod
    def from_settings(cls, settings: Any = None) -> FleetBackend:
        """From ``Settings`` (default: the environment), with the tenant's key store."""
        from sessionstream.core.settings import Settings
        from sessionstream.producers.writer import WriterConfig

        s = settings if settings is not None else Settings.from_env()
        cipher = WriterConfig.from_settings(s).cipher
        return cls(s, None if cipher is None else cipher.store,
                   encryption=cipher is not None and bool(cipher.enabled))

    def rows(self) -> Any:
        from sessionstream import redisconn
        from sessionstream.producers.memory_log import MemoryRows

        with self._lock:
            if self._rows is None:
                if self._redis is None:
                    self._redis = redisconn.sync_redis(self.settings.redis_url,
                                                       cluster=self.settings.redis_cluster)
                self._rows = MemoryRows(self._redis, self.settings.keys, self.sealer)
            return self._rows

    def _check(self, namespace: Namespace) -> None:
        if namespace.tenant != self.tenant:
            raise MemoryRefused("this backend", namespace.key, "reach another tenant",
                                f"it serves tenant {self.tenant!r}")

    def append(self, op: AnyOp) -> MemoryState:
        return self.append_many([op])[0]

    def append_many(self, ops: Sequence[AnyOp]) -> list[MemoryState]:
        """Produce every record, flush once, then fold each partition once up to the
        batch's last record there (the batch's records in hand, only other writers'
        records in between read back)."""
        from sessionstream.governance.memory import key_name
        from sessionstream.producers.memory_log import NamespaceFolder, encode_op

        if not ops:
            return []
        for op in ops:
            self._check(op.namespace)
        rows = self.rows()
        self.sealer.create_keys(key_name(op.namespace, op.op_id) for op in ops
                                if isinstance(op, Propose | Supersede))
        done = self.log.append_many([(op.namespace, encode_op(op, self.sealer)) for op in ops])
        owned: dict[int, dict[int, AnyOp]] = {}
        for op, at in zip(ops, done, strict=True):
            owned.setdefault(at.partition, {})[at.offset] = op
        states: dict[str, MemoryState] = {}
        followups: list[tuple[Namespace, str]] = []
        for partition, mine in sorted(owned.items()):
            folder = NamespaceFolder(self.log, rows)
            wanted = {op.namespace.key: op.namespace for op in mine.values()}
            # one installer of a partition at a time in this process: the next one finds
            # the records it would read already folded (other processes: the row's
            # compare-and-set)
            with self._partition_lock(partition):
                with self._lock:
                    cached = {k: self._cache[k] for k in wanted if k in self._cache}
                got, owed = folder.install_many(partition, max(mine), mine, cached)
            self.shredded |= folder.shredded
            followups += owed
            with self._lock:
                for key in wanted:
                    self._cache[key] = got[key]
                    states[key] = got[key][1]
        for ns, sid in followups:  # a proposal that raced a deletion: forget it now
            after = self.append(_forget_session_op(ns, sid, ops[-1].time))
            if ns.key in states:
                states[ns.key] = after
        return [states[op.namespace.key] for op in ops]

    def _partition_lock(self, partition: int) -> threading.Lock:
        with self._lock:
            return self._installing.setdefault(partition, threading.Lock())

    def state(self, namespace: Namespace) -> MemoryState:
        self._check(namespace)
        rows = self.rows()
        offset = rows.offset(namespace)
        with self._lock:
            hit = self._cache.get(namespace.key)
            if hit is not None and hit[0] == offset:
                return hit[1]
        at, state = rows.load(namespace)
        with self._lock:
            self._cache[namespace.key] = (at, state)
        return state

    def namespaces(self) -> list[Namespace]:
        return [n for n in self.rows().namespaces() if n.tenant == self.tenant]

    def citing(self, session_id: str) -> list[Namespace]:
        return self.rows().citing(session_id)

    def mark_deleted(self, session_id: str) -> None:
        self.rows().mark_deleted(session_id)

    def _hold_scope(self, namespace: Namespace) -> str:
        return f"memory-ns/{namespace.digest}"

    def hold_on(self, namespace: Namespace) -> str | None:
        store = self.sealer.store
        if store is None:
            return None
        hold = store.hold_on(self.tenant, self._hold_scope(namespace))
        return None if hold is None else (hold.reason or "legal hold")

    def place_hold(self, namespace: Namespace, reason: str, principal: str) -> None:
        if self.sealer.store is None:
            raise MemoryLogError("legal holds live in the key store: this tenant has none")
        self.sealer.store.place_hold(self.tenant, self._hold_scope(namespace), reason=reason,
                                     principal=principal)

    def release_hold(self, namespace: Namespace) -> bool:
        store = self.sealer.store
        return store is not None and store.release_hold(
            self.tenant, self._hold_scope(namespace)) is not None

    def deleted(self, session_ids: Iterable[str]) -> set[str]:
        return self.rows().deleted(session_ids)

    def close(self) -> None:
        self.log.close()
        if self._redis is not None:
            self._redis.close()
            self._redis = None
            self._rows = None


# ------------------------------------------------------------------------------ search


@dataclass(frozen=True)
class MemoryHit:
    """One search result: the version served and its fused score."""

    version: Version
    score: float
    namespace: Namespace

    def to_json(self) -> dict[str, Any]:
        v = self.version
        return {"id": v.ref.id, "ref": str(v.ref), "namespace": self.namespace.key,
                "kind": v.kind, "content": thaw(v.content), "score": round(self.score, 6),
                "status": v.status.value,
                "sources": [s.to_json() for s in v.sources]}


class Searcher:
    """The search index of one namespace state, built in this process (BM25 over the
    indexed texts always; exact cosine over the embedder's vectors with numpy; fused by
    reciprocal rank). Nothing is stored: a forgotten memory's text leaves with the state
    that no longer holds it."""

    def __init__(self, state: MemoryState, embedder: Embedder, *,
                 pending: bool = False, now: int | None = None) -> None:
        self.versions = {v.ref.id: v for v in state.current(now=now, pending=pending)
                         if v.content is not None}
        self.bm25 = Bm25Index()
        ids: list[str] = []
        texts: list[str] = []
        for memory_id, v in sorted(self.versions.items()):
            found = [t for t in index_texts(v.content, v.index) if t]
            if not found:
                continue
            self.bm25.add(memory_id, found)
            ids += [memory_id] * len(found)
            texts += found
        self.embedder = embedder
        self._owners = ids
        self._matrix: Any = None
        if texts:
            import numpy as np

            m = np.asarray(embedder.embed(texts), dtype=np.float32)
            norms = np.linalg.norm(m, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            self._matrix = m / norms

    def vector(self, query: str, k: int, among: set[str] | None) -> list[Hit]:
        if self._matrix is None:
            return []
        import numpy as np

        q = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        n = float(np.linalg.norm(q))
        if n == 0:
            return []
        scores = self._matrix @ (q / n)
        best: dict[str, float] = {}
        for i in np.argsort(-scores)[: max(4 * k, k + 16)].tolist():
            owner = self._owners[i]
            if among is not None and owner not in among:
                continue
            s = float(scores[i])
            if s > best.get(owner, -2.0):
                best[owner] = s
        if among is not None and len(best) < k:  # a filter left too few: all of them
            for i, owner in enumerate(self._owners):
                if owner in among and float(scores[i]) > best.get(owner, -2.0):
                    best[owner] = float(scores[i])
        hits = [Hit(i, s) for i, s in best.items() if s > 0]
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:k]

    def search(self, query: str | None, k: int = 10, flt: Mapping[str, Any] | None = None,
               mode: str = "hybrid", offset: int = 0) -> list[tuple[Version, float]]:
        among = None if not flt else {i for i, v in self.versions.items()
                                      if matches(v.content, flt)}
        if not query:
            ids = sorted(self.versions if among is None else among)
            return [(self.versions[i], 0.0) for i in ids[offset:offset + k]]
        want = k + offset
        rankings = []
        if mode in ("hybrid", "lexical"):
            rankings.append(self.bm25.search(query, want, among))
        if mode in ("hybrid", "vector"):
            rankings.append(self.vector(query, want, among))
        if mode not in ("hybrid", "lexical", "vector"):
            raise SessionStreamError(f"search mode {mode!r}: use hybrid, lexical or vector")
        hits = fuse(rankings, want) if len(rankings) > 1 else rankings[0][:want]
        return [(self.versions[h.id], h.score) for h in hits[offset:offset + k]]


class SearcherCache:
    """Namespace indexes by (namespace, pending, embedder), each kept while its namespace
    state is the one it was built from; least recently used out first. Thread-safe."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, bool, str], tuple[MemoryState, Searcher]] = \
            OrderedDict()

    def get(self, key: tuple[str, bool, str], state: MemoryState) -> Searcher | None:
        with self._lock:
            hit = self._kept.get(key)
            if hit is None or hit[0] is not state:
                return None
            self._kept.move_to_end(key)
            return hit[1]

    def put(self, key: tuple[str, bool, str], state: MemoryState,
            searcher: Searcher) -> Searcher:
        with self._lock:
            self._kept[key] = (state, searcher)
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return searcher


# ------------------------------------------------------------------------------ the client


SourceLike = Source | tuple[str, Sequence[int]] | Mapping[str, Any]


def _source(s: SourceLike) -> Source:
    if isinstance(s, Source):
        return s
    if isinstance(s, Mapping):
        return Source.from_json(dict(s), "sources[]")
    sid, seqs = s
    return Source.from_json({"session_id": sid, "seqs": list(seqs)}, "sources[]")


@dataclass
class MemoryClient:
    """The plain API over a :class:`MemoryBackend`, acting as ``actor`` under ``policy``.

    ``namespace`` (every method): a :class:`Namespace`, or None for the actor's own
    user namespace (``<tenant>/user/<actor.user>``) with ``labels`` appended.
    """

    backend: MemoryBackend
    actor: Actor
    policy: mpolicy.Policy = mpolicy.DEFAULT_POLICY
    #: the search embedder; the process's configured one (``Env.MEMORY_EMBEDDER``)
    embedder: Embedder = field(default_factory=default_embedder)
    clock: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    ids: Callable[[], str] = field(default=lambda: str(uuid.uuid4()))
    #: the namespace indexes this client reuses (share one among the clients of a
    #: service: an index is rebuilt only when its namespace changes)
    searchers: SearcherCache = field(default_factory=lambda: SearcherCache(), repr=False)

    # -- namespaces -----------------------------------------------------------------
    def namespace(self, namespace: Namespace | None = None, labels: Sequence[str] = (),
                  *, scope: Scope = Scope.USER, owner: str | None = None) -> Namespace:
        if namespace is not None:
            return namespace
        who = owner if owner is not None else self.actor.owner_in(scope)
        if who is None:
            raise MemoryRefused(str(self.actor), f"{self.backend.tenant}/{scope.value}/?",
                                "use a namespace", f"the actor acts for no {scope.value}: "
                                "pass namespace= or bind the actor (Actor(user=...))")
        return Namespace(self.backend.tenant, scope, who, tuple(labels))

    def _readable(self, ns: Namespace) -> None:
        """Reads are bound like writes: an actor reads only namespaces it is bound to."""
        why = mpolicy.binding(self.actor, ns)
        if why is not None:
            raise MemoryRefused(str(self.actor), ns.key, "read memories", why)

    # -- writing --------------------------------------------------------------------
    def _draft(self, content: JsonValue, kind: str, sources: Iterable[SourceLike],
               extractor: Extractor | None, index: Sequence[str] | None,
               expires_at: int | None) -> Draft:
        srcs = tuple(_source(s) for s in sources)
        gone = self.backend.deleted(s.session_id for s in srcs)
        if gone:
            raise MemoryRefused(str(self.actor), "-", "cite deleted sessions",
                                f"{', '.join(sorted(gone))} deleted: a memory never cites "
                                "a deleted session")
        return Draft(kind=kind, content=content, sources=srcs,
                     extractor=extractor or Extractor(Method.EXPLICIT, self.actor.id),
                     index=None if index is None else tuple(index), expires_at=expires_at)

    def _ref(self) -> ActorRef:
        return ActorRef(self.actor.role, self.actor.id)

    def propose(self, content: JsonValue, *, kind: str = "note",
                sources: Iterable[SourceLike] = (), namespace: Namespace | None = None,
                labels: Sequence[str] = (), memory_id: str | None = None,
                extractor: Extractor | None = None, dedupe: bool = True,
                index: Sequence[str] | None = None, expires_at: int | None = None) -> Version:
        """Write a memory (or, ``memory_id`` existing, a new version of it); returns the
        version that holds it (a duplicate of a current memory: that one)."""
        op = self.propose_op(content, kind=kind, sources=sources, namespace=namespace,
                             labels=labels, memory_id=memory_id, extractor=extractor,
                             dedupe=dedupe, index=index, expires_at=expires_at)
        return self._placed(self.backend.append(op), op.memory_id, op.op_id, op.namespace)

    def propose_op(self, content: JsonValue, *, kind: str = "note",
                   sources: Iterable[SourceLike] = (), namespace: Namespace | None = None,
                   labels: Sequence[str] = (), memory_id: str | None = None,
                   extractor: Extractor | None = None, dedupe: bool = True,
                   index: Sequence[str] | None = None, expires_at: int | None = None
                   ) -> Propose:
        """:meth:`propose` as an operation for :meth:`apply` (authorized now, not
        written)."""
        ns = self.namespace(namespace, labels)
        decision = mpolicy.require_write(self.policy, self.actor, ns, kind)
        draft = self._draft(content, kind, sources, extractor, index, expires_at)
        return Propose(op_id=self.ids(), namespace=ns, time=self.clock(), actor=self._ref(),
                       memory_id=memory_id or self.ids(), draft=draft,
                       status=_status(decision), policy=self.policy.version, dedupe=dedupe)

    def apply(self, ops: Sequence[AnyOp]) -> builtins.list[MemoryState]:
        """Write operations built by the ``*_op`` methods in one batch (one flush, one
        fold per partition); each one's namespace state after the batch. Not atomic: an
        error leaves the operations before it written (appending again is idempotent).
        Raises :class:`MemoryRefused` if the fold refused a proposal."""
        states = self.backend.append_many(ops)
        for op, state in zip(ops, states, strict=True):
            if isinstance(op, Propose | Supersede):
                self._placed(state, op.memory_id, op.op_id, op.namespace)
        return states

    def supersede(self, targets: Sequence[str], content: JsonValue, *, kind: str = "note",
                  sources: Iterable[SourceLike] = (), namespace: Namespace | None = None,
                  labels: Sequence[str] = (), memory_id: str | None = None,
                  extractor: Extractor | None = None,
                  index: Sequence[str] | None = None) -> Version:
        """A memory that replaces ``targets`` (a contradiction or a refinement)."""
        ns = self.namespace(namespace, labels)
        decision = mpolicy.require_write(self.policy, self.actor, ns, kind)
        draft = self._draft(content, kind, sources, extractor, index, None)
        mid = memory_id or self.ids()
        op = Supersede(op_id=self.ids(), namespace=ns, time=self.clock(), actor=self._ref(),
                       memory_id=mid, targets=tuple(targets), draft=draft,
                       status=_status(decision), policy=self.policy.version)
        return self._placed(self.backend.append(op), mid, op.op_id, ns)

    def _placed(self, state: MemoryState, memory_id: str, op_id: str,
                ns: Namespace) -> Version:
        memory = state.get(memory_id)
        if memory is None:
            why = next((r.detail for r in reversed(state.rejections) if r.op_id == op_id),
                       "not placed")
            raise MemoryRefused(str(self.actor), ns.key, "write this memory", why)
        return memory.current

    def confirm(self, ref: Ref | str, *, namespace: Namespace | None = None,
                labels: Sequence[str] = (), accept: bool = True) -> Version:
        ns = self.namespace(namespace, labels)
        mpolicy.require_confirm(self.policy, self.actor, ns)
        r = ref if isinstance(ref, Ref) else _as_ref(ref, self.backend.state(ns))
        state = self.backend.append(Confirm(op_id=self.ids(), namespace=ns,
                                            time=self.clock(), actor=self._ref(), ref=r,
                                            accept=accept))
        memory = state.get(r.id)
        if memory is None:
            raise MemoryNotFound(r.id, ns.key)
        return memory.current

    def reject(self, ref: Ref | str, *, namespace: Namespace | None = None,
               labels: Sequence[str] = ()) -> Version:
        return self.confirm(ref, namespace=namespace, labels=labels, accept=False)

    def forget(self, memory_ids: Sequence[str], *, namespace: Namespace | None = None,
               labels: Sequence[str] = (), reason: str = "forgotten") -> list[str]:
        """Forget memories by id (every version's content); returns the ids forgotten."""
        op = self.forget_op(memory_ids, namespace=namespace, labels=labels, reason=reason)
        before = self.backend.state(op.namespace)
        self.backend.append(op)
        return [before.resolve(m) for m in memory_ids]

    def forget_op(self, memory_ids: Sequence[str], *, namespace: Namespace | None = None,
                  labels: Sequence[str] = (), reason: str = "forgotten") -> Forget:
        """:meth:`forget` as an operation for :meth:`apply` (authorized and checked now:
        every id exists, no hold)."""
        ns = self.namespace(namespace, labels)
        mpolicy.require_forget(self.policy, self.actor, ns)
        self._not_held(ns)
        state = self.backend.state(ns)
        for mid in memory_ids:
            if state.get(mid) is None:
                raise MemoryNotFound(mid, ns.key)
        return Forget(op_id=self.ids(), namespace=ns, time=self.clock(), actor=self._ref(),
                      memory_ids=tuple(memory_ids), reason=reason)

    def _not_held(self, ns: Namespace) -> None:
        from sessionstream.core.errors import LegalHold

        why = self.backend.hold_on(ns)
        if why is not None:
            raise LegalHold(f"memory namespace {ns.key}", why)

    def hold(self, reason: str, *, namespace: Namespace | None = None,
             labels: Sequence[str] = ()) -> None:
        """Place a legal hold on the namespace: nothing in it is forgotten until released
        (a deletion's lineage forget reports it as held)."""
        ns = self.namespace(namespace, labels)
        if self.actor.role is not Role.OPERATOR:
            raise MemoryRefused(str(self.actor), ns.key, "place a legal hold", "operators only")
        self.backend.place_hold(ns, reason, self.actor.id)

    def release(self, *, namespace: Namespace | None = None, labels: Sequence[str] = ()
                ) -> bool:
        ns = self.namespace(namespace, labels)
        if self.actor.role is not Role.OPERATOR:
            raise MemoryRefused(str(self.actor), ns.key, "release a legal hold",
                                "operators only")
        return self.backend.release_hold(ns)

    def sweep(self, retention: Mapping[str, int] | None = None, *,
              now: int | None = None) -> builtins.list[dict[str, Any]]:
        """Forget what is past its time in every namespace of the tenant: versions whose
        ``expires_at`` passed (reason ``expired``), and memories of a kind older than its
        retention (``retention``: kind -> ms since ``valid_from``; reason ``retention``).
        Held namespaces are skipped (reported ``held``). An operator's job."""
        if self.actor.role is not Role.OPERATOR:
            raise MemoryRefused(str(self.actor), self.backend.tenant, "sweep memories",
                                "only an operator of the tenant")
        at = self.clock() if now is None else now
        limits = dict(retention or {})
        out: builtins.list[dict[str, Any]] = []
        for ns in self.backend.namespaces():
            state = self.backend.state(ns)
            due: dict[str, builtins.list[str]] = {"expired": [], "retention": []}
            for memory in state.memories.values():
                cur = memory.current
                if cur.forgotten is not None:
                    continue
                if cur.expires_at is not None and at >= cur.expires_at:
                    due["expired"].append(memory.id)
                elif cur.kind in limits and at - cur.valid_from > limits[cur.kind]:
                    due["retention"].append(memory.id)
            if not any(due.values()):
                continue
            held = self.backend.hold_on(ns)
            for reason, ids in due.items():
                if not ids:
                    continue
                if held is None:
                    self.backend.append(Forget(op_id=self.ids(), namespace=ns, time=at,
                                               actor=self._ref(),
                                               memory_ids=tuple(sorted(ids)), reason=reason))
                out.append({"namespace": ns.key, "ids": sorted(ids),
                            "action": "held" if held is not None else reason})
        return out

    def touch(self, memory_ids: Sequence[str], expires_at: int | None, *,
              namespace: Namespace | None = None, labels: Sequence[str] = ()) -> None:
        ns = self.namespace(namespace, labels)
        mpolicy.require_write(self.policy, self.actor, ns, "note")
        self.backend.append(Touch(op_id=self.ids(), namespace=ns, time=self.clock(),
                                  actor=self._ref(), memory_ids=tuple(memory_ids),
                                  expires_at=expires_at))

    def forget_session(self, session_id: str, *, reason: str = "session deleted"
                       ) -> dict[str, Any]:
        """Lineage: every namespace of the tenant citing ``session_id`` forgets what only
        it supports and drops it from the rest (an operator's act: deletion calls it)."""
        if self.actor.role is not Role.OPERATOR:
            raise MemoryRefused(str(self.actor), self.backend.tenant, "forget a session",
                                "only an operator of the tenant (deletion runs as one)")
        self.backend.mark_deleted(session_id)
        report: dict[str, Any] = {"namespaces": [], "forgotten": [], "narrowed": []}
        from sessionstream.core.memory.lineage import forget_plan

        report["held"] = []
        for ns in self.backend.citing(session_id):
            if self.backend.hold_on(ns) is not None:
                report["held"].append(ns.key)  # waits for the hold's release
                continue
            before = self.backend.state(ns)
            plan = forget_plan(before, session_id)
            self.backend.append(Forget(op_id=self.ids(), namespace=ns, time=self.clock(),
                                       actor=self._ref(), source_session=session_id,
                                       reason=reason))
            report["namespaces"].append(ns.key)
            report["forgotten"] += [str(r) for r in plan.forgotten]
            report["narrowed"] += [str(r) for r in plan.narrowed]
        return report

    # -- reading --------------------------------------------------------------------
    def list(self, *, namespace: Namespace | None = None, labels: Sequence[str] = (),
             pending: bool = False) -> builtins.list[Version]:
        ns = self.namespace(namespace, labels)
        self._readable(ns)
        return [v for v in self.backend.state(ns).current(now=self.clock(), pending=pending)
                if v.content is not None]

    def searcher(self, ns: Namespace, *, pending: bool = False) -> Searcher:
        state = self.backend.state(ns)
        key = (ns.key, pending, self.embedder.name)
        kept = self.searchers.get(key, state)
        if kept is not None:
            return kept
        return self.searchers.put(
            key, state, Searcher(state, self.embedder, pending=pending, now=self.clock()))

    def search(self, query: str | None, *, namespace: Namespace | None = None,
               labels: Sequence[str] = (), k: int = 5, filter: Mapping[str, Any] | None = None,
               mode: str = "hybrid", offset: int = 0, pending: bool = False
               ) -> builtins.list[MemoryHit]:
        ns = self.namespace(namespace, labels)
        self._readable(ns)
        return [MemoryHit(v, s, ns) for v, s in
                self.searcher(ns, pending=pending).search(query, k, filter, mode, offset)]

    def show(self, memory_id: str, *, namespace: Namespace | None = None,
             labels: Sequence[str] = ()) -> dict[str, Any]:
        ns = self.namespace(namespace, labels)
        self._readable(ns)
        memory = self.backend.state(ns).get(memory_id)
        if memory is None:
            raise MemoryNotFound(memory_id, ns.key)
        return {"namespace": ns.key, **memory.to_json()}

    def explain(self, memory_id: str, *, namespace: Namespace | None = None,
                labels: Sequence[str] = ()) -> dict[str, Any]:
        """Back to the source sessions and seqs, version by version (never the content)."""
        ns = self.namespace(namespace, labels)
        self._readable(ns)
        out = mfold.explain(self.backend.state(ns), memory_id)
        if out is None:
            raise MemoryNotFound(memory_id, ns.key)
        return out

    # -- model-visible means logged ---------------------------------------------------
    def recall_drafts(self, hits: Sequence[MemoryHit], query: str | None
                      ) -> builtins.list[EventDraft]:
        """The ``memory/recall`` events that log ``hits`` as shown to a model: one per
        memory (a context message on the surface), each one's content sealed under the
        key of the operation that placed that version."""
        from sessionstream.governance.memory import key_name

        recall_id = self.ids()
        out = []
        for rank, h in enumerate(hits):
            v = h.version
            content = v.content if isinstance(v.content, str) else canonical_dumps(
                thaw(v.content))
            out.append(EventDraft("memory/recall", {
                "recall_id": recall_id, "rank": rank, "namespace": h.namespace.key,
                "query": query or "", "ref": str(v.ref), "kind": v.kind,
                "score": round(h.score, 6), "key": key_name(h.namespace, v.op_id),
                "content": content}, surface_op=SurfaceOp.APPEND))
        return out

    def recall(self, handle: Any, query: str, *, namespace: Namespace | None = None,
               labels: Sequence[str] = (), k: int = 5, filter: Mapping[str, Any] | None = None
               ) -> builtins.list[MemoryHit]:
        """Search, and log what is shown to the model into ``handle``'s session (an
        ``integrations.store.SessionHandle``) as ``memory/recall`` events, one atomic
        write: a later rebuild of the request shows what the model saw then."""
        hits = self.search(query, namespace=namespace, labels=labels, k=k, filter=filter)
        if hits:
            handle.append_many(self.recall_drafts(hits, query))
        return hits


def _status(decision: mpolicy.Decision) -> Any:
    from sessionstream.core.memory.model import Confirmation

    return Confirmation.PENDING if decision.outcome is mpolicy.Outcome.CONFIRM \
        else Confirmation.ACCEPTED


def _as_ref(text: str, state: MemoryState) -> Ref:
    if "@" in text:
        return Ref.parse(text)
    memory = state.get(text)
    if memory is None:
        raise MemoryNotFound(text, state.namespace or "?")
    return memory.current.ref


class LineageCascade:
    """Governance's memory cascade (``governance.memory.MemoryCascade``) over a backend:
    what ``sessionstream delete`` does to long-term memory."""

    def __init__(self, backend: MemoryBackend) -> None:
        self.backend = backend

    def forget_session(self, session_id: str, *, principal: str, reason: str) -> Any:
        from sessionstream.governance.memory import MemoryForgetReport

        mem = MemoryClient(self.backend, Actor(Role.OPERATOR, principal,
                                               tenant=self.backend.tenant))
        shredded_before = len(getattr(self.backend, "shredded", ()))
        got = mem.forget_session(session_id, reason=reason)
        return MemoryForgetReport(got["namespaces"], got["forgotten"], got["narrowed"],
                                  len(getattr(self.backend, "shredded", ())) - shredded_before,
                                  got["held"])

    def sweep(self, retention: Mapping[str, int], *, principal: str) -> Any:
        mem = MemoryClient(self.backend, Actor(Role.OPERATOR, principal,
                                               tenant=self.backend.tenant))
        return mem.sweep(retention)
