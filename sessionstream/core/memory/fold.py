"""The fold of one namespace's memory operations: ``apply(state, op) -> state``.

Pure and deterministic: every reader of the memory topic folds a namespace's records in
partition order and reaches the same :class:`MemoryState`; a state dumped and loaded
(:func:`dump` / :func:`load`, what the worker keeps in Redis) folds on identically.
``apply`` returns the *same object* when an operation changes nothing (a redelivered
record, a duplicate proposal), as projection units do.

The rules (docs/adr/0030-long-term-memory.md, "The fold"):

- **Propose** places a draft: a new version of ``memory_id`` when it exists (its current
  version is superseded by it), else — with ``dedupe`` — into a current memory whose
  content is the same (the sources are united and the stronger status kept; the new id
  becomes an alias), else a new memory. The same content and sources again is a no-op:
  two nodes proposing one memory concurrently leave one memory, in whatever order the
  topic holds them.
- **Supersede** places its draft the same way, then invalidates each target's current
  version (``invalidated_at``, ``superseded_by``). A target already superseded is followed
  to its successor: the newest statement in the topic's order wins, and history keeps all.
- **Confirm** turns the current version confirmed or rejected; any other version is a
  :class:`Rejection` (``not_current``).
- **Forget** by id drops the content of every version of each memory (history included:
  a forgotten memory's text is nowhere in the state). By source session it applies
  :func:`~sessionstream.core.memory.lineage.forget_plan`: versions derived only from the
  session lose their content, others lose the session from their provenance, and the
  session is remembered as deleted, so a later proposal citing it cites it no more (or is
  rejected when nothing else supports it).
- **Touch** sets a new expiry on current versions.

Operations that cannot apply are recorded as :class:`Rejection` (the last
:data:`REJECTIONS_KEPT`, and a count by reason), never raised: the topic is the truth and
every reader must agree on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sessionstream.core.memory.errors import NamespaceMismatch
from sessionstream.core.memory.lineage import ForgetPlan, forget_plan
from sessionstream.core.memory.model import (
    STRENGTH,
    AnyOp,
    Confirm,
    Confirmation,
    Draft,
    Forget,
    Forgetting,
    Memory,
    Propose,
    Ref,
    Source,
    Supersede,
    Touch,
    Version,
    merge_sources,
)

#: Operation ids remembered per namespace to recognise a redelivered record. The topic's
#: consumer also skips records at or below its stored offset; this catches a producer's
#: retry that wrote one operation twice, which lands close to the first copy.
RECENT_OPS = 1024
#: Rejections kept in the state (the newest); counts cover all of them.
REJECTIONS_KEPT = 100
#: The version of the fold's rules and of the state's JSON (a change rebuilds from the topic).
STATE_VERSION = 2  # 2: versions remember the duplicate operations holding their content


@dataclass(frozen=True, slots=True)
class Rejection:
    """An operation the fold could not apply, and why (a code and a detail)."""

    op_id: str
    op: str
    reason: str  # unknown_memory | not_current | forgotten | deleted_source | target_gone
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"op_id": self.op_id, "op": self.op, "reason": self.reason,
                "detail": self.detail}


@dataclass(frozen=True, slots=True)
class MemoryState:
    """The memories of one namespace, folded from its operations."""

    namespace: str | None = None  # the namespace key, set by the first operation
    memories: Mapping[str, Memory] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)  # collapsed id -> kept id
    deleted_sessions: frozenset[str] = frozenset()
    applied: int = 0  # operations that changed the state
    recent_ops: tuple[str, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    rejected: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    #: content digest -> ids (sorted) of the memories whose current version holds it and
    #: is neither forgotten nor superseded: how a proposal finds its duplicate without a
    #: scan. Derived from ``memories`` (not dumped; :func:`load` rebuilds it).
    by_digest: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    def resolve(self, memory_id: str) -> str:
        """The id a memory is kept under (an alias names the memory it collapsed into)."""
        return self.aliases.get(memory_id, memory_id)

    def get(self, memory_id: str) -> Memory | None:
        return self.memories.get(self.resolve(memory_id))

    def version(self, ref: Ref) -> Version | None:
        memory = self.get(ref.id)
        if memory is None or not 1 <= ref.version <= len(memory.versions):
            return None
        return memory.versions[ref.version - 1]

    def current(self, *, now: int | None = None, pending: bool = False) -> list[Version]:
        """The versions readers are served, by memory id."""
        return [m.current for _, m in sorted(self.memories.items())
                if m.current.visible(now, pending=pending)]


def init() -> MemoryState:
    return MemoryState()


def fold(ops: Iterable[AnyOp], state: MemoryState | None = None) -> MemoryState:
    """``state`` (default: empty) with ``ops`` applied in order."""
    out = state if state is not None else init()
    for op in ops:
        out = apply(out, op)
    return out


def apply(state: MemoryState, op: AnyOp) -> MemoryState:
    """The state after ``op``; the same object when it changes nothing."""
    key = op.namespace.key
    if state.namespace is not None and state.namespace != key:
        raise NamespaceMismatch(state.namespace, key, op.op_id)
    if op.op_id in state.recent_ops:
        return state
    base = state if state.namespace is not None else replace(state, namespace=key)
    if isinstance(op, Propose):
        out = _propose(base, op)
    elif isinstance(op, Supersede):
        out = _supersede(base, op)
    elif isinstance(op, Confirm):
        out = _confirm(base, op)
    elif isinstance(op, Forget):
        out = _forget(base, op)
    elif isinstance(op, Touch):
        out = _touch(base, op)
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"not a memory operation: {type(op).__name__}")
    if out is base:
        return state
    recent = (*out.recent_ops, op.op_id)[-RECENT_OPS:]
    return replace(out, recent_ops=recent, applied=out.applied + 1)


# ------------------------------------------------------------------------------ internals


def _digest_of(memory: Memory | None) -> str | None:
    if memory is None:
        return None
    cur = memory.current
    return cur.digest if cur.forgotten is None and cur.superseded_by is None else None


def index_digests(memories: Mapping[str, Memory]) -> dict[str, tuple[str, ...]]:
    """The :attr:`MemoryState.by_digest` of ``memories``."""
    out: dict[str, list[str]] = {}
    for memory_id, memory in sorted(memories.items()):
        digest = _digest_of(memory)
        if digest is not None:
            out.setdefault(digest, []).append(memory_id)
    return {d: tuple(ids) for d, ids in out.items()}


def with_memory(state: MemoryState, *changed: Memory) -> MemoryState:
    """``state`` with the ``changed`` memories put in (one copy of the map, however many;
    the digest index kept in step)."""
    memories = dict(state.memories)
    index: dict[str, tuple[str, ...]] | None = None
    for memory in changed:
        old = _digest_of(memories.get(memory.id))
        memories[memory.id] = memory
        new = _digest_of(memory)
        if old == new:
            continue
        if index is None:
            index = dict(state.by_digest)
        if old is not None:
            kept = tuple(i for i in index.get(old, ()) if i != memory.id)
            if kept:
                index[old] = kept
            else:
                index.pop(old, None)
        if new is not None:
            index[new] = tuple(sorted({*index.get(new, ()), memory.id}))
    if index is None:
        return replace(state, memories=memories)
    return replace(state, memories=memories, by_digest=index)




def _set_version(memory: Memory, version: Version) -> Memory:
    versions = list(memory.versions)
    versions[version.ref.version - 1] = version
    return Memory(memory.id, tuple(versions))


def _reject(state: MemoryState, op: AnyOp, reason: str, detail: str) -> MemoryState:
    counts = dict(state.rejected)
    counts[reason] = counts.get(reason, 0) + 1
    entry = Rejection(op.op_id, op.TYPE.value, reason, detail)
    return replace(state, rejections=(*state.rejections, entry)[-REJECTIONS_KEPT:],
                   rejected=counts)


def _live_sources(state: MemoryState, draft: Draft) -> tuple[Source, ...] | None:
    """The draft's sources without deleted sessions; None when deletion took them all."""
    if not state.deleted_sessions or not draft.sources:
        return draft.sources
    kept = tuple(s for s in draft.sources if s.session_id not in state.deleted_sessions)
    return kept or None


def _find_same(state: MemoryState, digest: str) -> Memory | None:
    """A memory whose current version holds this content (rejected ones included: the
    user said no once, and a model proposing it again must not ask again)."""
    ids = state.by_digest.get(digest)
    return state.memories[ids[0]] if ids else None


def _merge_into(memory: Memory, sources: tuple[Source, ...], status: Confirmation,
                expires_at: int | None, op_id: str) -> Memory:
    cur = memory.current
    merged = merge_sources(cur.sources, sources)
    new_status = cur.status
    if cur.status in STRENGTH and STRENGTH[status] > STRENGTH[cur.status]:
        new_status = status
    expiry = None if cur.expires_at is None or expires_at is None else max(
        cur.expires_at, expires_at)
    # The duplicate's record holds the same content under its own key: remembered, so
    # forgetting the version shreds that copy too.
    copies = cur.copies if op_id in cur.content_ops else tuple(sorted({*cur.copies, op_id}))
    if (merged == cur.sources and new_status is cur.status and expiry == cur.expires_at
            and copies == cur.copies):
        return memory
    return _set_version(memory, replace(cur, sources=merged, status=new_status,
                                        expires_at=expiry, copies=copies))


def _place(state: MemoryState, op: Propose | Supersede, memory_id: str, draft: Draft,
           status: Confirmation, policy: str, dedupe: bool
           ) -> tuple[MemoryState, Ref | None]:
    """Put ``draft`` where :class:`Propose` says; returns the state and where it went
    (None: rejected, every source was a deleted session)."""
    sources = _live_sources(state, draft)
    if sources is None:
        return _reject(state, op, "deleted_source",
                       "every session it cites was deleted"), None
    digest = draft.digest
    kept_id = state.resolve(memory_id)
    existing = state.memories.get(kept_id)
    if existing is not None and existing.current.digest == digest and \
            existing.current.superseded_by is None:
        merged = _merge_into(existing, sources, status, draft.expires_at, op.op_id)
        out = state if merged is existing else with_memory(state, merged)
        return out, existing.current.ref
    if existing is None and dedupe:
        same = _find_same(state, digest)
        if same is not None:
            merged = _merge_into(same, sources, status, draft.expires_at, op.op_id)
            out = state if merged is same else with_memory(state, merged)
            if memory_id != same.id:
                aliases = dict(out.aliases)
                aliases[memory_id] = same.id
                out = replace(out, aliases=aliases)
            return out, same.current.ref
    number = 1 if existing is None else len(existing.versions) + 1
    ref = Ref(kept_id, number)
    version = Version(
        ref=ref, kind=draft.kind, content=draft.content, digest=digest, index=draft.index,
        sources=sources, extractor=draft.extractor, status=status, policy=policy,
        created_by=op.actor, op_id=op.op_id, valid_from=op.time,
        expires_at=draft.expires_at)
    if existing is None:
        return with_memory(state, Memory(kept_id, (version,))), ref
    prev = existing.current
    memory = existing
    if prev.forgotten is None and prev.superseded_by is None:
        memory = _set_version(memory, _invalidated(prev, ref, op.time))
        version = replace(version, supersedes=(prev.ref,))
    return with_memory(state, Memory(kept_id, (*memory.versions, version))), ref


def _invalidated(version: Version, by: Ref, at: int) -> Version:
    # Writers' clocks differ; the topic's order is the truth, so a successor written
    # with an earlier clock still ends the validity no earlier than it began.
    return replace(version, superseded_by=by, invalidated_at=max(at, version.valid_from))


# ------------------------------------------------------------------------------ operations


def _propose(state: MemoryState, op: Propose) -> MemoryState:
    out, _ = _place(state, op, op.memory_id, op.draft, op.status, op.policy, op.dedupe)
    return out


def _head(state: MemoryState, memory_id: str) -> Memory | None:
    """The memory that now stands for ``memory_id``: followed along ``superseded_by``."""
    seen: set[str] = set()
    memory = state.get(memory_id)
    while memory is not None and memory.current.superseded_by is not None:
        if memory.id in seen:  # pragma: no cover - supersede never builds a cycle
            return None
        seen.add(memory.id)
        memory = state.get(memory.current.superseded_by.id)
    return memory


def _supersede(state: MemoryState, op: Supersede) -> MemoryState:
    out, ref = _place(state, op, op.memory_id, op.draft, op.status, op.policy, True)
    if ref is None:
        return out
    invalidated: list[Ref] = []
    for target in op.targets:
        head = _head(out, target)
        if head is None:
            out = _reject(out, op, "target_gone", f"{target}: no such memory")
            continue
        if head.id == ref.id:
            continue  # the new content collapsed into the target's own successor
        cur = head.current
        if cur.forgotten is not None or cur.status is Confirmation.REJECTED:
            out = _reject(out, op, "target_gone", f"{target}: forgotten or rejected")
            continue
        out = with_memory(out, _set_version(head, _invalidated(cur, ref, op.time)))
        invalidated.append(cur.ref)
    if invalidated:
        placed = out.memories[ref.id]
        version = placed.versions[ref.version - 1]
        merged = tuple(sorted({*version.supersedes, *invalidated}))
        out = with_memory(out, _set_version(placed, replace(version, supersedes=merged)))
    return out


def _confirm(state: MemoryState, op: Confirm) -> MemoryState:
    memory = state.get(op.ref.id)
    if memory is None:
        return _reject(state, op, "unknown_memory", f"{op.ref.id}: no such memory")
    ref = Ref(memory.id, op.ref.version)
    if ref != memory.current.ref or not memory.current.live:
        cur = memory.current
        why = ("forgotten" if cur.forgotten is not None else
               "superseded" if cur.superseded_by is not None else
               "rejected" if cur.status is Confirmation.REJECTED else
               f"the current version is {cur.ref}")
        return _reject(state, op, "not_current", f"{ref}: {why}")
    cur = memory.current
    status = Confirmation.CONFIRMED if op.accept else Confirmation.REJECTED
    if cur.status is status:
        return state
    version = replace(cur, status=status, confirmed_by=op.actor, confirmed_at=op.time,
                      invalidated_at=None if op.accept else max(op.time, cur.valid_from))
    return with_memory(state, _set_version(memory, version))


def forgotten_version(version: Version, at: Forgetting) -> Version:
    """``version`` with its content and everything derived from it gone."""
    return replace(version, content=None, digest=None, forgotten=at,
                   invalidated_at=version.invalidated_at if version.invalidated_at
                   is not None else max(at.at, version.valid_from))


def _forget(state: MemoryState, op: Forget) -> MemoryState:
    at = Forgetting(op.time, op.op_id, op.reason or "forget")
    if op.source_session is not None:
        plan = forget_plan(state, op.source_session)
        out = _apply_plan(state, plan, at)
        if op.source_session in out.deleted_sessions:
            return out
        return replace(out, deleted_sessions=out.deleted_sessions | {op.source_session})
    out = state
    for memory_id in op.memory_ids:
        memory = out.get(memory_id)
        if memory is None:
            out = _reject(out, op, "unknown_memory", f"{memory_id}: no such memory")
            continue
        if all(v.forgotten is not None for v in memory.versions):
            continue
        versions = tuple(v if v.forgotten is not None else forgotten_version(v, at)
                         for v in memory.versions)
        out = with_memory(out, Memory(memory.id, versions))
    return out


def _apply_plan(state: MemoryState, plan: ForgetPlan, at: Forgetting) -> MemoryState:
    """``state`` with ``plan`` carried out (the same object when the plan is empty)."""
    if plan.empty:
        return state
    gone = set(plan.forgotten)
    narrow = set(plan.narrowed)
    changed = []
    for memory_id in sorted({r.id for r in gone | narrow}):
        memory = state.memories[memory_id]
        versions = []
        for v in memory.versions:
            if v.ref in gone:  # keeps its sources: the audit of why it was forgotten
                v = forgotten_version(v, at)
            elif v.ref in narrow:
                v = replace(v, sources=tuple(s for s in v.sources
                                             if s.session_id != plan.session_id))
            versions.append(v)
        changed.append(Memory(memory_id, tuple(versions)))
    return with_memory(state, *changed)


def _touch(state: MemoryState, op: Touch) -> MemoryState:
    out = state
    for memory_id in op.memory_ids:
        memory = out.get(memory_id)
        if memory is None:
            out = _reject(out, op, "unknown_memory", f"{memory_id}: no such memory")
            continue
        cur = memory.current
        if not cur.live:
            out = _reject(out, op, "not_current", f"{cur.ref}: not live")
            continue
        if cur.expires_at != op.expires_at:
            out = with_memory(out, _set_version(memory, replace(cur,
                                                                 expires_at=op.expires_at)))
    return out


# ------------------------------------------------------------------------------ reading


def explain(state: MemoryState, memory_id: str) -> dict[str, Any] | None:
    """``memory explain ID``: every version with its sources (sessions and seqs), how it
    was extracted, what it superseded and what superseded it, its confirmation, and, for
    forgotten content, when and why — never the content itself."""
    memory = state.get(memory_id)
    if memory is None:
        return None
    versions = []
    for v in memory.versions:
        versions.append({
            "ref": str(v.ref), "kind": v.kind, "status": v.status.value,
            "live": v.live, "valid_from": v.valid_from, "invalidated_at": v.invalidated_at,
            "superseded_by": None if v.superseded_by is None else str(v.superseded_by),
            "supersedes": [str(r) for r in v.supersedes],
            "sources": [s.to_json() for s in v.sources],
            "extractor": v.extractor.to_json(), "policy": v.policy,
            "written_by": v.created_by.to_json(), "op_id": v.op_id,
            "confirmed_by": None if v.confirmed_by is None else v.confirmed_by.to_json(),
            "confirmed_at": v.confirmed_at, "expires_at": v.expires_at,
            "forgotten": None if v.forgotten is None else v.forgotten.to_json(),
        })
    aliases = sorted(a for a, kept in state.aliases.items() if kept == memory.id)
    return {"namespace": state.namespace, "id": memory.id, "asked": memory_id,
            "aliases": aliases, "current": str(memory.current.ref), "live": memory.live,
            "versions": versions}


def newly_forgotten(before: MemoryState, after: MemoryState) -> list[tuple[Ref, str]]:
    """The versions whose content ``after`` no longer holds and ``before`` did, each with
    every operation whose record carries that content (:attr:`Version.content_ops`): the
    data keys a forget shreds, whatever forgot them (by id, by lineage, by retention)."""
    out: list[tuple[Ref, str]] = []
    if after is before:
        return out
    for memory_id, memory in sorted(after.memories.items()):
        old = before.memories.get(memory_id)
        if old is None or old is memory:
            continue
        for v_old, v_new in zip(old.versions, memory.versions, strict=False):
            if v_old.forgotten is None and v_new.forgotten is not None:
                out += [(v_new.ref, op) for op in v_old.content_ops]
    return out


def derived_from(state: MemoryState, session_id: str) -> list[Ref]:
    """Every version citing ``session_id`` (what deleting that session touches)."""
    return [v.ref for _, m in sorted(state.memories.items()) for v in m.versions
            if any(s.session_id == session_id for s in v.sources)]


def dump(state: MemoryState) -> dict[str, Any]:
    """The state as JSON (what the worker keeps between batches); :func:`load` inverts."""
    return {**dump_head(state),
            "memories": [m.to_json() for _, m in sorted(state.memories.items())]}


def dump_head(state: MemoryState) -> dict[str, Any]:
    """:func:`dump` without the memories (a row keeps each memory in its own field, so a
    write serializes only the memories that changed)."""
    return {
        "state_version": STATE_VERSION, "namespace": state.namespace,
        "aliases": dict(sorted(state.aliases.items())),
        "deleted_sessions": sorted(state.deleted_sessions), "applied": state.applied,
        "recent_ops": list(state.recent_ops),
        "rejections": [r.to_json() for r in state.rejections],
        "rejected": dict(sorted(state.rejected.items())),
    }


def load(obj: Mapping[str, Any]) -> MemoryState:
    """The state :func:`dump` wrote."""
    memories = {}
    for i, m in enumerate(obj["memories"]):
        versions = tuple(Version.from_json(v, f"memories[{i}].versions[{j}]")
                         for j, v in enumerate(m["versions"]))
        memories[m["id"]] = Memory(m["id"], versions)
    return MemoryState(
        namespace=obj["namespace"], memories=memories, by_digest=index_digests(memories),
        aliases=dict(obj["aliases"]),
        deleted_sessions=frozenset(obj["deleted_sessions"]), applied=obj["applied"],
        recent_ops=tuple(obj["recent_ops"]),
        rejections=tuple(Rejection(r["op_id"], r["op"], r["reason"], r["detail"])
                         for r in obj["rejections"]),
        rejected=dict(obj["rejected"]))


__all__ = [
    "RECENT_OPS",
    "REJECTIONS_KEPT",
    "STATE_VERSION",
    "MemoryState",
    "Rejection",
    "apply",
    "derived_from",
    "dump",
    "dump_head",
    "explain",
    "fold",
    "forgotten_version",
    "init",
    "load",
    "newly_forgotten",
]
