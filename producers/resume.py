"""Reading a session back for a writer: the admitted log, and proofs of admission.

:func:`read_back` reads the admitted log a writer resumes from (the per-session index
narrows the offset range; without it the partition the key hashes to is scanned).
:class:`AdmissionProof` answers "were these events of mine admitted?" by reading the
partition on from where the last read stopped, continuing the same admission state —
so each proof reads only the records written since the previous one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from producers.config import WriterConfig
from producers.edges import WriterEdges
from producers.readback import ReadBack, Rejection, read_session
from sessionstream.core.admission import REJECTIONS, AdmissionState
from sessionstream.core.events import Event


def read_back(
    edges: WriterEdges, session_id: str, was_clean: bool, use_index: bool, timeout: float
) -> ReadBack:
    """The session's admitted log as every reader derives it (and the state after it)."""
    cfg = edges.cfg
    idx = edges.index.get(cfg.tenant, session_id) if use_index else None
    if idx is not None:
        end = idx.last_offset + 1 if was_clean else None
        return read_session(
            cfg.bootstrap, cfg.topic, session_id, decode=edges.decode,
            partition=idx.partition, start=idx.first_offset, end=end, timeout=timeout,
            consumer_config=dict(cfg.kafka_security),
        )
    # No index: scan the whole partition the key hashes to.
    return read_session(cfg.bootstrap, cfg.topic, session_id, decode=edges.decode,
                        timeout=timeout, consumer_config=dict(cfg.kafka_security))


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
            consumer_config=dict(cfg.kafka_security),
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
