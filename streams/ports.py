"""The processor's edges: where projections are stored, logs read back, dead letters sent.

The processor (``streams.processor``) drives the core's reader pipeline
(``sessionstream.core.pipeline``) and depends only on these names for everything else,
so unit tests pass an in-memory sink and log reader while the worker and replay pass
Redis and Kafka ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sessionstream.core.pipeline import DeadLetterReason, Record


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that cannot be decoded: it goes to the dead-letter topic with a reason."""

    record: Record
    reason: DeadLetterReason
    detail: str  # what is wrong, for an operator (never the record's content)


@dataclass(frozen=True, slots=True)
class SessionWrite:
    """Everything one script call writes for one session: fields + idempotency guard.

    ``base_offset`` is the ``as_of_offset`` the fold started from (compare-and-set);
    ``last_offset`` the offset of the last record folded. ``force`` rewrites at the same
    offset (a rebuilt unit with no new records).
    """

    session_id: str
    partition: int
    base_offset: int
    last_offset: int
    as_of_seq: int
    fields: Mapping[str, str]
    changed: tuple[str, ...]
    activity_ms: int
    force: bool = False
    #: fields to delete in the same call (chunks past a chunked unit's new count)
    deletes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    status: str  # applied | stale (stored at or past last_offset) | conflict (base moved)
    stored_offset: int


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What :meth:`BatchSink.write_batch` did with a live batch in one call."""

    #: the generation pointer names another generation: nothing was written
    moved: bool
    #: per write, as :meth:`Sink.write_sessions` returns them (empty when moved)
    outcomes: tuple[WriteOutcome, ...] = ()
    #: the progress was written (no session conflicted)
    progress_written: bool = False


@dataclass
class BatchReport:
    """What one batch did (the engines log it and count it in their metrics)."""

    records: int = 0
    skipped: int = 0  # at or below partition progress or a session's as_of_offset
    sessions_written: int = 0
    sessions_noop: int = 0
    conflicts: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    #: Admission verdicts other than ``admitted`` of the records written this batch
    #: (``duplicate``, ``stale_epoch``, ...), counted once per applied write.
    verdicts: dict[str, int] = field(default_factory=dict)
    rebuilt: dict[str, tuple[str, ...]] = field(default_factory=dict)


class BatchSink(Protocol):
    """A sink that writes a live batch in one atomic call (``streams.sink.RedisSink`` on
    a single Redis, ``streams.memory.MemorySink``): the generation check, every session's
    compare-and-set write, the index and feed of the applied ones, and the progress when
    none conflicted."""

    async def write_batch(self, gen: int, writes: Sequence[SessionWrite], group: str,
                          progress: Mapping[str, int]) -> BatchOutcome | None:
        """None: not in one call here (a Redis Cluster, a batch past one call's bounds);
        the caller checks the generation and writes with write_sessions/write_tenant."""
        ...


class Sink(Protocol):
    """Where projections live (Redis in production, a dict in unit tests)."""

    async def generation(self) -> int: ...

    async def load(self, gen: int, session_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """Stored fields per session (an empty dict: nothing stored yet)."""
        ...

    async def write_sessions(self, gen: int, writes: Sequence[SessionWrite]) -> list[WriteOutcome]:
        """One script call per session (atomic per session), pipelined in one round trip."""
        ...

    async def write_tenant(
        self, gen: int, writes: Sequence[SessionWrite], group: str, progress: Mapping[str, int]
    ) -> None:
        """Session index, change feed and partition progress (``topic:partition`` → offset)."""
        ...

    async def load_progress(self, group: str, keys: Sequence[str]) -> dict[str, int]: ...

    async def session_ids(self, gen: int, start: int, count: int) -> list[str]:
        """Session ids of the index, by rank (oldest activity first)."""
        ...

    async def load_fields(
        self, gen: int, session_ids: Sequence[str], fields: Sequence[str]
    ) -> dict[str, dict[str, str]]:
        """Only ``fields`` of each session hash (absent fields left out)."""
        ...

    async def writer_first_offset(self, session_id: str) -> int | None:
        """The writer-side index's first offset of a session, if the writer keeps one."""
        ...


class LogReader(Protocol):
    """Reads a session's records back from the events topic (state_version rebuilds)."""

    async def read_session(
        self, topic: str, partition: int, from_offset: int, upto_offset: int, session_id: str
    ) -> list[Record]:
        """Records of ``session_id`` with ``from_offset <= offset <= upto_offset``."""
        ...


class DeadLetters(Protocol):
    async def send(self, letters: Sequence[DeadLetter]) -> Sequence[DeadLetter]:
        """Deliver to the dead-letter topic (whole, or by reference when too big for it);
        returns, after bounded retries, the letters that could still not be written — the
        processor keeps their partitions' progress behind them and sends them again."""
        ...
