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

Channel versions are unique across forks (``get_next_version`` adds a random part, as
``InMemorySaver`` does), and a checkpoint finds each channel's value through its own
put or its parent's, never through a later fork that reused a version number — so even
integer versions from another saver cannot overwrite one branch with another's data.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import secrets
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from sessionstream.core.catalog import F
from sessionstream.core.events import Draft, Event
from sessionstream.integrations.store import (
    FleetStore,
    MemoryStore,
    SessionHandle,
    SessionStore,
    StoreError,
    WriterConflict,
    plugin_type,
)

__all__ = ["EVENT_TYPES", "LangGraphDataError", "SessionStreamSaver", "WriterConflict"]

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
            raw = base64.b64decode(payload[1], validate=True)
        except (binascii.Error, ValueError):
            return str(payload)
        return serde.loads_typed((payload[0], raw))
    return payload if isinstance(payload, str) else str(payload)


def _is_value(payload: Payload) -> bool:
    return not isinstance(payload, str)


# ------------------------------------------------------------------------ fold

_EMPTY = object()  # a channel version without a value ("empty" in LangGraph's savers)


@dataclass
class _Checkpoint:
    ns: str
    checkpoint_id: str
    parent_id: str | None
    data: Mapping[str, Any]  # the event's data (opened)
    refs: dict[str, Payload]  # channel -> the value payload this checkpoint reads
    run_id: str | None


@dataclass
class _Thread:
    """The fold of one session's LangGraph events: what the saver shows."""

    folded: int = 0
    last_event_id: str | None = None
    checkpoints: dict[str, dict[str, _Checkpoint]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], Payload] = field(default_factory=dict)
    put_blobs: dict[tuple[str, str], dict[str, Payload]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Payload, str]]] = (
        field(default_factory=dict))

    def fold(self, event: Event) -> None:
        t, d = event.type, event.data
        if t == BLOBS.name:
            ns, cid = d["ns"], d["checkpoint_id"]
            values = d.get("values")
            empty = set(d.get("empty") or ())
            own: dict[str, Payload] = {}
            for ch, ver in d["versions"].items():
                if ch in empty:
                    payload = _EMPTY
                elif isinstance(values, Mapping):
                    payload = values.get(ch, _EMPTY)
                else:  # shredded: the whole map is one placeholder
                    payload = values if isinstance(values, str) else _EMPTY
                own[ch] = payload
                self.blobs[(ns, ch, _key(ver))] = payload
            self.put_blobs[(ns, cid)] = own
        elif t == CHECKPOINT.name:
            ns, cid = d["ns"], d["checkpoint_id"]
            parent_id = d.get("parent_checkpoint_id")
            own = self.put_blobs.pop((ns, cid), {})
            parent = self.checkpoints.get(ns, {}).get(parent_id) if parent_id else None
            refs: dict[str, Payload] = {}
            for ch, ver in d["channel_versions"].items():
                if ch in own:
                    refs[ch] = own[ch]
                elif (parent is not None and ch in parent.refs
                      and _key(parent.data["channel_versions"].get(ch)) == _key(ver)):
                    refs[ch] = parent.refs[ch]
                elif (ns, ch, _key(ver)) in self.blobs:
                    refs[ch] = self.blobs[(ns, ch, _key(ver))]
            self.checkpoints.setdefault(ns, {})[cid] = _Checkpoint(
                ns, cid, parent_id, d, refs, d.get("run_id"))
        elif t == WRITES.name:
            key = (d["ns"], d["checkpoint_id"])
            stored = self.writes.setdefault(key, {})
            values = d.get("values")
            for i, item in enumerate(d["channels"]):
                channel, idx = item[0], int(item[1])
                inner = (d["task_id"], idx)
                if idx >= 0 and inner in stored:
                    continue  # a regular write is kept once (as every saver does)
                if isinstance(values, Sequence) and not isinstance(values, str):
                    payload = values[i]
                else:
                    payload = values
                stored[inner] = (d["task_id"], channel, payload, d["task_path"])
        elif t == DELETED.name:
            self.checkpoints.clear()
            self.blobs.clear()
            self.put_blobs.clear()
            self.writes.clear()
        elif t == PRUNED.name:
            keep = d["keep"]
            for ns, cps in list(self.checkpoints.items()):
                kept = keep.get(ns)
                for cid in list(cps):
                    if cid != kept:
                        del cps[cid]
                        self.writes.pop((ns, cid), None)
                if not cps:
                    del self.checkpoints[ns]
        elif t == RUNS_DELETED.name:
            runs = set(d["run_ids"])
            for ns, cps in self.checkpoints.items():
                for cid, cp in list(cps.items()):
                    if cp.run_id is not None and cp.run_id in runs:
                        del cps[cid]
                        self.writes.pop((ns, cid), None)


def _key(version: Any) -> Any:
    """A channel version as a dict key (JSON keeps ints and strings apart already)."""
    return version


# ----------------------------------------------------------------------- saver


class SessionStreamSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` whose threads are sessionstream sessions.

    ``store``: any :class:`~sessionstream.integrations.store.SessionStore` that knows
    :data:`EVENT_TYPES` (use :meth:`memory` / :meth:`fleet` to build one). ``durable``:
    every put and put_writes ends with the store's flush (the fleet: in Kafka and
    admitted by readers before LangGraph goes on); False leaves flushing to
    :meth:`flush` / :meth:`close`.
    """

    def __init__(self, store: SessionStore, *, serde: SerializerProtocol | None = None,
                 session_prefix: str = "", durable: bool = True) -> None:
        super().__init__(serde=serde)
        missing = [t.name for t in EVENT_TYPES if t.name not in store.catalog]
        if missing:
            raise StoreError(
                f"the store does not know the LangGraph event types {missing}: build it with "
                "event_types=sessionstream.integrations.langgraph.EVENT_TYPES")
        self.store = store
        self.session_prefix = session_prefix
        self.durable = durable
        self._threads: dict[str, _Thread] = {}
        self._known: set[str] = set()  # thread ids this saver wrote or read
        self._lock = threading.Lock()

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
        with self._lock:
            self._known.add(thread_id)
        return self.store.open(self.session_id(thread_id))

    def _thread(self, thread_id: str) -> _Thread:
        """The fold of the thread's events, brought up to date (one history: a prefix
        folded before is still the prefix, unless this writer's events were refused)."""
        events = self._handle(thread_id).events()
        with self._lock:
            th = self._threads.get(thread_id)
            if th is None or th.folded > len(events) or (
                    th.folded and events[th.folded - 1].event_id != th.last_event_id):
                th = self._threads[thread_id] = _Thread()
            for e in events[th.folded:]:
                if e.type.startswith("langgraph/"):
                    th.fold(e)
            th.folded = len(events)
            th.last_event_id = events[-1].event_id if events else None
            return th

    def _append(self, thread_id: str, drafts: Sequence[Draft]) -> None:
        self._handle(thread_id).append_many(drafts, durable=self.durable)

    def flush(self) -> None:
        """Flush every thread this saver wrote (with ``durable=False``)."""
        with self._lock:
            known = list(self._known)
        for tid in known:
            self.store.open(self.session_id(tid)).flush()

    # -- reading ----------------------------------------------------------------------
    def _tuple(self, thread_id: str, th: _Thread, cp: _Checkpoint,
               config: RunnableConfig | None = None) -> CheckpointTuple:
        d = cp.data
        serde = self.serde
        loaded = _load(serde, d.get("checkpoint"))
        if isinstance(loaded, Mapping):
            checkpoint: dict[str, Any] = dict(loaded)
        else:  # shredded: rebuilt from the clear structure
            checkpoint = {"v": LATEST_VERSION, "id": cp.checkpoint_id, "ts": d["ts"],
                          "channel_versions": dict(d["channel_versions"]),
                          "versions_seen": {}, "pending_sends": [], "updated_channels": None}
        values: dict[str, Any] = {}
        for ch, payload in cp.refs.items():
            if payload is not _EMPTY:
                values[ch] = _load(serde, payload)
        checkpoint["channel_values"] = values
        metadata = _load(serde, d.get("metadata"))
        if not isinstance(metadata, Mapping):
            metadata = {"source": d.get("source"), "step": d.get("step"),
                        "parents": dict(d.get("parents") or {})}
        stored = th.writes.get((cp.ns, cp.checkpoint_id), {})
        order = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], *k))
        pending = [(stored[k][0], stored[k][1], _load(serde, stored[k][2])) for k in order]
        ids = {"thread_id": thread_id, "checkpoint_ns": cp.ns}
        return CheckpointTuple(
            config=config if config is not None else
            {"configurable": {**ids, "checkpoint_id": cp.checkpoint_id}},
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=dict(metadata),  # type: ignore[arg-type]
            parent_config=({"configurable": {**ids, "checkpoint_id": cp.parent_id}}
                           if cp.parent_id else None),
            pending_writes=pending,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _thread_of(config), config["configurable"].get("checkpoint_ns", "")
        th = self._thread(thread_id)
        cps = th.checkpoints.get(ns, {})
        if checkpoint_id := get_checkpoint_id(config):
            cp = cps.get(checkpoint_id)
            return self._tuple(thread_id, th, cp, config) if cp is not None else None
        if not cps:
            return None
        return self._tuple(thread_id, th, cps[max(cps)])

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Newest first. ``config`` None lists the threads this saver has seen (a
        fleet saver does not scan the tenant's topic for other processes' threads)."""
        if config is not None:
            thread_ids: list[str] = [_thread_of(config)]
            want_ns = config["configurable"].get("checkpoint_ns")
            want_id = get_checkpoint_id(config)
        else:
            with self._lock:
                thread_ids = sorted(self._known)
            want_ns = want_id = None
        before_id = get_checkpoint_id(before) if before else None
        for thread_id in thread_ids:
            th = self._thread(thread_id)
            for ns, cps in list(th.checkpoints.items()):
                if want_ns is not None and ns != want_ns:
                    continue
                for cid in sorted(cps, reverse=True):
                    if want_id and cid != want_id:
                        continue
                    if before_id and cid >= before_id:
                        continue
                    tup = self._tuple(thread_id, th, cps[cid])
                    if filter and not all(tup.metadata.get(k) == v
                                          for k, v in filter.items()):
                        continue
                    if limit is not None:
                        if limit <= 0:
                            return
                        limit -= 1
                    yield tup

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
        if self._thread(thread_id).checkpoints or self._thread(thread_id).writes:
            self._append(thread_id, [Draft(DELETED.name, {})])

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
            th = self._thread(tid)
            if not th.checkpoints:
                continue
            if strategy == "delete":
                self._append(tid, [Draft(DELETED.name, {})])
            else:
                keep = {ns: max(cps) for ns, cps in th.checkpoints.items() if cps}
                self._append(tid, [Draft(PRUNED.name, {"keep": keep})])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide the checkpoints of these runs in every thread this saver has seen."""
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        with self._lock:
            known = sorted(self._known)
        for tid in known:
            th = self._thread(tid)
            hit = sorted({cp.run_id for cps in th.checkpoints.values() for cp in cps.values()
                          if cp.run_id is not None and cp.run_id in runs})
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


def _thread_of(config: RunnableConfig | None) -> str:
    conf = (config or {}).get("configurable") or {}
    tid = conf.get("thread_id")
    if tid is None or tid == "":
        raise LangGraphDataError("a LangGraph checkpoint call needs "
                                 "config['configurable']['thread_id']")
    return str(tid)
