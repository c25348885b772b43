"""What the processor is made of: records in, the core's pure functions, and its edges.

The processor (``streams.processor``) depends only on these names, so unit tests pass
an in-memory sink and log reader while the worker and replay pass Redis and Kafka ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sessionstream.core.catalog import Catalog
from sessionstream.core.events import Event


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the events topic, as consumed (value still encoded)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that cannot be decoded: it goes to the dead-letter topic with a reason."""

    record: Record
    reason: str  # short code: corrupt | empty | key_mismatch
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


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    status: str  # applied | stale (stored at or past last_offset) | conflict (base moved)
    stored_offset: int


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
    async def send(self, letters: Sequence[DeadLetter]) -> None:
        """Deliver to the dead-letter topic; returns only once they are written."""
        ...


@dataclass(frozen=True)
class Core:
    """The core's pure functions the processor drives (injected, so tests can swap them)."""

    registry: Any  # sessionstream.core.projections.Registry
    catalog: Catalog
    decode: Callable[[bytes], Event]
    check_readable: Callable[[Event, Catalog], bool]
    admit: Callable[[Any, Event], Any]  # (AdmissionState, Event) -> Decision
    new_admission: Callable[[str], Any]  # session_id -> AdmissionState
    load_admission: Callable[[Any], Any]  # JSON -> AdmissionState
    record_rejection: Callable[[Any, Any], Any]
    quarantine: Callable[[Any, str, int], Any]  # (index state, reason, seq) -> index state
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def default(cls) -> Core:
        from sessionstream.core import codec
        from sessionstream.core.admission import AdmissionState, admit
        from sessionstream.core.catalog import default_catalog
        from sessionstream.core.projections import default_registry, quarantine, record_rejection

        return cls(
            registry=default_registry(),
            catalog=default_catalog(),
            decode=codec.decode,
            check_readable=codec.check_readable,
            admit=admit,
            new_admission=AdmissionState,
            load_admission=AdmissionState.from_json,
            record_rejection=record_rejection,
            quarantine=quarantine,
        )
