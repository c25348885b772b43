"""The memory folder: the batch cycle's :class:`~sessionstream.streams.fold.Folder` over
the tenant's memory topic (ADR 0030, ADR 0026 "How a new projection plugs in").

A batch's records are decoded (``producers.memory_log.decode_op``: the content opened
with its operation's key; a record that is not a memory operation is logged and
skipped, as no dead-letter topic takes memory records), grouped by namespace in
partition order and folded with the pure ``core.memory.fold`` onto each namespace's
state: the one this folder folded last, else the stored row's. Records at or below the
partition's progress or the state's offset are skipped (a writer installed them: ADR
0030 A2). Each namespace that moved gives one :class:`~.memory_sink.NamespaceWrite`
(``base_offset`` the state's offset before, ``last_offset`` the last record folded).

The cache is tentative, as the port asks: a write that did not apply (``stale``: the
row is further, someone folded these records) forgets the namespace, and the next batch
folds on the stored row. Every state kept is a fold of a prefix of the partition (the
consumer reads every record past the progress, in order), so a write applied from it
is what any reader folding the topic would reach.

:meth:`MemoryFolder.settled` is the after-batch hook: a namespace written by the batch
whose new memories cite a session deleted meanwhile (an extractor racing a deletion,
ADR 0030 §5) gets its follow-up ``forget(source_session)`` produced into its namespace
and installed (``NamespaceFolder.install``), before the next batch is folded.

Deferred (a rebuild, :meth:`BatchCycle.fold` / ``flush``): the states are kept and each
namespace is written once per :meth:`take`; the follow-up forgets are the live worker's
(a rebuild folds the ones the topic holds).
"""

from __future__ import annotations

import importlib
import logging
import time
import uuid
from collections.abc import Collection

from sessionstream.core.errors import CorruptRecord
from sessionstream.core.memory.fold import MemoryState
from sessionstream.core.memory.model import ActorRef, AnyOp, Forget, Namespace, Role
from sessionstream.core.pipeline import Record
from sessionstream.producers.memory_log import (
    MemoryLog,
    MemoryRows,
    NamespaceFolder,
    changes,
    decode_op,
    encode_op,
)
from sessionstream.streams.fold import Batch, Digests, Folded, SessionFold
from sessionstream.streams.memory_sink import NamespaceWrite, namespace_write
from sessionstream.streams.ports import WriteOutcome

#: the fold module (the package exports a function of the same name)
mfold = importlib.import_module("sessionstream.core.memory.fold")

log = logging.getLogger(__name__)

#: The principal of what the memory worker writes (follow-up forgets, shreds).
SYSTEM_ID = "sessionstream-memory"

#: per namespace key: (topic, partition, offset folded, state)
_Kept = tuple[str, int, int, MemoryState]


class MemoryFolder:
    """Folds memory operations into namespace writes (see the module docstring)."""

    name = "memory"

    def __init__(self, rows: MemoryRows, log_: MemoryLog | None, *,
                 principal: str = SYSTEM_ID) -> None:
        self.rows = rows
        self.log = log_
        #: installs the follow-up forgets (and writes the rows, through the sink)
        self.writer = NamespaceFolder(log_, rows, principal=principal)
        self._kept: dict[str, _Kept] = {}
        #: live: the namespaces written by the batch being settled (key -> the write)
        self._written: dict[str, NamespaceWrite] = {}
        #: deferred: namespace key -> (its offset, its state) at the last take
        self._untaken: dict[str, tuple[int, MemoryState]] = {}

    # -- the port ---------------------------------------------------------------------
    async def fold(self, batch: Batch) -> Folded:
        return self._fold(batch, None)

    async def fold_later(self, batch: Batch, sessions: Collection[str]) -> Folded:
        for key in sessions:  # folded again from the stored row
            self._kept.pop(key, None)
        return self._fold(batch, set(sessions))

    def refused(self, session_id: str) -> None:
        self._kept.pop(session_id, None)
        self._written.pop(session_id, None)

    def settled(self) -> None:
        written, self._written = self._written, {}
        self._follow_up(written.values())

    def take(self) -> list[SessionFold]:
        out = []
        untaken, self._untaken = self._untaken, {}
        for key, (base, before) in untaken.items():
            kept = self._kept.get(key)
            if kept is None:
                continue
            _topic, partition, top, state = kept
            out.append(SessionFold(namespace_write(
                Namespace.parse(key), partition, base,
                before if base >= 0 else None, state, top, _now_ms())))
        return out

    def flushed(self, fold: SessionFold, outcome: WriteOutcome) -> None:
        if outcome.status != "applied":
            self._kept.pop(fold.write.session_id, None)

    def forget(self, partitions: Collection[tuple[str, int]] | None = None) -> None:
        if partitions is None:
            self._kept.clear()
            self._untaken.clear()
            return
        gone = set(partitions)
        for key in [k for k, v in self._kept.items() if (v[0], v[1]) in gone]:
            del self._kept[key]
            self._untaken.pop(key, None)

    def holds(self, session_id: str) -> bool:
        return session_id in self._kept

    def keep_digests(self) -> Digests | None:
        return None

    # -- folding ----------------------------------------------------------------------
    def _fold(self, batch: Batch, only: set[str] | None) -> Folded:
        out = Folded()
        groups: dict[str, tuple[Namespace, list[tuple[Record, AnyOp]]]] = {}
        for rec in batch.records:
            if rec.offset <= batch.progress.get(rec.partition, -1):
                out.skipped += 1
                continue
            try:
                op = decode_op(rec.value or b"", self.rows.sealer)
            except CorruptRecord as exc:
                log.warning("memory record %d@%d skipped: %s", rec.offset, rec.partition, exc)
                out.skipped += 1
                continue
            if only is not None and op.namespace.key not in only:
                continue
            groups.setdefault(op.namespace.key, (op.namespace, []))[1].append((rec, op))
        for key, (ns, items) in groups.items():
            topic, partition = items[0][0].topic, items[0][0].partition
            base, state = self._state(key, ns, batch.generation)
            before, top = state, base
            for rec, op in items:
                if rec.offset <= base:
                    out.skipped += 1  # a writer installed it already
                    continue
                state, top = mfold.apply(state, op), rec.offset
            if top == base:
                continue
            self._kept[key] = (topic, partition, top, state)
            if batch.deferred:
                self._untaken.setdefault(key, (base, before))
                out.sessions.append(key)
                continue
            write = namespace_write(ns, partition, base, before if base >= 0 else None,
                                    state, top, _now_ms())
            self._written[key] = write
            out.writes.append(SessionFold(write))
        return out

    def _state(self, key: str, ns: Namespace, gen: int) -> tuple[int, MemoryState]:
        kept = self._kept.get(key)
        if kept is not None:
            return kept[2], kept[3]
        return self.rows.load(ns, gen)

    # -- after the batch ----------------------------------------------------------------
    def _follow_up(self, written: Collection[NamespaceWrite]) -> None:
        """Produce and install ``forget(source_session)`` into each written namespace
        whose changed memories cite a session deleted meanwhile (ADR 0030 §5's race)."""
        cited = {w.session_id: changes(w.before, w.state)[1] for w in written
                 if w.state is not None}
        deleted = self.rows.deleted(s for ids in cited.values() for s in ids)
        if not deleted:
            return
        for w in written:
            assert w.namespace is not None and w.state is not None
            for sid in sorted(set(cited[w.session_id]) & deleted
                              - set(w.state.deleted_sessions)):
                self._forget(w.namespace, sid)

    def _forget(self, ns: Namespace, session_id: str) -> None:
        if self.log is None:
            raise RuntimeError("the memory folder produces follow-up forgets: give it the log")
        op = Forget(op_id=str(uuid.uuid4()), namespace=ns, time=_now_ms(),
                    actor=ActorRef(Role.OPERATOR, SYSTEM_ID), source_session=session_id,
                    reason="session deleted")
        done = self.log.append(ns, encode_op(op, self.rows.sealer))
        kept = self._kept.get(ns.key)
        state, _ = self.writer.install(ns, done.partition, done.offset, op,
                                       None if kept is None else (kept[2], kept[3]))
        if kept is not None:
            self._kept[ns.key] = (kept[0], kept[1], self.rows.offset(ns), state)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["SYSTEM_ID", "MemoryFolder"]
