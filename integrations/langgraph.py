"""LangGraph's checkpoint saver on sessionstream: a thread is a session, a checkpoint is
an event.

The one-line switch::

    graph = builder.compile(checkpointer=SessionStreamSaver.fleet())   # was InMemorySaver()

Mapping (docs/frameworks/langgraph.md has the full table). Each ``thread_id`` is one
session (its id, unless ``session_prefix`` is given); every saver call appends plugin
events of the ``langgraph/`` namespace (ignorable: a reader without this module keeps and
skips them; never model-visible):

``langgraph/blobs``       the new channel values of one ``put`` (per channel and version)
``langgraph/checkpoint``  one ``put``: ids, parent, channel versions, the checkpoint and
                          its metadata
``langgraph/writes``      one ``put_writes`` call (task, channels, indexes, values)
``langgraph/deleted``     ``delete_thread``; ``langgraph/pruned`` ``prune``;
``langgraph/runs-deleted`` ``delete_for_runs`` — all appended: history is never
                          rewritten; what LangGraph sees is the fold of the events
                          (``sessionstream delete`` shreds the content itself)

Ids, versions, channel names, step and source stay clear (they are the structure);
every value LangGraph serialises (channel values, writes, the checkpoint, its metadata)
is content: sealed at rest with the session's keys, read back as the text of a
placeholder once the session is shredded.

Reads never fold the log. The store keeps the inline view :data:`THREAD_VIEW` beside each
thread (the fleet: in Redis, moved by each write's settle, docs/adr/0024): one field per
checkpoint, per channel value *version* (stored once, however many checkpoints read it)
and per ``put_writes`` call, plus clear fields holding only ids and versions. A read
follows those in one call (a gather): ``get_tuple`` (the latest or by id), a page of
``list``, and ``get_delta_channel_history`` (the whole walk up the parent chain). The
writing process keeps no values either: what it keeps of a thread is the view's index of
ids (``ThreadView``'s bookkeeping) and its events' envelopes.

Channel versions are unique across forks (``get_next_version`` adds a random part, as
``InMemorySaver`` does), and a checkpoint finds each channel's value through its own
put or its parent's, never through a later fork that reused a version number — so even
integer versions from another saver cannot overwrite one branch with another's data.

``list(None)`` and ``delete_for_runs`` reach every thread of the tenant through the
tenant's thread index (the fleet: a sorted set under the tenant's hash tag, written after
each thread's first write by a saver and repaired by its reads, see :class:`_FleetIndex`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    LATEST_VERSION,
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from sessionstream.core.catalog import F
from sessionstream.core.events import Draft, Event
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps
from sessionstream.integrations.store import (
    FleetStore,
    JsonlStore,
    MemoryStore,
    SessionHandle,
    SessionStore,
    StoreError,
    WriterConflict,
    plugin_type,
)
from sessionstream.integrations.views import InlineView, ViewGather, ViewState

log = logging.getLogger("sessionstream.integrations.langgraph")

__all__ = ["EVENT_TYPES", "THREAD_VIEW", "LangGraphDataError", "SessionStreamSaver",
           "ThreadView", "WriterConflict"]

_ID = F("str")
_NS = F("str")
_VERSIONS = F("obj")

BLOBS = plugin_type(
    "langgraph/blobs",
    {"ns": _NS, "checkpoint_id": _ID, "versions": _VERSIONS,
     "empty": F("list", items=F("str"))},
    description="The channel values a LangGraph put wrote, by channel and version "
    "(values: content; a version without a value is an empty channel).",
)
CHECKPOINT = plugin_type(
    "langgraph/checkpoint",
    {"ns": _NS, "checkpoint_id": _ID, "parent_checkpoint_id": F(("str", "null")),
     "ts": F("str"), "channel_versions": _VERSIONS, "step": F(("int", "null")),
     "source": F(("str", "null")), "run_id": F(("str", "null")), "parents": F("obj")},
    description="A LangGraph checkpoint (the checkpoint and its metadata: content).",
)
WRITES = plugin_type(
    "langgraph/writes",
    {"ns": _NS, "checkpoint_id": _ID, "task_id": F("str"), "task_path": F("str"),
     "channels": F("list")},
    description="Pending writes of one LangGraph task (values: content).",
)
DELETED = plugin_type(
    "langgraph/deleted", {},
    description="delete_thread: LangGraph reads the thread as empty from here on.")
PRUNED = plugin_type(
    "langgraph/pruned", {"keep": F("obj")},
    description="prune: only the kept checkpoint of each namespace stays visible.")
RUNS_DELETED = plugin_type(
    "langgraph/runs-deleted", {"run_ids": F("list", items=F("str"))},
    description="delete_for_runs: the checkpoints of these runs are no longer visible.")

#: The plugin types a store must know to hold LangGraph threads.
EVENT_TYPES = (BLOBS, CHECKPOINT, WRITES, DELETED, PRUNED, RUNS_DELETED)


class LangGraphDataError(StoreError):
    """A LangGraph call the saver cannot map (a config without a thread id, a write
    to a checkpoint that names none): says what and where."""


# ------------------------------------------------------------------- payloads

Payload = Any  # [type, base64] as stored, or the placeholder text of shredded content


def _dump(serde: SerializerProtocol, value: Any) -> list[str]:
    kind, data = serde.dumps_typed(value)
    return [kind, base64.b64encode(data).decode("ascii")]


def _load(serde: SerializerProtocol, payload: Payload) -> Any:
    """The value, or the placeholder text itself when the content is gone."""
    if (isinstance(payload, Sequence) and not isinstance(payload, str)
            and len(payload) == 2 and all(isinstance(p, str) for p in payload)):
        try:
            raw = binascii.a2b_base64(payload[1], strict_mode=True)
        except (binascii.Error, ValueError):
            return str(payload)
        return serde.loads_typed((payload[0], raw))
    return payload if isinstance(payload, str) else str(payload)


# ------------------------------------------------------------------ the view
#
# The fields of a thread's view (names joined by US, 0x1f, which no id or version
# LangGraph makes contains; values in brackets are clear, the others sealed):
#
#   L ns               [the latest checkpoint id of the namespace]
#   S ns cid           [a checkpoint's structure: parent "p", run "run", ts, channel
#                       versions "v", step, source, parents, and "r": channel -> the
#                       B field holding its value (null: empty)]
#   C ns cid           the checkpoint ("cp") and its metadata ("md") as LangGraph
#                      serialised them
#   B ns ch version    one channel value, stored once per version (a version some
#                      other put of the thread already used: "... cid", see _Index)
#   X ns cid           [the W fields of the checkpoint's writes, in order]
#   W ns cid seq       one put_writes call: task "t", path "p", channels "c", values "v"
#
# The entries are the index of checkpoints, [ns, cid, run id] in put order (what list,
# prune and delete_for_runs read without touching a value).

SEP = "\x1f"
_CLEAR = ("L" + SEP, "S" + SEP, "X" + SEP)


def _f(kind: str, *parts: str) -> str:
    return SEP.join((kind, *parts))


def _vkey(version: Any) -> str:
    """A channel version as it names a field (JSON keeps 1 and "1" apart)."""
    return version if isinstance(version, str) and _ours(version) else canonical_dumps(version)


def _ours(version: str) -> bool:
    """One of this saver's versions (``<counter:032>.<hex:016>``): unique in the thread,
    so (namespace, channel, version) names one value whichever put wrote it."""
    return (len(version) == 49 and version[32] == "." and version[:32].isdigit()
            and all(c in "0123456789abcdef" for c in version[33:]))



@dataclass
class _Meta:
    """What the fold keeps of one checkpoint: ids, never values."""

    parent: str | None
    refs: dict[str, str | None]  # channel -> the B field of its value (None: empty)
    run: str | None
    writes: list[str] = field(default_factory=list)  # its W fields, in order


@dataclass
class _Index:
    """The fold's bookkeeping (``ViewState.aux``): the thread's checkpoints by
    (namespace, id) in put order, the B fields of foreign versions (to tell a fork that
    reused one), the blobs of a put not yet followed by its checkpoint, each namespace's
    latest id, and writes to checkpoints never put."""

    cps: dict[tuple[str, str], _Meta] = field(default_factory=dict)
    foreign: dict[tuple[str, str, str], str] = field(default_factory=dict)
    own: dict[tuple[str, str], dict[str, str | None]] = field(default_factory=dict)
    latest: dict[str, str] = field(default_factory=dict)
    orphans: dict[tuple[str, str], list[str]] = field(default_factory=dict)


class ThreadView(InlineView):
    """A LangGraph thread as an inline view (see the field table above): folds the
    ``langgraph/`` events; keeps no values in a writer's memory (``keeps_fields``)."""

    name = "langgraph/thread"
    clear_fields = _CLEAR
    keeps_fields = False

    def fold(self, state: ViewState, event: Event) -> None:
        t = event.type
        if not t.startswith("langgraph/"):
            return
        ix: _Index = state.aux if state.aux is not None else _Index()
        state.aux = ix
        d = event.data
        if t == BLOBS.name:
            self._blobs(state, ix, d)
        elif t == CHECKPOINT.name:
            self._checkpoint(state, ix, d)
        elif t == WRITES.name:
            self._writes(state, ix, d, event.seq)
        elif t == DELETED.name:
            self._remove(state, ix, list(ix.cps))
            for key, names in ix.orphans.items():
                state.delete(_f("X", *key))
                for n in names:
                    state.delete(n)
            state.aux = _Index()
        elif t == PRUNED.name:
            keep = d["keep"]
            self._remove(state, ix, [k for k in ix.cps if keep.get(k[0]) != k[1]])
        elif t == RUNS_DELETED.name:
            runs = set(d["run_ids"])
            self._remove(state, ix, [k for k, m in ix.cps.items()
                                     if m.run is not None and m.run in runs])

    @staticmethod
    def immutable_fields(events: Sequence[Event]) -> dict[str, JsonValue]:
        """The fields ``events`` set that never change once set: the values of this
        saver's channel versions (named by a version unique in the thread) and the
        writes (named by their event's seq). What a writer may keep and not read back."""
        out: dict[str, JsonValue] = {}
        for e in events:
            d = e.data
            if e.type == BLOBS.name and isinstance(d.get("values"), Mapping):
                empty = set(d.get("empty") or ())
                for ch, ver in d["versions"].items():
                    payload = d["values"].get(ch)
                    if ch not in empty and payload is not None and isinstance(ver, str) \
                            and _ours(ver):
                        out[_f("B", d["ns"], ch, ver)] = payload
            elif e.type == WRITES.name:
                out[_f("W", d["ns"], d["checkpoint_id"], str(e.seq))] = {
                    "t": d["task_id"], "p": d["task_path"], "c": d["channels"],
                    "v": d.get("values")}
        return out

    @staticmethod
    def _blobs(state: ViewState, ix: _Index, d: Mapping[str, Any]) -> None:
        ns, cid = d["ns"], d["checkpoint_id"]
        values = d.get("values")
        empty = set(d.get("empty") or ())
        own: dict[str, str | None] = {}
        for ch, ver in d["versions"].items():
            if ch in empty:
                own[ch] = None
                continue
            if isinstance(values, Mapping):
                payload = values.get(ch)
            else:  # shredded: the whole map is one placeholder
                payload = values if isinstance(values, str) else None
            if payload is None:
                own[ch] = None
                continue
            vk = _vkey(ver)
            name = _f("B", ns, ch, vk)
            if not (isinstance(ver, str) and _ours(ver)):
                had = ix.foreign.get((ns, ch, vk))
                if had is not None and had != _f("B", ns, ch, vk, cid):
                    name = _f("B", ns, ch, vk, cid)  # another put used this version
                ix.foreign[(ns, ch, vk)] = name
            state.set(name, payload)
            own[ch] = name
        ix.own[(ns, cid)] = own

    @staticmethod
    def _checkpoint(state: ViewState, ix: _Index, d: Mapping[str, Any]) -> None:
        ns, cid = d["ns"], d["checkpoint_id"]
        parent_id = d.get("parent_checkpoint_id")
        own = ix.own.pop((ns, cid), {})
        parent = ix.cps.get((ns, parent_id)) if parent_id else None
        refs: dict[str, str | None] = {}
        for ch, ver in d["channel_versions"].items():
            if ch in own:
                refs[ch] = own[ch]
                continue
            vk = _vkey(ver)
            base = _f("B", ns, ch, vk)
            if parent is not None and ch in parent.refs and (
                    (ref := parent.refs[ch]) is None or ref == base
                    or ref.startswith(base + SEP)):
                refs[ch] = ref  # the parent's value (the same version)
            elif isinstance(ver, str) and _ours(ver):
                refs[ch] = base  # unique: this version's value, if one was stored
            else:
                refs[ch] = ix.foreign.get((ns, ch, vk))
        run = d.get("run_id")
        state.set(_f("S", ns, cid), {
            "p": parent_id, "r": refs, "run": run, "ts": d.get("ts"),
            "v": d["channel_versions"], "step": d.get("step"), "source": d.get("source"),
            "parents": d.get("parents") or {}})
        state.set(_f("C", ns, cid), {"cp": d.get("checkpoint"), "md": d.get("metadata")})
        key = (ns, cid)
        meta = ix.cps.get(key)
        if meta is None:
            writes = ix.orphans.pop(key, [])
            ix.cps[key] = _Meta(parent_id, refs, run, writes)
            state.push([ns, cid, run])
        else:  # put again (the same id): its writes stay
            meta.parent, meta.refs, meta.run = parent_id, refs, run
            state.replace(list(ix.cps).index(key), [ns, cid, run])
        if cid > ix.latest.get(ns, ""):
            ix.latest[ns] = cid
            state.set(_f("L", ns), cid)

    @staticmethod
    def _writes(state: ViewState, ix: _Index, d: Mapping[str, Any], seq: int) -> None:
        key = (d["ns"], d["checkpoint_id"])
        name = _f("W", *key, str(seq))
        state.set(name, {"t": d["task_id"], "p": d["task_path"], "c": d["channels"],
                         "v": d.get("values")})
        meta = ix.cps.get(key)
        names = meta.writes if meta is not None else ix.orphans.setdefault(key, [])
        names.append(name)
        state.set(_f("X", *key), list(names))

    @staticmethod
    def _remove(state: ViewState, ix: _Index, keys: Sequence[tuple[str, str]]) -> None:
        """Remove checkpoints (their fields and writes; values no kept one reads)."""
        if not keys:
            return
        gone = set(keys)
        dead: set[str] = set()
        for key in keys:
            meta = ix.cps[key]
            dead.update(n for n in meta.refs.values() if n is not None)
            for name in (_f("S", *key), _f("C", *key), _f("X", *key), *meta.writes):
                state.delete(name)
        order = list(ix.cps)
        first = min(order.index(k) for k in gone)
        for key in keys:
            del ix.cps[key]
        for meta in ix.cps.values():
            dead.difference_update(meta.refs.values())
        for name in dead:
            state.delete(name)
        ix.foreign = {k: n for k, n in ix.foreign.items() if n not in dead}
        state.splice(first, [[ns, cid, m.run] for (ns, cid), m in
                             list(ix.cps.items())[first:]])
        for ns in {k[0] for k in keys}:
            latest = max((cid for n, cid in ix.cps if n == ns), default=None)
            if latest is None:
                ix.latest.pop(ns, None)
                state.delete(_f("L", ns))
            elif latest != ix.latest.get(ns):
                ix.latest[ns] = latest
                state.set(_f("L", ns), latest)


#: The inline view the saver reads (registered with the store it is given).
THREAD_VIEW = ThreadView()


# -------------------------------------------------------------- the gathers
#
# Each read is a walk over the clear fields; the same walk runs in Redis (Lua, one call)
# and in Python (a store in memory, a view rebuilt from the log). Python then reads the
# fields the walk took (``_Fields``).

Get = Callable[[str], JsonValue | None]


def _fetch_args(mode: str, have: Sequence[str], rest: Sequence[str]) -> list[str]:
    """FETCH's args: ``mode`` ("latest": ``rest`` is [ns]; "ids": [ns, cid, ns, cid,
    ...]), then the fields the caller holds already (their values are not returned)."""
    return [mode, str(len(have)), *have, *rest]


def _fetch_walk(get: Get, args: Sequence[str]) -> None:
    """The checkpoints :func:`_fetch_args` names, their values and their writes."""
    rest = args[2 + int(args[1]):]
    pairs: list[tuple[str, str]] = []
    if args[0] == "latest":
        latest = get(_f("L", rest[0]))
        if isinstance(latest, str):
            pairs.append((rest[0], latest))
    else:
        pairs = list(zip(rest[0::2], rest[1::2], strict=True))
    for ns, cid in pairs:
        s = get(_f("S", ns, cid))
        if not isinstance(s, Mapping):
            continue
        get(_f("C", ns, cid))
        for name in s["r"].values():
            if isinstance(name, str):
                get(name)
        for w in get(_f("X", ns, cid)) or ():
            get(w)


_FETCH_LUA = """
local have = {}
local a = 3 + tonumber(ARGV[2])
for i = 3, a - 1 do have[ARGV[i]] = true end
local pairs_ = {}
if ARGV[1] == 'latest' then
  local l = take('L' .. US .. ARGV[a])
  if l then pairs_[1] = {ARGV[a], cjson.decode(l)} end
else
  for i = a, #ARGV, 2 do pairs_[#pairs_ + 1] = {ARGV[i], ARGV[i + 1]} end
end
for _, p in ipairs(pairs_) do
  local id = p[1] .. US .. p[2]
  local s = take('S' .. US .. id)
  if s then
    want('C' .. US .. id)
    for _, name in pairs(cjson.decode(s).r) do
      if type(name) == 'string' and not have[name] then want(name) end
    end
    local x = take('X' .. US .. id)
    if x then
      for _, w in ipairs(cjson.decode(x)) do
        if not have[w] then want(w) end
      end
    end
  end
end
""".replace("US", "'\\31'")


def _delta_walk(get: Get, args: Sequence[str]) -> None:
    """args: ``[ns, cid or "", channel...]``: the parent chain of the checkpoint up to
    each channel's nearest stored value (LangGraph's delta-channel history)."""
    ns, cid, channels = args[0], args[1], args[2:]
    if not cid:
        latest = get(_f("L", ns))
        if not isinstance(latest, str):
            return
        cid = latest
    s = get(_f("S", ns, cid))
    if not isinstance(s, Mapping):
        return
    remaining = set(channels)
    cur = s["p"]
    while isinstance(cur, str) and remaining:
        s = get(_f("S", ns, cur))
        if not isinstance(s, Mapping):
            break
        for w in get(_f("X", ns, cur)) or ():
            get(w)
        refs = s["r"]
        for ch in sorted(remaining):
            name = refs.get(ch)
            if isinstance(name, str) and get(name) is not None:
                remaining.discard(ch)
        cur = s["p"]


_DELTA_LUA = """
local ns = ARGV[1]
local cid = ARGV[2]
if cid == '' then
  local l = take('L' .. US .. ns)
  if l then cid = cjson.decode(l) end
end
local s = cid ~= '' and take('S' .. US .. ns .. US .. cid) or nil
if s then
  local remaining, left = {}, 0
  for i = 3, #ARGV do
    if not remaining[ARGV[i]] then remaining[ARGV[i]] = true; left = left + 1 end
  end
  local cur = cjson.decode(s).p
  while type(cur) == 'string' and left > 0 do
    local sv = take('S' .. US .. ns .. US .. cur)
    if not sv then break end
    local x = take('X' .. US .. ns .. US .. cur)
    if x then for _, w in ipairs(cjson.decode(x)) do want(w) end end
    local rec = cjson.decode(sv)
    for ch, _ in pairs(remaining) do
      local name = rec.r[ch]
      if type(name) == 'string' and want(name) then
        remaining[ch] = nil
        left = left - 1
      end
    end
    cur = rec.p
  end
end
""".replace("US", "'\\31'")

FETCH = ViewGather(_FETCH_LUA, _fetch_walk)
DELTA = ViewGather(_DELTA_LUA, _delta_walk)


# ----------------------------------------------------------------- the index


class _ThreadIndex:
    """Every thread of a store (``list(None)``, ``delete_for_runs``)."""

    def add(self, session_id: str) -> None:
        """Record a thread that was written (idempotent)."""

    def add_soon(self, session_id: str) -> None:
        """Record a thread a read found (idempotent; may happen later)."""
        self.add(session_id)

    def close(self) -> None:
        """Finish what :meth:`add_soon` left."""

    def session_ids(self, prefix: str) -> list[str]:
        raise NotImplementedError


class _KnownIndex(_ThreadIndex):
    """A store in this process's memory: the threads this saver wrote or read."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def add(self, session_id: str) -> None:
        self._ids.add(session_id)

    def session_ids(self, prefix: str) -> list[str]:
        return sorted(s for s in set(self._ids) if s.startswith(prefix))


class _FileIndex(_ThreadIndex):
    """A JSONL store: its files are its sessions."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def session_ids(self, prefix: str) -> list[str]:
        return sorted(p.name[:-len(".jsonl")] for p in self.directory.glob("*.jsonl")
                      if p.name.startswith(prefix))


class _FleetIndex(_ThreadIndex):
    """The tenant's thread index: a sorted set of session ids (all at score 0, so a
    prefix is a lexicographic range) under the tenant's own hash tag,
    ``<prefix>:{<tenant>}:langgraph:threads``.

    Written after a thread's write, before the saver call returns (a second call: the
    thread's keys live under the session's hash tag, and a script may not span two),
    once per thread and saver instance. So a process that dies between its write and
    this call leaves a thread unindexed; the thread's next write puts it back, and so
    does the next read of it by any saver instance that has not indexed it itself
    (``get_tuple``, ``list``, the delta history: a thread found non-empty is queued, and
    a background thread adds what was queued once a second and at ``close``, so a read
    never waits for it). Never removed: a
    deleted thread reads as empty and ``list(None)`` skips it (removing it could race a
    concurrent first write and lose that thread).
    """

    KEY = "langgraph:threads"
    _MEMO = 100_000  # ids indexed by this instance remembered, at most
    DRAIN_S = 1.0  # how often the background thread adds what reads queued

    def __init__(self, store: FleetStore) -> None:
        self.store = store
        self.key = store.cfg.keys.tenant_key(self.KEY)
        self._done: set[str] = set()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self._closed = False

    def _remember(self, session_ids: Iterable[str]) -> None:
        with self._lock:
            if len(self._done) >= self._MEMO:
                self._done.clear()
            self._done.update(session_ids)

    def add(self, session_id: str) -> None:
        if session_id in self._done:
            return
        self.store.redis().zadd(self.key, {session_id: 0})
        self._remember([session_id])

    def add_soon(self, session_id: str) -> None:
        """Index ``session_id`` from the background within a second (a read's repair:
        the read only queues it, waking nothing)."""
        if session_id in self._done:
            return
        with self._lock:
            if self._closed:
                return
            self._queued.add(session_id)
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, daemon=True,
                                                name="langgraph-thread-index")
                self._worker.start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._closed:
                    self._wake.wait(self.DRAIN_S)
                todo, self._queued = self._queued, set()
                closed = self._closed
            if todo:
                try:
                    self.store.redis().zadd(self.key, dict.fromkeys(todo, 0))
                    self._remember(todo)
                except Exception:  # a repair: the next read or write tries again
                    log.warning("langgraph thread index: %d thread(s) not indexed "
                                "(Redis unreachable); a later read or write adds them",
                                len(todo))
            if closed:
                return

    def session_ids(self, prefix: str) -> list[str]:
        low = b"[" + prefix.encode("utf-8")
        high = b"(" + prefix.encode("utf-8") + b"\xff"  # no UTF-8 text has byte 0xff
        return [s.decode("utf-8") if isinstance(s, bytes) else s
                for s in self.store.redis().zrangebylex(self.key, low, high)]

    def close(self) -> None:
        """Add what reads queued, then stop the background thread."""
        with self._lock:
            self._closed = True
            worker = self._worker
            self._wake.notify()
        if worker is not None:
            worker.join(timeout=5)


# ----------------------------------------------------------------------- saver


class _Fields:
    """The fields a gather returned, read as LangGraph tuples."""

    def __init__(self, fields: Mapping[str, JsonValue], serde: SerializerProtocol) -> None:
        self.fields = dict(fields)
        self.get = self.fields.get
        self.serde = serde

    def hold(self, kept: Mapping[str, JsonValue]) -> None:
        """Add the values the caller holds, for the fields the read did not return."""
        for name, value in kept.items():
            self.fields.setdefault(name, value)

    def writes(self, ns: str, cid: str) -> list[tuple[str, str, Payload, str, int]]:
        """The checkpoint's pending writes in ``writes_sort_key`` order: (task id,
        channel, payload, task path, index); a regular write is kept once per (task,
        index), a special one (negative index) replaced, as every saver does."""
        stored: dict[tuple[str, int], tuple[str, str, Payload, str, int]] = {}
        for name in self.get(_f("X", ns, cid)) or ():
            w = self.get(name)
            if not isinstance(w, Mapping):
                continue
            values = w.get("v")
            for i, item in enumerate(w["c"]):
                channel, idx = item[0], int(item[1])
                inner = (w["t"], idx)
                if idx >= 0 and inner in stored:
                    continue
                if isinstance(values, Sequence) and not isinstance(values, str):
                    payload = values[i]
                else:
                    payload = values  # shredded: one placeholder
                stored[inner] = (w["t"], channel, payload, w["p"], idx)
        return sorted(stored.values(), key=lambda x: writes_sort_key(x[3], x[0], x[4]))

    def value(self, name: str | None) -> tuple[bool, Any]:
        """(stored, value) of a B field."""
        if name is None:
            return False, None
        payload = self.get(name)
        if payload is None:
            return False, None
        return True, _load(self.serde, payload)

    def tuple(self, thread_id: str, ns: str, cid: str,
              config: RunnableConfig | None = None) -> CheckpointTuple | None:
        s = self.get(_f("S", ns, cid))
        if not isinstance(s, Mapping):
            return None
        c = self.get(_f("C", ns, cid))
        c = c if isinstance(c, Mapping) else {}
        serde = self.serde
        loaded = _load(serde, c.get("cp"))
        if isinstance(loaded, Mapping):
            checkpoint: dict[str, Any] = dict(loaded)
        else:  # shredded: rebuilt from the clear structure
            checkpoint = {"v": LATEST_VERSION, "id": cid, "ts": s.get("ts") or "",
                          "channel_versions": dict(s["v"]), "versions_seen": {},
                          "pending_sends": [], "updated_channels": None}
        values: dict[str, Any] = {}
        for ch, name in s["r"].items():
            stored, value = self.value(name)
            if stored:
                values[ch] = value
        checkpoint["channel_values"] = values
        metadata = _load(serde, c.get("md"))
        if not isinstance(metadata, Mapping):
            metadata = {"source": s.get("source"), "step": s.get("step"),
                        "parents": dict(s.get("parents") or {})}
        pending = [(t, ch, _load(serde, p)) for t, ch, p, _, _ in self.writes(ns, cid)]
        ids = {"thread_id": thread_id, "checkpoint_ns": ns}
        parent = s.get("p")
        return CheckpointTuple(
            config=config if config is not None else
            {"configurable": {**ids, "checkpoint_id": cid}},
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=dict(metadata),  # type: ignore[arg-type]
            parent_config=({"configurable": {**ids, "checkpoint_id": parent}}
                           if parent else None),
            pending_writes=pending,
        )


class _Pending:
    """One call's drafts waiting to be written (see ``SessionStreamSaver._append``)."""

    __slots__ = ("done", "drafts", "error", "lead")

    def __init__(self, drafts: list[Draft]) -> None:
        self.drafts = drafts
        self.done = threading.Event()
        self.error: Exception | None = None
        self.lead = False


class SessionStreamSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` whose threads are sessionstream sessions.

    ``store``: any :class:`~sessionstream.integrations.store.SessionStore` that knows
    :data:`EVENT_TYPES` (use :meth:`memory` / :meth:`fleet` to build one); the saver
    registers :data:`THREAD_VIEW` with it. ``durable``: every put and put_writes ends with
    the store's flush (the fleet: in Kafka and admitted by readers before LangGraph goes
    on); False leaves flushing to :meth:`flush` / :meth:`close` and the next read of the
    thread.
    """

    #: Checkpoints fetched per call while ``list`` pages through a thread.
    PAGE = 32
    #: Threads whose last written values a fleet saver keeps (see ``_recent``).
    RECENT = 64
    #: How long a call handed the lead by a finished batch waits for more calls to join
    #: its own (a chat turn: 4 writes -> 3; a write costs ~3 ms).
    LINGER_S = 0.0005

    def __init__(self, store: SessionStore, *, serde: SerializerProtocol | None = None,
                 session_prefix: str = "", durable: bool = True) -> None:
        super().__init__(serde=serde)
        missing = [t.name for t in EVENT_TYPES if t.name not in store.catalog]
        if missing:
            raise StoreError(
                f"the store does not know the LangGraph event types {missing}: build it with "
                "event_types=sessionstream.integrations.langgraph.EVENT_TYPES")
        store.register((), [THREAD_VIEW])
        self.store = store
        self.session_prefix = session_prefix
        self.durable = durable
        self._known: set[str] = set()  # thread ids this saver wrote (flush)
        self._lock = threading.Lock()
        self._index: _ThreadIndex = (
            _FleetIndex(store) if isinstance(store, FleetStore)
            else _FileIndex(store.directory) if isinstance(store, JsonlStore)
            else _KnownIndex())
        self._unindexed: set[str] = set()  # written with durable=False, indexed at flush
        #: The calls waiting to write, per thread (the first one is writing).
        self._queues: dict[str, list[_Pending]] = {}
        #: The fleet: per thread (the last RECENT used), the values its last checkpoint
        #: put wrote and the writes since (``ThreadView.immutable_fields``), so the next
        #: read of that checkpoint here — the next turn's first call — does not fetch and
        #: open them again. Served only while the store still opens the thread's view.
        self._recent: collections.OrderedDict[str, dict[str, JsonValue]] = (
            collections.OrderedDict())

    # -- construction -----------------------------------------------------------------
    @classmethod
    def memory(cls, **kwargs: Any) -> SessionStreamSaver:
        """In this process's memory (tests, notebooks): the same events, no servers."""
        return cls(MemoryStore(EVENT_TYPES), **kwargs)

    @classmethod
    def fleet(cls, settings: Any = None, **kwargs: Any) -> SessionStreamSaver:
        """On the fleet (Kafka + Redis, fenced writer), from ``Settings`` (default: the
        environment)."""
        return cls(FleetStore.from_settings(settings, EVENT_TYPES), **kwargs)

    def close(self) -> None:
        """Flush and release every thread (the fleet: give the leases up)."""
        self.flush()
        self._index.close()
        self.store.close()

    def __enter__(self) -> SessionStreamSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SessionStreamSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- threads ----------------------------------------------------------------------
    def session_id(self, thread_id: str) -> str:
        """The session that holds ``thread_id``."""
        return f"{self.session_prefix}{thread_id}"

    def _handle(self, thread_id: str) -> SessionHandle:
        handle = self.store.open(self.session_id(thread_id))
        handle.retain_events = False  # every read goes through the view
        return handle

    def _append(self, thread_id: str, drafts: Sequence[Draft]) -> None:
        """One durable write of ``drafts``, committed together with the writes other
        threads of this process make to the same LangGraph thread meanwhile (LangGraph
        saves a step's task writes and the next checkpoint at once, from two threads):
        the first caller writes, those that arrive while it flushes are written next as
        one batch, each returning once its drafts are durable. A batch refused whole is
        written again call by call, so each call gets its own outcome."""
        me = _Pending(list(drafts))
        with self._lock:
            queue = self._queues.setdefault(thread_id, [])
            queue.append(me)
            me.lead = len(queue) == 1
        if not me.lead:
            me.done.wait()
            if not me.lead:  # written by another caller
                if me.error is not None:
                    raise me.error
                return
            # handed the lead while calls queue up: LangGraph sends the next checkpoint
            # as soon as the last one is saved; let it join this batch
            time.sleep(self.LINGER_S)
        # the lead: write what is queued (ours first), then hand the lead on
        with self._lock:
            batch = list(self._queues[thread_id])
        committed = False
        try:
            self._commit(thread_id, batch)
            committed = True
        finally:
            with self._lock:
                queue = self._queues[thread_id]
                del queue[:len(batch)]
                after = queue[0] if queue else None
                if after is None:
                    del self._queues[thread_id]
                else:
                    after.lead = True
            for p in batch:
                if p is not me:
                    if not committed and p.error is None:
                        p.error = StoreError("the write was interrupted; it may or may "
                                             "not be stored: read the thread again")
                    p.lead = False
                    p.done.set()
            if after is not None:
                after.done.set()  # the next caller leads the next batch
        if me.error is not None:
            raise me.error

    def _commit(self, thread_id: str, batch: list[_Pending]) -> None:
        drafts = [d for p in batch for d in p.drafts]
        try:
            self._write(thread_id, _fixed(drafts))
        except WriterConflict as exc:
            for p in batch:
                p.error = exc
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            for p in batch:  # one refused draft: each call on its own
                try:
                    self._write(thread_id, _fixed(p.drafts))
                except Exception as one:
                    p.error = one

    def _write(self, thread_id: str, plan: Callable[[Any], Sequence[Draft]]) -> None:
        with self._lock:
            self._known.add(thread_id)
        written = self._handle(thread_id).write(plan, durable=self.durable)
        if written:
            self._remember(thread_id, written)
            sid = self.session_id(thread_id)
            if self.durable:
                self._index.add(sid)  # after the write (see _FleetIndex)
            else:
                with self._lock:
                    self._unindexed.add(sid)

    def _remember(self, thread_id: str, written: Sequence[Event]) -> None:
        if not isinstance(self.store, FleetStore) or not self.durable:
            return
        fields = ThreadView.immutable_fields(written)
        put = any(e.type == CHECKPOINT.name for e in written)
        with self._lock:
            kept = self._recent.pop(thread_id, None)
            if put or kept is None:
                kept = {}
            kept.update(fields)
            self._recent[thread_id] = kept
            while len(self._recent) > self.RECENT:
                self._recent.popitem(last=False)

    def _fetch(self, thread_id: str, mode: str, rest: Sequence[str]) -> _Fields | None:
        """FETCH, without the values this saver wrote last and still holds."""
        with self._lock:
            kept = self._recent.get(thread_id)
        store = self.store
        if kept and isinstance(store, FleetStore) and not store.opens(
                self.session_id(thread_id), THREAD_VIEW.name):
            with self._lock:
                self._recent.pop(thread_id, None)  # the thread's content is gone
            kept = None
        got = self._gather(thread_id, FETCH, _fetch_args(mode, sorted(kept or ()), rest))
        if got is not None and kept:
            got.hold(kept)
        return got

    def flush(self) -> None:
        """Flush every thread this saver wrote (with ``durable=False``)."""
        with self._lock:
            known = list(self._known)
        for tid in known:
            self.store.open(self.session_id(tid)).flush()
        with self._lock:
            todo, self._unindexed = self._unindexed, set()
        for sid in sorted(todo):
            self._index.add(sid)

    def _gather(self, thread_id: str, gather: ViewGather,
                args: Sequence[str]) -> _Fields | None:
        """The fields a gather takes from the thread's view (None: no such thread);
        indexes a thread found non-empty (the read repair of ``_FleetIndex``)."""
        snap = self._handle(thread_id).gather(THREAD_VIEW.name, gather, args)
        if snap.seq < 0:
            return None
        if snap.count:
            self._index.add_soon(self.session_id(thread_id))
        return _Fields(snap.fields, self.serde)

    def _checkpoint_ids(self, thread_id: str) -> list[tuple[str, str, str | None]]:
        """(ns, id, run id) of every checkpoint of the thread, in put order."""
        snap = self._handle(thread_id).view(THREAD_VIEW.name, fields=False)
        if snap.count:
            self._index.add_soon(self.session_id(thread_id))
        return [(e[0], e[1], e[2]) for e in snap.entries]

    # -- reading ----------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _thread_of(config), config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        got = (self._fetch(thread_id, "ids", [ns, checkpoint_id]) if checkpoint_id
               else self._fetch(thread_id, "latest", [ns]))
        if got is None:
            return None
        if checkpoint_id:
            return got.tuple(thread_id, ns, checkpoint_id, config)
        latest = got.get(_f("L", ns))
        return got.tuple(thread_id, ns, latest) if isinstance(latest, str) else None

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Newest first (by checkpoint id) within a thread; ``config`` None lists every
        thread of the tenant (the fleet's thread index), thread by thread."""
        if config is not None:
            thread_ids: list[str] = [_thread_of(config)]
            want_ns = config["configurable"].get("checkpoint_ns")
            want_id = get_checkpoint_id(config)
        else:
            n = len(self.session_prefix)
            thread_ids = [sid[n:] for sid in self._index.session_ids(self.session_prefix)]
            want_ns = want_id = None
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in thread_ids:
            ids = sorted(((cid, ns) for ns, cid, _ in self._checkpoint_ids(thread_id)
                          if (want_ns is None or ns == want_ns)
                          and (not want_id or cid == want_id)
                          and (not before_id or cid < before_id)), reverse=True)
            while ids:
                if left is not None and left <= 0:
                    return
                size = self.PAGE if filter or left is None else min(left, self.PAGE)
                page, ids = ids[:size], ids[size:]
                got = self._fetch(thread_id, "ids", [x for cid, ns in page for x in (ns, cid)])
                if got is None:
                    break
                for cid, ns in page:
                    tup = got.tuple(thread_id, ns, cid)
                    if tup is None:
                        continue  # removed since the index was read
                    if filter and not all(tup.metadata.get(k) == v
                                          for k, v in filter.items()):
                        continue
                    if left is not None:
                        if left <= 0:
                            return
                        left -= 1
                    yield tup

    def get_delta_channel_history(
            self, *, config: RunnableConfig,
            channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """The writes of each channel up its parent chain to its nearest stored value
        (``seed``), oldest first, in one read of the thread's view."""
        if not channels:
            return {}
        thread_id = _thread_of(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        got = self._gather(thread_id, DELTA,
                           [ns, get_checkpoint_id(config) or "", *channels])
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        if got is not None:
            cid = get_checkpoint_id(config) or got.get(_f("L", ns))
            s = got.get(_f("S", ns, cid)) if isinstance(cid, str) else None
            remaining = set(channels)
            cur = s.get("p") if isinstance(s, Mapping) else None
            while isinstance(cur, str) and remaining:
                s = got.get(_f("S", ns, cur))
                if not isinstance(s, Mapping):
                    break
                for t, ch, payload, _, _ in reversed(got.writes(ns, cur)):
                    if ch in remaining:
                        collected[ch].append((t, ch, _load(self.serde, payload)))
                for ch in sorted(remaining):
                    stored, value = got.value(s["r"].get(ch))
                    if stored:
                        seeds[ch] = value
                        remaining.discard(ch)
                cur = s.get("p")
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    # -- writing ----------------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        thread_id = _thread_of(config)
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        cid = checkpoint["id"]
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values")
        md = get_checkpoint_metadata(config, metadata)
        versions = {k: v for k, v in new_versions.items()}
        blobs = {"ns": ns, "checkpoint_id": cid, "versions": versions,
                 "empty": sorted(k for k in versions if k not in values),
                 "values": {k: _dump(self.serde, values[k]) for k in versions if k in values}}
        run_id = md.get("run_id")
        record = {
            "ns": ns, "checkpoint_id": cid, "parent_checkpoint_id": conf.get("checkpoint_id"),
            "ts": str(checkpoint.get("ts", "")),
            "channel_versions": dict(checkpoint.get("channel_versions", {})),
            "step": md.get("step") if isinstance(md.get("step"), int) else None,
            "source": md.get("source") if isinstance(md.get("source"), str) else None,
            "run_id": str(run_id) if run_id is not None else None,
            "parents": {str(k): str(v) for k, v in (md.get("parents") or {}).items()},
            "checkpoint": _dump(self.serde, c), "metadata": _dump(self.serde, md),
        }
        self._append(thread_id, [Draft(BLOBS.name, blobs), Draft(CHECKPOINT.name, record)])
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": cid}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        thread_id = _thread_of(config)
        conf = config["configurable"]
        cid = conf.get("checkpoint_id")
        if not cid:
            raise LangGraphDataError(f"put_writes for thread {thread_id!r} names no "
                                     "checkpoint_id in config['configurable']")
        if not writes:
            return
        record = {
            "ns": conf.get("checkpoint_ns", ""), "checkpoint_id": cid, "task_id": task_id,
            "task_path": task_path,
            "channels": [[c, WRITES_IDX_MAP.get(c, i)] for i, (c, _) in enumerate(writes)],
            "values": [_dump(self.serde, v) for _, v in writes],
        }
        self._append(thread_id, [Draft(WRITES.name, record)])

    def delete_thread(self, thread_id: str) -> None:
        """The thread reads as empty from now on (an appended event; the content stays
        in the log until ``sessionstream delete`` shreds it)."""
        self._write(thread_id, lambda s: [Draft(DELETED.name, {})] if s is not None else [])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append the source's LangGraph events to the target, in order (sealed again
        with the target's keys): the target folds to the same checkpoints and writes."""
        events = self._handle(source_thread_id).events()
        drafts = [Draft(e.type, e.data) for e in events if e.type.startswith("langgraph/")]
        if drafts:
            self._append(target_thread_id, drafts)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only each namespace's newest checkpoint (and its writes)
        stays visible; ``delete``: as delete_thread. Appended, never rewritten."""
        if strategy not in ("keep_latest", "delete"):
            raise LangGraphDataError(f"prune strategy {strategy!r} is not one of "
                                     "'keep_latest', 'delete'")
        for tid in thread_ids:
            ids = self._checkpoint_ids(tid)
            if not ids:
                continue
            if strategy == "delete":
                self._append(tid, [Draft(DELETED.name, {})])
            else:
                keep: dict[str, str] = {}
                for ns, cid, _ in ids:
                    keep[ns] = max(keep.get(ns, ""), cid)
                self._append(tid, [Draft(PRUNED.name, {"keep": keep})])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide the checkpoints of these runs in every thread of the tenant (the
        fleet's thread index)."""
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        n = len(self.session_prefix)
        for sid in self._index.session_ids(self.session_prefix):
            tid = sid[n:]
            hit = sorted({run for _, _, run in self._checkpoint_ids(tid)
                          if run is not None and run in runs})
            if hit:
                self._append(tid, [Draft(RUNS_DELETED.name, {"run_ids": hit})])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``<counter:032>.<random:016>``: ordered by the counter, unique across forks
        (a fork from an old checkpoint never reuses the version of another branch)."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".", 1)[0])
        return f"{n + 1:032}.{secrets.token_hex(8)}"

    # -- async: the same calls on a worker thread (the fleet's I/O blocks) ------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        tuples = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for t in tuples:
            yield t

    async def aget_delta_channel_history(
            self, *, config: RunnableConfig,
            channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *,
                     strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)


def _fixed(drafts: Sequence[Draft]) -> Callable[[Any], Sequence[Draft]]:
    """A plan that writes ``drafts`` whatever the session holds."""
    return lambda _session: drafts


def _thread_of(config: RunnableConfig | None) -> str:
    conf = (config or {}).get("configurable") or {}
    tid = conf.get("thread_id")
    if tid is None or tid == "":
        raise LangGraphDataError("a LangGraph checkpoint call needs "
                                 "config['configurable']['thread_id']")
    return str(tid)

