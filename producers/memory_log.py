"""The long-term memory log on Kafka and its namespace rows in Redis (docs/adr/0030).

:class:`MemoryLog` appends memory operations to the tenant's memory topic, keyed by
namespace, durably (acks=all, flushed before it returns) and reads a partition's records
back by offset. :class:`MemoryRows` keeps each namespace's folded state in Redis:

``<p>:{<t>/mem:<ns digest>}:g<N>`` (hash, the namespace's own hash tag)
    ``offset`` (the last record folded in), ``ns`` (the namespace key), ``head`` (the
    state without its memories: aliases, deleted sessions, recent operation ids,
    rejections; clear metadata), ``m:<id>`` per memory (its versions' metadata, clear:
    provenance, validity, confirmation) and ``c:<id>@<v>`` per readable version (its
    content and digest, sealed under the key of the operation that placed it).
``<p>:{<t>}:memory:namespaces:g<N>`` (zset) namespace keys by last change (ms)
``<p>:{<t>}:memory:by-session:<session>`` (set) the namespaces citing a session
``<p>:{<t>}:memory:changes:g<N>`` (stream, capped) one entry per namespace write:
    ``{"ns", "offset", "changed": [ids]}`` (a reader's index drops what it names)
``<p>:{<t>}:memory:deleted`` (set) the tenant's deleted sessions
``<p>:{<t>}:memory:folded:g<N>`` (hash) partition -> the offset up to which every
    record was folded into its namespace's row (the worker's progress)

A namespace row moves forward only: the write is a compare-and-set on ``offset`` (one
script call), so the worker and a writer installing its own operation (read-your-writes)
never take the row back. Both fold the same records in the same order, so whoever writes
the higher offset writes the state every reader would reach.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.codec import memory_codec
from sessionstream.core.errors import CorruptRecord, SessionStreamError
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.memory.errors import InvalidMemory
from sessionstream.core.memory.fold import MemoryState
from sessionstream.core.memory.model import (
    AnyOp,
    Memory,
    Namespace,
    Propose,
    op_from_json,
)
from sessionstream.core.rows import KeySpace, generation_of
from sessionstream.core.settings import Settings
from sessionstream.governance.memory import MemorySealer, key_name
from sessionstream.producers.kafka_clients import KafkaClients, private_group
from sessionstream.producers.partition import partition_for
from sessionstream.producers.readback import SEEKING

#: the fold module (the package exports a function of the same name)
mfold = importlib.import_module("sessionstream.core.memory.fold")

log = logging.getLogger(__name__)

#: Entries kept in the memory change feed (approximate trim).
FEED_MAXLEN = 10_000


class MemoryLogError(SessionStreamError):
    """The memory topic could not be written or read (names the topic and the cause)."""


@dataclass(frozen=True)
class Appended:
    partition: int
    offset: int


def decode_op(value: bytes, sealer: MemorySealer) -> AnyOp:
    """The operation in a memory record, its content opened (or a placeholder: a
    forgotten version's record; such a proposal never collapses into another).
    Raises :class:`CorruptRecord` for a record that is not one."""
    record, sealed = memory_codec().decode(value)
    try:
        opened = sealer.open_record(record, sealed)
        record["data"] = opened.data
        op = op_from_json(record)
    except (InvalidMemory, SessionStreamError) as exc:
        raise CorruptRecord(f"memory operation {record.get('op_id')!r}: {exc}"[:300]) from exc
    if not opened.readable and isinstance(op, Propose) and op.dedupe:
        from dataclasses import replace

        op = replace(op, dedupe=False)
    return op


def encode_op(op: AnyOp, sealer: MemorySealer) -> bytes:
    record, sealed = sealer.seal_record(op.to_json())
    return memory_codec().encode(record, sealed)


class MemoryLog:
    """Appends to and reads from one tenant's memory topic (no network in ``__init__``)."""

    def __init__(self, settings: Settings, *, flush_timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.topic = settings.memory_topic
        self.clients = KafkaClients.from_settings(settings)
        self.flush_timeout_s = flush_timeout_s
        self._producer: Any = None
        self._consumer: Any = None
        self._partitions: int | None = None
        self._lock = threading.Lock()  # the producer
        self._read_lock = threading.Lock()  # the consumer: one read at a time

    def partitions(self) -> int:
        if self._partitions is None:
            from confluent_kafka.admin import AdminClient

            meta = AdminClient(self.clients.admin()).list_topics(topic=self.topic, timeout=10)
            topic = meta.topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise MemoryLogError(
                    f"the memory topic {self.topic!r} does not exist: run `sessionstream "
                    "topics ensure` (it creates the events, dead-letter and memory topics)")
            self._partitions = len(topic.partitions)
        return self._partitions

    def partition_of(self, namespace: Namespace) -> int:
        return partition_for(namespace.key, self.partitions())

    def append(self, namespace: Namespace, value: bytes) -> Appended:
        """Produce one record and wait for its acknowledgement by every in-sync replica."""
        return self.append_many([(namespace, value)])[0]

    def append_many(self, items: Sequence[tuple[Namespace, bytes]]) -> list[Appended]:
        """Produce the records (in order, each to its namespace's partition) and wait for
        every acknowledgement in one flush; where each landed, in the same order."""
        from confluent_kafka import KafkaException, Producer

        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.clients.producer({"linger.ms": 0}))
            producer = self._producer
        got: list[Any] = [None] * len(items)

        def delivered(i: int) -> Any:
            return lambda err, msg: got.__setitem__(i, (err, msg))

        try:
            for i, (namespace, value) in enumerate(items):
                producer.produce(self.topic, value=value, key=namespace.key.encode("utf-8"),
                                 partition=self.partition_of(namespace),
                                 on_delivery=delivered(i))
                producer.poll(0)
            left = producer.flush(self.flush_timeout_s)
        except (KafkaException, BufferError) as exc:
            raise MemoryLogError(f"cannot append to {self.topic!r}: {exc}") from exc
        if left or any(g is None for g in got):
            raise MemoryLogError(f"{sum(g is None for g in got)} of {len(items)} memory "
                                 f"operations were not acknowledged within "
                                 f"{self.flush_timeout_s:.0f}s on {self.topic!r} (they may "
                                 "still be written: retrying is safe, op ids dedupe)")
        out = []
        for err, msg in got:
            if err is not None:
                raise MemoryLogError(f"cannot append to {self.topic!r}: {err}")
            out.append(Appended(msg.partition(), msg.offset()))
        return out

    def read(self, partition: int, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        """The records of ``partition`` from offset ``start`` to ``end`` (inclusive):
        (offset, key, value)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if end < start:
            return []
        with self._read_lock:
            if self._consumer is None:
                # a seeking read (producers.readback.SEEKING): above all a short fetch
                # wait. With librdkafka's 500 ms, the fetch left waiting at the end of the
                # last range held the next range back: every read took 0.5 s.
                self._consumer = Consumer(self.clients.consumer(
                    private_group("memory-read"),
                    {**SEEKING, "fetch.wait.max.ms": 10, "enable.partition.eof": True}))
            consumer = self._consumer
            out: list[tuple[int, bytes, bytes]] = []
            try:
                consumer.assign([TopicPartition(self.topic, partition, start)])
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    # ask for exactly what is left: consume() waits for a full batch
                    batch = consumer.consume(max(1, min(500, end - start + 1 - len(out))),
                                             1.0)
                    for m in batch:
                        if m.error() is not None:
                            if m.error().code() == -191:  # _PARTITION_EOF: the end
                                return out
                            raise MemoryLogError(f"reading {self.topic!r}: {m.error()}")
                        if m.offset() > end:
                            return out
                        out.append((m.offset(), m.key() or b"", m.value() or b""))
                        if m.offset() >= end:
                            return out
                raise MemoryLogError(f"reading {self.topic!r} partition {partition} from "
                                     f"{start} to {end} did not finish in 30s")
            except KafkaException as exc:
                raise MemoryLogError(f"reading {self.topic!r}: {exc}") from exc
            finally:
                consumer.unassign()

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(self.flush_timeout_s)
                self._producer = None
        with self._read_lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


# ------------------------------------------------------------------------------ Redis

_STORE = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'offset') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
local nset = tonumber(ARGV[2])
local i = 3
for _ = 1, nset do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
  i = i + 1
end
redis.call('HSET', KEYS[1], 'offset', ARGV[1])
return 1
"""


_ADVANCE = """
for i = 1, #ARGV, 2 do
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) > cur then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class MemoryRows:
    """One tenant's memory rows, indexes and change feed in Redis."""

    def __init__(self, redis: Any, keys: KeySpace, sealer: MemorySealer) -> None:
        self.redis = redis
        self.keys = keys
        self.sealer = sealer
        self._store = redis.register_script(_STORE)
        self._advance = redis.register_script(_ADVANCE)
        self._gen: tuple[int, float] | None = None

    # -- keys -----------------------------------------------------------------------
    #: Seconds a read generation pointer is reused (a rebuild's switch reaches a running
    #: process within this time).
    GENERATION_TTL_S = 1.0

    def generation(self) -> int:
        now = time.monotonic()
        if self._gen is None or now - self._gen[1] >= self.GENERATION_TTL_S:
            self._gen = (generation_of(self.redis.get(
                self.keys.tenant_key("memory:generation"))), now)
        return self._gen[0]

    def refresh_generation(self) -> int:
        """Read the generation pointer now (not within GENERATION_TTL_S)."""
        self._gen = None
        return self.generation()

    def row(self, namespace: Namespace, gen: int | None = None) -> str:
        g = self.generation() if gen is None else gen
        return self.keys.session_key(f"mem:{namespace.digest}", f"g{g}")

    def _t(self, what: str) -> str:
        return self.keys.tenant_key(what)

    # -- the namespace row ----------------------------------------------------------
    def offset(self, namespace: Namespace, gen: int | None = None) -> int:
        raw = self.redis.hget(self.row(namespace, gen), "offset")
        return -1 if raw is None else int(raw)

    def load(self, namespace: Namespace, gen: int | None = None
             ) -> tuple[int, MemoryState]:
        """(offset, state) of the namespace's row (-1 and the empty state: none yet).
        A version whose key is shredded or missing here loads without content."""
        raw = {_text(k): _text(v) for k, v in
               self.redis.hgetall(self.row(namespace, gen)).items()}
        if "head" not in raw:
            return -1, mfold.init()
        head = json.loads(raw["head"])
        if head.get("state_version") != mfold.STATE_VERSION:
            return -1, mfold.init()  # rebuilt from the topic by whoever folds next
        memories = []
        for name, text in raw.items():
            if not name.startswith("m:"):
                continue
            m = json.loads(text)
            for v in m["versions"]:
                sealed = raw.get(f"c:{v['ref']}")
                if v["forgotten"] is None and sealed is not None:
                    clear = self.sealer.open_text(key_name(namespace, v["op_id"]),
                                                  f"c:{v['ref']}", sealed)
                    if clear is not None:
                        got = json.loads(clear)
                        v["content"], v["digest"] = got["content"], got["digest"]
            memories.append(m)
        memories.sort(key=lambda m: m["id"])
        return int(raw["offset"]), mfold.load({**head, "memories": memories})

    def store(self, namespace: Namespace, before: MemoryState | None,
              state: MemoryState, offset: int, gen: int | None = None) -> bool:
        """Write ``state`` (folded up to ``offset``) if the row is behind it: only the
        memories that changed since ``before`` (None: all). False: the row was at or past
        ``offset`` already (someone folded further)."""
        sets: list[str] = ["head", canonical_dumps(mfold.dump_head(state)), "ns",
                           namespace.key]
        drops: list[str] = []
        old = {} if before is None else before.memories
        for memory_id, memory in state.memories.items():
            prev = old.get(memory_id)
            if prev is memory:
                continue
            sets += [f"m:{memory_id}", canonical_dumps(_stripped(memory))]
            for i, v in enumerate(memory.versions):
                pv = prev.versions[i] if prev is not None and i < len(prev.versions) else None
                field = f"c:{v.ref}"
                if v.content is None:
                    if pv is None or pv.content is not None:
                        drops.append(field)
                    continue
                if pv is not None and pv.content is not None and pv.op_id == v.op_id:
                    continue  # same content, already stored
                sets += [field, self.sealer.seal_value(
                    key_name(namespace, v.op_id), field,
                    {"content": v.to_json()["content"], "digest": v.digest})]
        args: list[Any] = [offset, len(sets) // 2, *sets, *drops]
        return bool(self._store(keys=[self.row(namespace, gen)], args=args))

    # -- the tenant's indexes (a second call, on the tenant's slot) -----------------
    def index(self, namespace: Namespace, before: MemoryState | None,
              state: MemoryState, offset: int, gen: int | None = None) -> set[str]:
        """Update the namespace index, the per-session index of citing namespaces and the
        change feed; returns the sessions this namespace cites that are deleted (the
        follow-up forgets of a deletion race)."""
        g = self.generation() if gen is None else gen
        changed, cited = changes(before, state)
        now = int(time.time() * 1000)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self._t(f"memory:namespaces:g{g}"), {namespace.key: now})
            for sid in cited:
                pipe.sadd(self._t(f"memory:by-session:{sid}"), namespace.key)
            pipe.xadd(self._t(f"memory:changes:g{g}"),
                      {"change": canonical_dumps({"ns": namespace.key, "offset": offset,
                                                  "changed": changed})},
                      maxlen=FEED_MAXLEN, approximate=True)
            if cited:
                pipe.smismember(self._t("memory:deleted"), cited)
            out = pipe.execute()
        if not cited:
            return set()
        flags = out[-1]
        return {sid for sid, f in zip(cited, flags, strict=True)
                if int(f) and sid not in state.deleted_sessions}

    def namespaces(self, gen: int | None = None) -> list[Namespace]:
        g = self.generation() if gen is None else gen
        keys = self.redis.zrange(self._t(f"memory:namespaces:g{g}"), 0, -1)
        return sorted((Namespace.parse(_text(k)) for k in keys), key=lambda n: n.key)

    def citing(self, session_id: str) -> list[Namespace]:
        keys = self.redis.smembers(self._t(f"memory:by-session:{session_id}"))
        return sorted((Namespace.parse(_text(k)) for k in keys), key=lambda n: n.key)

    def mark_deleted(self, session_id: str) -> None:
        self.redis.sadd(self._t("memory:deleted"), session_id)

    def deleted(self, session_ids: Iterable[str]) -> set[str]:
        ids = sorted(set(session_ids))
        if not ids:
            return set()
        flags = self.redis.smismember(self._t("memory:deleted"), ids)
        return {sid for sid, f in zip(ids, flags, strict=True) if int(f)}

    def folded(self, partition: int, gen: int | None = None) -> int:
        g = self.generation() if gen is None else gen
        raw = self.redis.hget(self._t(f"memory:folded:g{g}"), str(partition))
        return -1 if raw is None else int(raw)

    def advance_folded(self, progress: Mapping[int, int], gen: int | None = None) -> None:
        """Record that every record of each partition up to its offset is folded into
        its namespace's row (only forward: one script call)."""
        if not progress:
            return
        g = self.generation() if gen is None else gen
        args: list[Any] = []
        for p, o in progress.items():
            args += [str(p), o]
        self._advance(keys=[self._t(f"memory:folded:g{g}")], args=args)

    def changes(self, since: str = "0-0", count: int = 1000, gen: int | None = None
                ) -> list[tuple[str, dict[str, Any]]]:
        g = self.generation() if gen is None else gen
        out = []
        for eid, fields in self.redis.xrange(self._t(f"memory:changes:g{g}"),
                                             "(" + since if since != "0-0" else "-", "+",
                                             count=count):
            raw = fields.get(b"change") or fields.get("change")
            out.append((_text(eid), json.loads(raw)))
        return out

    def purge(self, namespace: Namespace, refs: Sequence[str]) -> int:
        """Delete the content fields of ``refs`` from every generation's row (a forget's
        Redis copies; the shredded keys already make them unreadable)."""
        counter = self.redis.get(self._t("memory:generation:last"))
        gens = KeySpace.generations(counter, self.redis.get(self._t("memory:generation")))
        n = 0
        with self.redis.pipeline(transaction=False) as pipe:
            for g in gens:
                pipe.hdel(self.row(namespace, g), *[f"c:{r}" for r in refs])
            for got in pipe.execute():
                n += int(got)
        return n


def changes(before: MemoryState | None, state: MemoryState) -> tuple[list[str], list[str]]:
    """(the memories ``state`` changed since ``before`` (None: all), the sessions their
    versions cite), each sorted: what a namespace write indexes."""
    old = {} if before is None else before.memories
    changed = sorted(i for i, m in state.memories.items() if old.get(i) is not m)
    cited = sorted({s.session_id for i in changed for v in state.memories[i].versions
                    for s in v.sources})
    return changed, cited


def _stripped(memory: Memory) -> dict[str, Any]:
    """A memory's JSON without its content (sealed in its own fields)."""
    out = memory.to_json()
    for v in out["versions"]:
        v["content"] = None
        v["digest"] = None
    return out


class NamespaceFolder:
    """Folds a namespace's records into its row: what the worker does per batch and a
    writer does for its own operation before it returns (read-your-writes).

    ``install(ns, partition, upto)``: the row's state, plus the records of the namespace
    between where the row (or the worker's progress on the partition, whichever is
    further) stands and ``upto``, read from the topic and folded, written back if the
    row is still behind. ``commit`` is the write itself: shred the data keys of every
    version the new state forgot (their records, rows and recalls read
    ``[content deleted]`` from then on), purge their Redis copies, store the row, update
    the tenant's indexes; it returns the deleted sessions the namespace still cites.
    """

    def __init__(self, log: MemoryLog | None, rows: MemoryRows, *,
                 principal: str = "sessionstream-memory") -> None:
        self.log = log
        self.rows = rows
        self.principal = principal
        #: the memory keys this folder destroyed
        self.shredded: set[str] = set()

    def install(self, namespace: Namespace, partition: int, upto: int,
                own: AnyOp | None = None, cached: tuple[int, MemoryState] | None = None
                ) -> tuple[MemoryState, list[tuple[Namespace, str]]]:
        """Fold the partition up to ``upto`` from where folding stands (the worker's
        progress, which every installer advances): every namespace met in between is
        written too, so a writer never reads a record twice and a new namespace never
        scans the partition. ``own``: the operation at ``upto`` (the writer's, in hand:
        not read back); ``cached``: (offset, state) of ``namespace`` this process holds.
        Returns ``namespace``'s state and the follow-up forgets owed (namespace, deleted
        session) of every namespace written."""
        got, followups = self.install_many(
            partition, upto, {} if own is None else {upto: own},
            {} if cached is None else {namespace.key: cached}, (namespace,))
        return got[namespace.key][1], followups

    def install_many(self, partition: int, upto: int, owned: Mapping[int, AnyOp],
                     cached: Mapping[str, tuple[int, MemoryState]],
                     also: Sequence[Namespace] = ()
                     ) -> tuple[dict[str, tuple[int, MemoryState]], list[tuple[Namespace, str]]]:
        """:meth:`install` for a batch: ``owned`` are the writer's records on
        ``partition`` by offset (in hand: only the records between them that are not
        are read back). Returns (offset, state) of every namespace of ``owned`` and
        ``also``, and the follow-up forgets owed."""
        start = self.rows.folded(partition) + 1
        lo, hi = start, upto  # the records to read back: the first and last not in hand
        while lo <= hi and lo in owned:
            lo += 1
        while hi >= lo and hi in owned:
            hi -= 1
        groups: dict[str, tuple[Namespace, list[tuple[int, AnyOp]]]] = {
            ns.key: (ns, []) for ns in [*also, *(op.namespace for op in owned.values())]}
        items: list[tuple[int, AnyOp]] = [(o, op) for o, op in owned.items() if o >= start]
        if self.log is not None and lo <= hi:
            for off, _k, value in self.log.read(partition, lo, hi):
                if off in owned:
                    continue
                try:
                    items.append((off, decode_op(value, self.rows.sealer)))
                except CorruptRecord as exc:
                    log.warning("memory record %d@%d skipped: %s", off, partition, exc)
        for off, op in sorted(items, key=lambda item: item[0]):
            groups.setdefault(op.namespace.key, (op.namespace, []))[1].append((off, op))
        out: dict[str, tuple[int, MemoryState]] = {}
        followups: list[tuple[Namespace, str]] = []
        for key, (ns, ops) in groups.items():
            hit = cached.get(key)
            if hit is not None and hit[0] == self.rows.offset(ns):
                offset, state = hit
            else:
                offset, state = self.rows.load(ns)
            before, top = state, offset
            for off, op in ops:
                if off > offset:
                    state, top = mfold.apply(state, op), off
            if top > offset:
                deleted = self.commit(ns, before if offset >= 0 else None, state, top)
                followups += [(ns, sid) for sid in sorted(deleted)]
            out[key] = (max(top, offset), state)
        self.rows.advance_folded({partition: upto})
        return out, followups

    def commit(self, namespace: Namespace, before: MemoryState | None,
               state: MemoryState, offset: int, gen: int | None = None) -> set[str]:
        """:meth:`write_row`, then the tenant's indexes (:meth:`MemoryRows.index`): the
        deleted sessions the namespace cites."""
        self.write_row(namespace, before, state, offset, gen)
        return self.rows.index(namespace, before, state, offset, gen)

    def write_row(self, namespace: Namespace, before: MemoryState | None,
                  state: MemoryState, offset: int, gen: int | None = None) -> bool:
        """Shred the keys of the versions ``state`` forgot since ``before`` (their Redis
        copies purged), then store the row (:meth:`MemoryRows.store`: False when it was
        at or past ``offset`` already). The batch cycle's memory sink writes with it."""
        gone = mfold.newly_forgotten(before or mfold.init(), state)
        if gone:
            names = {key_name(namespace, op) for _, op in gone}
            self.rows.sealer.shred(names, principal=self.principal, reason="memory forgotten")
            self.shredded |= names
            self.rows.purge(namespace, sorted({str(ref) for ref, _ in gone}))
        return self.rows.store(namespace, before, state, offset, gen)
