"""The compaction agent: a writer that summarizes without the lease and appends with it.

One call to :meth:`Compactor.compact` runs one attempt on one session:

1. read the admitted log back from Kafka (no lease: the session's owner keeps writing);
2. decide, pick the surface range, summarize and gate it (:mod:`sessionstream.core.compaction`)
   — the slow part, done while holding nothing;
3. take the lease (epoch + 1, no recovery, no end-seed: the owner's open turn is not
   ours to close), read the log as it is *now*, and append the lifecycle checked against
   it (:func:`~sessionstream.core.compaction.commit_drafts`): events the owner appended
   meanwhile are kept and ours get the next seqs; a run that is no longer a contiguous
   run of surface nodes ends the attempt ``abandoned``;
4. flush, hand the next seq off and release the lease.

Under the lease, an unmatched ``compaction/start`` in the log can only be a crashed
attempt (nobody else writes while we hold it), so it is closed ``abandoned`` first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.compaction import (
    DEFAULT_BUDGET,
    Attempt,
    Budget,
    OfflineSummarizer,
    Summarizer,
    attempt_compaction,
    commit_drafts,
)
from sessionstream.core.errors import InvariantViolation
from sessionstream.core.events import Draft, Event
from sessionstream.core.recovery import recover
from sessionstream.core.session import Session
from sessionstream.core.surface import token_estimate
from sessionstream.producers.errors import LeaseUnavailable, SessionNotFound
from sessionstream.producers.writer import SessionWriter, WriterConfig, default_writer_id, read_log


@dataclass(frozen=True)
class CompactionReport:
    """What one attempt did: outcome, numbers and the seqs it wrote."""

    session_id: str
    outcome: str  # completed | failed | abandoned | not-needed
    reason: str | None
    read_seq: int  # the session's next seq when it was read for summarizing
    commit_seq: int | None  # the first seq appended under the lease (None: nothing)
    appended: list[dict[str, Any]] = field(default_factory=list)  # {seq, type}
    surface_tokens_before: int = 0
    surface_tokens_after: int = 0
    attempt: dict[str, Any] | None = None
    epoch: int | None = None
    summarize_ms: int = 0

    @property
    def arrived_meanwhile(self) -> int:
        """Events the owner appended between our read and our commit."""
        return 0 if self.commit_seq is None else self.commit_seq - self.read_seq

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "outcome": self.outcome, "reason": self.reason,
            "read_seq": self.read_seq, "commit_seq": self.commit_seq,
            "arrived_meanwhile": self.arrived_meanwhile, "appended": self.appended,
            "surface_tokens_before": self.surface_tokens_before,
            "surface_tokens_after": self.surface_tokens_after, "epoch": self.epoch,
            "summarize_ms": self.summarize_ms, "attempt": self.attempt,
        }


class Compactor:
    """Compacts sessions of one tenant's topic; one attempt per :meth:`compact` call."""

    def __init__(
        self,
        cfg: WriterConfig,
        *,
        summarizer: Summarizer | None = None,
        budget: Budget | int = DEFAULT_BUDGET,
        writer_id: str | None = None,
        lease_wait_s: float = 10.0,
        on_summarized: Callable[[Attempt], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()
        self.budget = budget if isinstance(budget, Budget) else Budget(tokens=budget)
        self.writer_id = writer_id or f"compactor/{default_writer_id()}"
        self.lease_wait_s = lease_wait_s
        self._on_summarized = on_summarized  # tests: write concurrently at this point

    def compact(self, session_id: str, *, trigger: str | None = None,
                timeout: float = 30.0) -> CompactionReport:
        """Read, summarize without the lease, append the lifecycle with it."""
        rb = read_log(self.cfg, session_id, timeout=timeout)
        if not rb.admitted:
            raise SessionNotFound(session_id)
        snapshot = Session.from_events(rb.admitted)
        read_seq = snapshot.next_seq
        for draft in recover(snapshot)[:1]:
            if draft.type == "compaction/end":  # a crashed attempt: closed under the lease
                snapshot.append(draft)
        started = time.monotonic()
        attempt = attempt_compaction(snapshot, self.summarizer, trigger=trigger,
                                     budget=self.budget)
        summarize_ms = int((time.monotonic() - started) * 1000)
        tokens = token_estimate(snapshot.derive_messages())
        if attempt is None:
            return CompactionReport(session_id, "not-needed", None, read_seq, None,
                                    surface_tokens_before=tokens, surface_tokens_after=tokens,
                                    summarize_ms=summarize_ms)
        if self._on_summarized is not None:
            self._on_summarized(attempt)
        writer = self._take_lease(session_id, timeout)
        try:
            session = writer.session
            commit_seq = session.next_seq
            before = token_estimate(session.derive_messages())
            written: list[Event] = []
            stale = session.open_compaction
            if stale is not None:
                written += [writer.append(d) for d in recover(session)[:1]]
            written += self._append_lifecycle(writer, commit_drafts(attempt, session))
            writer.flush(timeout)
            after = token_estimate(session.derive_messages())
            end = written[-1].data
            return CompactionReport(
                session_id, end["outcome"], end.get("reason"), read_seq, commit_seq,
                [{"seq": e.seq, "type": e.type} for e in written], before, after,
                attempt.to_json(), writer.epoch, summarize_ms,
            )
        finally:
            writer.close(timeout)

    def _take_lease(self, session_id: str, timeout: float) -> SessionWriter:
        deadline = time.monotonic() + self.lease_wait_s
        while True:
            try:
                return SessionWriter.open(self.cfg, session_id, writer_id=self.writer_id,
                                          repair=False, timeout=timeout)
            except LeaseUnavailable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    @staticmethod
    def _append_lifecycle(writer: SessionWriter, drafts: list[Draft]) -> list[Event]:
        """Append the drafts; if one is refused after the start, end the attempt failed."""
        written: list[Event] = []
        for draft in drafts:
            try:
                written.append(writer.append(draft))
            except InvariantViolation as exc:
                if not written:
                    raise
                cid = written[0].data["compaction_id"]
                written.append(writer.append("compaction/end", {
                    "compaction_id": cid, "outcome": "failed",
                    "reason": f"refused at commit: {exc.rule}: {exc.detail}",
                }))
                break
        return written
