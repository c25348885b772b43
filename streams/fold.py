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
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sessionstream.core.pipeline import Record
from sessionstream.streams.ports import DeadLetter, SessionWrite, WriteOutcome

#: Per session, per sealed field a write stored: (the stored value's reference, the
#: digest of its clear text) (replay's compare, ADR 0015).
Digests = Mapping[str, Mapping[str, tuple[str, bytes]]]


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
