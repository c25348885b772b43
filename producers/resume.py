"""Reading a session back for a writer: the admitted log, and proofs of admission.

:func:`read_back` reads the admitted log a writer resumes from: the runs of the
per-session index (verified, see :func:`untrusted`), else the partition the key hashes to.
:class:`AdmissionProof` answers "were these events of mine admitted?" by reading the
partition on from where the last read stopped, continuing the same admission state —
so each proof reads only the records written since the previous one.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sessionstream.core.admission import REJECTIONS, AdmissionState
from sessionstream.core.events import Event
from sessionstream.producers.config import WriterConfig
from sessionstream.producers.edges import WriterEdges
from sessionstream.producers.errors import RedisUnavailable
from sessionstream.producers.index import LogIndex, merge_runs
from sessionstream.producers.readback import ReadBack, Rejection, read_session

log = logging.getLogger("sessionstream.producers.writer")


def read_back(
    edges: WriterEdges, session_id: str, was_clean: bool, use_index: bool, timeout: float,
    *, next_seq_hint: int | None = None, repair: bool = False,
) -> ReadBack:
    """The session's admitted log as every reader derives it (and the state after it).

    With the session index: read its runs, and the partition after its last offset
    unless the index is clean; trust that read only if :func:`untrusted` finds nothing
    wrong, else (and without an index) scan the whole partition the key hashes to.
    ``repair`` (a resumer holding the lease): record in the index the admitted records
    the read found outside it; after a scan, rebuild the index from what it found.
    """
    rb, idx = _read(edges, session_id, was_clean, use_index, timeout, next_seq_hint)
    if repair and use_index:
        _repair(edges, session_id, rb, idx)
    return rb


def _repair(edges: WriterEdges, session_id: str, rb: ReadBack, idx: LogIndex | None) -> None:
    cfg = edges.cfg
    replace = rb.via == "scan" and idx is not None  # the index was contradicted
    runs = index_repairs(rb, None if replace else idx)
    if not runs:
        return
    try:
        edges.index.record_runs(cfg.tenant, session_id, rb.partition, runs, replace=replace)
    except RedisUnavailable:
        log.warning("session %s: session index not repaired (Redis unreachable)", session_id)


def _read(edges: WriterEdges, session_id: str, was_clean: bool, use_index: bool,
          timeout: float, next_seq_hint: int | None) -> tuple[ReadBack, LogIndex | None]:
    cfg = edges.cfg
    idx = edges.index.get(cfg.tenant, session_id) if use_index else None
    if idx is not None:
        ranges: list[tuple[int, int | None]] = [(lo, hi + 1) for lo, hi in idx.runs]
        if not was_clean:
            ranges.append((idx.last_offset + 1, None))
        rb = read_session(
            cfg.bootstrap, cfg.topic, session_id, decode=edges.decode,
            partition=idx.partition, ranges=ranges, timeout=timeout,
            consumer_config=dict(cfg.kafka_security), decode_many=edges.decode_many,
        )
        why = untrusted(rb, idx, next_seq_hint)
        if why is None:
            rb.via = "index"
            return rb, idx
        log.info("session %s: session index not trusted (%s); scanning the partition",
                 session_id, why)
    # No index, or one the read contradicts: scan the whole partition the key hashes to.
    rb = read_session(cfg.bootstrap, cfg.topic, session_id, decode=edges.decode,
                      timeout=timeout, consumer_config=dict(cfg.kafka_security),
                      decode_many=edges.decode_many)
    if idx is not None and idx.partition != rb.partition:
        log.warning("session %s: the index names partition %d, the key hashes to %d",
                    session_id, idx.partition, rb.partition)
    return rb, idx


def untrusted(rb: ReadBack, idx: LogIndex, next_seq_hint: int | None) -> str | None:
    """Why a read of the index's runs (plus the tail unless clean) may differ from a scan
    of the whole partition; None when it cannot.

    Every offset a writer records was proven admitted, so the record at ``last_offset``
    is admitted by every reader. If this read admits it too, over a history in which
    every event names its predecessor (``prev_event_id``), the admitted chain up to it
    is the one every reader admits: walking back from it by predecessor ids leaves no
    choice (event ids are unique). After it, the read covers the whole tail (or, clean,
    nothing admitted lies there). A stale index (runs missing records, offsets of an
    earlier topic, a legacy unlinked history) fails one of these checks.
    """
    if not rb.admitted:
        return "nothing of the session in the indexed runs"
    if idx.last_offset not in set(rb.offsets.values()):
        return f"the record at the index's last offset {idx.last_offset} is not admitted"
    for e in rb.admitted[1:]:
        if e.prev_event_id is None:
            return f"seq {e.seq} names no predecessor (a history written before v2)"
    if next_seq_hint is not None and rb.next_seq < next_seq_hint:
        return (f"the previous holder handed off seq {next_seq_hint}, the runs hold "
                f"{rb.next_seq} events")
    return None


def index_repairs(rb: ReadBack, idx: LogIndex | None) -> tuple[tuple[int, int], ...]:
    """Runs of admitted records ``rb`` found outside the index's runs (a crashed writer's
    unrecorded flush, or every run after a scan without an index): what a resumer
    holding the lease records, so the next resume finds them through the index."""
    covered = idx.runs if idx is not None and idx.partition == rb.partition else ()
    starts = [lo for lo, _ in covered]  # sorted and disjoint (merge_runs)

    def inside(o: int) -> bool:
        i = bisect.bisect_right(starts, o) - 1
        return i >= 0 and o <= covered[i][1]

    outside = sorted(o for o in rb.offsets.values() if not inside(o))
    return merge_runs([(o, o) for o in outside]) if outside else ()


def read_log(cfg: WriterConfig, session_id: str, *, use_index: bool = True,
             timeout: float = 30.0) -> ReadBack:
    """Read a session's admitted log (and rejections) as every reader would derive it.

    Bounded: with every broker down it raises BrokerUnavailable in about a second.
    """
    edges = WriterEdges(cfg)
    try:
        rb = read_back(edges, session_id, False, use_index, timeout)
        if edges.opener is not None:
            rb.unopened = edges.opener.shredded(session_id)
        return rb
    finally:
        edges.redis.close()


@dataclass(frozen=True)
class Verdicts:
    """What one proof read found about the events asked for."""

    admitted: list[Event]  # every event admitted in the range read, in seq order
    mine_admitted: list[str]  # event ids of ours that were admitted
    mine_refused: list[Rejection]  # ours that were refused, with the verdict
    mine_missing: list[str]  # ours not found in the range read (not persisted)


class AdmissionProof:
    """The admission state of one session up to an offset, advanced by proof reads."""

    def __init__(self, session_id: str, partition: int | None, end: int | None,
                 state: AdmissionState | None) -> None:
        self.session_id = session_id
        self.partition = partition
        self.end = end  # the first offset not yet folded (None: from our first record)
        self.state = state if state is not None else AdmissionState(session_id)

    @classmethod
    def after(cls, rb: ReadBack) -> AdmissionProof:
        """Continue from the end of a read-back."""
        return cls(rb.session_id, rb.partition, rb.end, rb.state)

    def read(self, edges: WriterEdges, mine: Sequence[Event], offsets: dict[str, int],
             partition: int, timeout: float) -> Verdicts:
        """Fold the partition on up to the last of ``mine`` (acknowledged at ``offsets``)."""
        cfg = edges.cfg
        ids = {e.event_id for e in mine}
        last = max(offsets[e] for e in ids if e in offsets)
        start = self.end
        if start is None:  # a new session: nothing of it precedes our first record
            start = min(offsets[e] for e in ids if e in offsets)
        rb = read_session(
            cfg.bootstrap, cfg.topic, self.session_id, decode=edges.decode,
            partition=partition, start=start, end=last + 1, timeout=timeout, state=self.state,
            consumer_config=dict(cfg.kafka_security), decode_many=edges.decode_many,
        )
        if rb.state is not None:
            self.state = rb.state
        self.end = max(rb.end, start)
        self.partition = partition
        admitted = [e for e in rb.offsets if e in ids]
        got = set(admitted)
        refused = [r for r in rb.rejections
                   if r.event_id in ids and r.verdict in REJECTIONS and r.event_id not in got]
        seen = set(admitted) | {r.event_id for r in refused}
        missing = [e.event_id for e in mine if e.event_id not in seen]
        return Verdicts(list(rb.admitted), admitted, refused, missing)
