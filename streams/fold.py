"""The folder port: what the batch cycle (:mod:`~sessionstream.streams.cycle`) asks of a fold.

A folder turns the records of a batch into session writes and keeps, per session, what
it needs to fold the next batch on top (its cache). It never writes: the cycle owns the
batch's lifecycle (generation, progress, dead letters, the write and its outcomes, the
refolds of refused sessions, replay's deferred flushes) and drives any folder the same
way. Two implementations fold the session log: :mod:`~sessionstream.streams.fold_python`
(the reference) and :mod:`~sessionstream.streams.fold_native` (the Rust extension, with
the reference for what it does not fold); a new projection brings its own (docs/adr/0026).

One batch, live::

    folded = await folder.fold(batch)             # on the folder's tentative state
    ...                                           # the previous batch's write settles
    more = await folder.fold_later(batch, later)  # folded.later, and sessions refused
    ...                                           # the writes; for each refused one:
    folder.refused(session_id)                    # forget it (its stored row is the truth)
    again = await folder.fold_later(batch, conflicts)   # refold from the stored rows
    folder.settled()                              # the batch is written

Deferred (replay): ``fold`` keeps what it folded; :meth:`Folder.take` hands the writes of
every session folded since the last take, and :meth:`Folder.flushed` hears each outcome.

The records of a consumed batch reach a folder as the messages themselves
(:class:`MessageBatch`, a ``Sequence[Record]`` whose Records are built only when Python
reads one: a dead letter, a session the reference folds, the Python fold); the native
fold reads the confluent-kafka ``Message`` objects directly, so the live worker makes
no Python object per event. The extension's ``scan_messages`` read the batch once: the
messages that carry an error, the highest offset and the first message of each partition.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

from sessionstream.core.pipeline import Record
from sessionstream.streams.ports import DeadLetter, SessionWrite, WriteOutcome

#: Per session, per sealed field a write stored: (the stored value's reference, the
#: digest of its clear text) (replay's compare, ADR 0015).
Digests = Mapping[str, Mapping[str, tuple[str, bytes]]]


class MessageBatch(Sequence[Record]):
    """The error-free messages of one ``consume()``, as Records on demand."""

    __slots__ = ("_built", "first", "high", "messages")

    def __init__(self, messages: list[Any], high: dict[int, int],
                 first: dict[int, int]) -> None:
        #: the messages (each has ``topic()``, ``partition()``, ``offset()``, ``key()``,
        #: ``value()``, ``timestamp()``), none with an error
        self.messages = messages
        #: partition -> the highest offset in the batch
        self.high = high
        #: partition -> the index of its first message
        self.first = first
        self._built: dict[int, Record] = {}

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, i: int) -> Record: ...

    @overload
    def __getitem__(self, i: slice) -> list[Record]: ...

    def __getitem__(self, i: int | slice) -> Record | list[Record]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.messages)))]
        if i < 0:
            i += len(self.messages)
        rec = self._built.get(i)
        if rec is None:
            m = self.messages[i]  # IndexError past the end, as a list
            ts = m.timestamp()
            rec = self._built[i] = Record(m.topic() or "", m.partition() or 0,
                                          m.offset() or 0, m.key(), m.value(),
                                          ts[1] if ts[0] else None)
        return rec

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self.messages)):
            yield self[i]

    def heads(self) -> list[Record]:
        """One record per partition of the batch (its first)."""
        return [self[i] for i in self.first.values()]


def native_items(records: Sequence[Record]) -> list[Any]:
    """What the extension's ``Folder.fold`` reads for ``records``: the messages of a
    :class:`MessageBatch`, else the records as a list."""
    if isinstance(records, MessageBatch):
        return records.messages
    return records if isinstance(records, list) else list(records)


def partition_heads(records: Sequence[Record]) -> Sequence[Record]:
    """Records naming every (topic, partition) of ``records`` (a batch: one each)."""
    return records.heads() if isinstance(records, MessageBatch) else records


def select_keys(records: Sequence[Record], keys: set[bytes]) -> list[Record]:
    """The records whose key is one of ``keys`` or absent (a keyless record names its
    session only once decoded), in order; a :class:`MessageBatch` builds a Record only
    for those."""
    if isinstance(records, MessageBatch):
        return [records[i] for i, m in enumerate(records.messages)
                if (k := m.key()) is None or k in keys]
    return [r for r in records if r.key is None or r.key in keys]


def highest_offsets(records: Sequence[Record]) -> dict[int, int]:
    """Partition -> the highest offset of ``records`` (a :class:`MessageBatch` knows it)."""
    if isinstance(records, MessageBatch):
        return dict(records.high)
    high: dict[int, int] = {}
    for r in records:
        if r.offset > high.get(r.partition, -1):
            high[r.partition] = r.offset
    return high


@dataclass(frozen=True, slots=True)
class Batch:
    """One poll of one topic, as the cycle hands it to a folder."""

    records: Sequence[Record]
    topic: str
    #: the generation the batch is written to
    generation: int
    #: partition -> the last offset the sink holds progress for (records up to it skip)
    progress: Mapping[int, int]
    #: replay's in-memory fold: no write is built until :meth:`Folder.take`
    deferred: bool = False
    #: something of the cycle runs meanwhile (a write in flight): a long fold should
    #: leave the event loop free
    concurrent: bool = False


@dataclass(frozen=True, slots=True)
class SessionFold:
    """One session's write from a batch, and what the batch report counts once it applied."""

    write: SessionWrite
    #: admission verdicts other than ``admitted`` of the records folded into it
    verdicts: Mapping[str, int] = field(default_factory=dict)
    #: this write quarantines the session
    quarantined: bool = False
    #: units rebuilt from the log (a bumped state_version) that this write stores
    rebuilt: tuple[str, ...] = ()
    #: seals the write's content-bearing fields (None: sealed already); the cycle calls
    #: it off the event loop, so it touches no folder state
    seal: Callable[[SessionWrite], SessionWrite] | None = None


@dataclass
class Folded:
    """What a folder made of a batch."""

    #: live: the session writes, built now (on state the previous batch's write may
    #: still refuse; the cycle drops those and asks :meth:`Folder.fold_later`)
    writes: list[SessionFold] = field(default_factory=list)
    #: sessions this folder folds only after what is in flight has settled (it reads
    #: their stored rows): the cycle asks :meth:`Folder.fold_later` for them then
    later: list[str] = field(default_factory=list)
    #: the sessions folded (deferred: written by the next flush)
    sessions: list[str] = field(default_factory=list)
    #: records that cannot be decoded
    dead: list[DeadLetter] = field(default_factory=list)
    #: records at or below the progress or a session's stored offset
    skipped: int = 0

    def add(self, other: Folded) -> None:
        self.writes += other.writes
        self.sessions += other.sessions
        self.dead += other.dead
        self.skipped += other.skipped


class Folder(Protocol):
    """Folds batches into session writes; keeps its own per-session state (see the module)."""

    #: how the batches are folded, as reports and logs name it (``python``, ``native``)
    name: str

    async def fold(self, batch: Batch) -> Folded:
        """Fold ``batch`` on the state kept so far (state the previous batch's write may
        still refuse). Live: the writes are built; deferred: kept for :meth:`take`."""
        ...

    async def fold_later(self, batch: Batch, sessions: Collection[str]) -> Folded:
        """Fold ``batch``'s records of ``sessions`` now that nothing is in flight: the
        ones this folder put off (:attr:`Folded.later`), and the ones the cycle had
        refused (their stored rows are read again)."""
        ...

    def refused(self, session_id: str) -> None:
        """A write of the session did not apply: what is kept of it is forgotten."""
        ...

    def settled(self) -> None:
        """The batch is written, its refused sessions refolded: what the folder lent
        for it (a session folded another way just this once) goes back."""
        ...

    def take(self) -> list[SessionFold]:
        """Deferred: the writes of every session folded since the last take."""
        ...

    def flushed(self, fold: SessionFold, outcome: WriteOutcome) -> None:
        """Deferred: the outcome of a write :meth:`take` gave, sealed as it was sent
        (called as each comes back, while the next batches fold)."""
        ...

    def forget(self, partitions: Collection[tuple[str, int]] | None = None) -> None:
        """Drop what is kept of the sessions of these (topic, partition)s (None: all)."""
        ...

    def holds(self, session_id: str) -> bool:
        """Whether the session is kept here (a rebuild between batches leaves it alone)."""
        ...

    def keep_digests(self) -> Digests | None:
        """From now on, keep the digests of the sealed fields each write stores (replay's
        compare opens only the live row then); the map they are kept in, or None when
        this folder keeps none."""
        ...
