"""The automatic compaction trigger: follow the tenant's change feed, compact under pressure.

:class:`CompactionWatcher` reads the tenant's change feed (``KeySpace.tenant_changes``)
with XREAD from the last entry it processed, reads each named session's ``surface`` view
(``streams.read.read_views``), asks the policy
(:func:`~sessionstream.core.compaction.should_compact`)
and, on ``pressure`` or ``overflow``, runs one :meth:`Compactor.compact` attempt.

- **Resumes**: the feed cursor lives in Redis under ``<p>:{<t>}:compaction-watch:<name>``
  (hash: ``generation``, ``entry_id``; see ``sessionstream.core.rows``), written after
  every attempt and every step.
  A new generation (``sessionstream replay``) starts from the head of its feed.
- **At most one attempt per session per as_of_seq** and a per-session cooldown
  (:class:`AttemptLedger`, pure, clock injected); the compactor's own events never
  trigger a second attempt, since they end at the seq the ledger remembers.
- **Bounded**: one step reads at most ``batch`` feed entries and makes at most
  ``max_attempts`` attempts; the cursor stops before the first session it did not get to.
- **Never crashes on one session**: an error is logged with the session id and the
  exception type only (never content) and counted in ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from sessionstream.core.compaction import Budget, Decision, should_compact
from sessionstream.core.messages import Message
from sessionstream.core.rows import KeySpace, WatchCursorFields, read_change_entry
from sessionstream.governance.rows import RowCipher
from sessionstream.producers.compactor import CompactionReport, Compactor
from sessionstream.producers.writer import WriterConfig
from sessionstream.streams.read import LiveSnapshot, current_generation, read_views

# The logger keeps the name it had before the module moved here, for log configs.
log = logging.getLogger("sessionstream.producers.compaction_watch")


# -- de-duplication and cooldown (pure) ------------------------------------------------------

@dataclass
class _Mark:
    end_seq: int  # the last seq the attempt saw or wrote
    at: float  # clock time of the attempt


class AttemptLedger:
    """Which sessions may be attempted now: once per as_of_seq, then a cooldown.

    After an attempt that ended at seq ``E`` (the compactor's last appended event, or
    the seq it read when nothing was appended), the session is skipped until its
    projection's ``as_of_seq`` is past ``E`` *and* ``cooldown_s`` has passed.
    """

    def __init__(self, cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 max_sessions: int = 100_000) -> None:
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.max_sessions = max_sessions  # oldest marks are forgotten past this many
        self._marks: dict[str, _Mark] = {}

    def check(self, session_id: str, as_of_seq: int) -> str | None:
        """None if an attempt may run now, else why not: ``same-seq`` or ``cooldown``."""
        mark = self._marks.get(session_id)
        if mark is None:
            return None
        if as_of_seq <= mark.end_seq:
            return "same-seq"
        if self.clock() - mark.at < self.cooldown_s:
            return "cooldown"
        return None

    def ready_at(self, session_id: str) -> float | None:
        """When the cooldown of ``session_id`` ends (None: no attempt remembered)."""
        mark = self._marks.get(session_id)
        return None if mark is None else mark.at + self.cooldown_s

    def record(self, session_id: str, end_seq: int) -> None:
        self._marks.pop(session_id, None)  # re-insert: dict order is attempt order
        self._marks[session_id] = _Mark(end_seq, self.clock())
        while len(self._marks) > self.max_sessions:
            del self._marks[next(iter(self._marks))]


# -- the watcher ------------------------------------------------------------------------------

@dataclass
class WatchSummary:
    """Counts over one or more steps (``sessions`` seen once per step they appear in)."""

    entries: int = 0
    sessions: int = 0
    compacted: int = 0
    not_needed: int = 0
    skipped: int = 0  # same as_of_seq as the last attempt, cooldown, or quarantined
    failed: int = 0
    reports: list[dict[str, Any]] = field(default_factory=list)  # ids, outcomes, numbers

    def add(self, other: WatchSummary) -> None:
        for name in ("entries", "sessions", "compacted", "not_needed", "skipped", "failed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.reports += other.reports

    def to_json(self) -> dict[str, Any]:
        return {"entries": self.entries, "sessions": self.sessions,
                "compacted": self.compacted, "not_needed": self.not_needed,
                "skipped": self.skipped, "failed": self.failed, "reports": self.reports}


class CompactionWatcher:
    """Follows one tenant's change feed and compacts sessions the policy says need it."""

    def __init__(
        self,
        cfg: WriterConfig,
        *,
        budget: Budget,
        keys: KeySpace,
        redis: Redis,
        name: str = "default",
        compactor: Compactor | None = None,
        ledger: AttemptLedger | None = None,
        batch: int = 200,
        max_attempts: int = 4,
        block_ms: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch < 1 or max_attempts < 1:
            raise ValueError("batch and max_attempts must be at least 1")
        self.cfg = cfg
        self.rows = RowCipher(cfg.cipher) if cfg.cipher is not None else None
        self.budget = budget
        self.keys = keys
        self.redis = redis
        self.compactor = compactor or Compactor(cfg, budget=budget)
        self.ledger = ledger or AttemptLedger(clock=clock)
        self.batch = batch
        self.max_attempts = max_attempts
        self.block_ms = block_ms
        self.clock = clock
        self._key = keys.compaction_watch(name)
        self._cursor: tuple[int, str] | None = None  # (generation, entry id)
        self._due: dict[str, int] = {}  # in cooldown with a newer seq: re-checked when due

    async def _load_cursor(self) -> tuple[int, str]:
        gen = await current_generation(self.redis, self.keys)
        if self._cursor is None:
            row = await self.redis.hgetall(self._key)
            stored = {_s(k): _s(v) for k, v in row.items()}
            entry_id = stored.get(WatchCursorFields.ENTRY_ID)
            if stored.get(WatchCursorFields.GENERATION) == str(gen) and entry_id:
                self._cursor = (gen, entry_id)
        if self._cursor is None or self._cursor[0] != gen:
            # first start, or a replay switched readers: read that generation's whole feed
            self._cursor = (gen, "0-0")
        return self._cursor

    async def _save_cursor(self, gen: int, entry_id: str) -> None:
        self._cursor = (gen, entry_id)
        await self.redis.hset(self._key, mapping={WatchCursorFields.GENERATION: gen,
                                                  WatchCursorFields.ENTRY_ID: entry_id})

    async def step(self, block_ms: int | None = None) -> WatchSummary:
        """Process at most ``batch`` feed entries (waiting up to ``block_ms`` for one)."""
        gen, cursor = await self._load_cursor()
        out = WatchSummary()
        reply = await self.redis.xread({self.keys.tenant_changes(gen): cursor},
                                       count=self.batch, block=block_ms)
        entries = _entries(reply)
        handled: set[str] = set()
        last = cursor
        for entry_id, fields in entries:
            sid = _session_of(fields)
            if sid is not None and sid not in handled:
                if out.compacted + out.failed >= self.max_attempts:
                    break  # bounded: the cursor stays before this entry
                handled.add(sid)
                self._due.pop(sid, None)
                await self._consider(gen, sid, out)
            last = entry_id
            out.entries += 1
        for sid, _seq in list(self._due.items()):  # cooldowns that ended meanwhile
            if out.compacted + out.failed >= self.max_attempts:
                break
            if sid not in handled and (self.ledger.ready_at(sid) or 0) <= self.clock():
                del self._due[sid]
                handled.add(sid)
                await self._consider(gen, sid, out)
        out.sessions = len(handled)
        if last != cursor:
            await self._save_cursor(gen, last)
        return out

    async def _consider(self, gen: int, sid: str, out: WatchSummary) -> None:
        """Read the session's surface view, decide, and run at most one attempt."""
        try:
            snap = await read_views(self.redis, self.keys, sid, generation=gen,
                                    rows=self.rows)
            decision = _decide(snap, self.budget)
        except Exception as exc:  # a malformed view must not stop the watcher
            log.warning("compaction watch: session %s view unreadable (%s)", sid,
                        type(exc).__name__)
            out.failed += 1
            return
        if snap is not None and snap.quarantine is not None:
            out.skipped += 1  # a quarantined session is not the agent's to write to
            return
        if snap is None or decision is None:  # unknown session or no surface view yet
            out.not_needed += 1
            return
        if not decision.compact:
            out.not_needed += 1
            return
        why = self.ledger.check(sid, snap.as_of_seq)
        if why is not None:
            if why == "cooldown":
                self._due[sid] = snap.as_of_seq
            out.skipped += 1
            return
        await self._attempt(gen, sid, snap.as_of_seq, decision, out)

    async def _attempt(self, gen: int, sid: str, as_of_seq: int, decision: Decision,
                       out: WatchSummary) -> None:
        try:
            report: CompactionReport = await asyncio.to_thread(
                self.compactor.compact, sid, trigger=decision.trigger)
        except Exception as exc:  # one session's error is counted, never fatal
            self.ledger.record(sid, as_of_seq)
            out.failed += 1
            log.warning("compaction watch: session %s attempt raised %s", sid,
                        type(exc).__name__)
            out.reports.append({"session_id": sid, "outcome": "error",
                                "error": type(exc).__name__, "as_of_seq": as_of_seq})
            return
        end_seq = max([as_of_seq, report.read_seq - 1] + [a["seq"] for a in report.appended])
        self.ledger.record(sid, end_seq)
        if report.outcome == "completed":
            out.compacted += 1
        elif report.outcome == "not-needed":
            out.not_needed += 1
        else:
            out.failed += 1
        log.info("compaction watch: session %s %s (trigger %s, seqs up to %d)", sid,
                 report.outcome, decision.trigger, end_seq)
        out.reports.append({"session_id": sid, "outcome": report.outcome,
                            "trigger": decision.trigger, "as_of_seq": as_of_seq,
                            "end_seq": end_seq,
                            "surface_tokens_before": report.surface_tokens_before,
                            "surface_tokens_after": report.surface_tokens_after})

    async def run(self, stop: asyncio.Event | None = None, *,
                  max_seconds: float | None = None,
                  on_step: Callable[[WatchSummary], None] | None = None) -> WatchSummary:
        """Step until ``stop`` is set or ``max_seconds`` have passed; the summed counts.

        ``on_step`` sees each step's counts (the compactor's metrics)."""
        total = WatchSummary()
        deadline = None if max_seconds is None else self.clock() + max_seconds
        while not (stop is not None and stop.is_set()):
            if deadline is not None and self.clock() >= deadline:
                break
            got = await self.step(block_ms=self.block_ms)
            if on_step is not None:
                on_step(got)
            total.add(got)
        return total

    async def drain(self) -> WatchSummary:
        """Step (without blocking) until the feed holds nothing new: ``--once``."""
        total = WatchSummary()
        while True:
            got = await self.step()
            total.add(got)
            if got.entries == 0:
                return total


def _decide(snap: LiveSnapshot | None, budget: Budget) -> Decision | None:
    """The automatic policy over the surface view (None: no surface view yet)."""
    if snap is None:
        return None
    surface = snap.views.get("surface")
    if not isinstance(surface, dict):
        return None
    messages = [Message.from_json(m) for m in surface.get("messages", [])]
    return should_compact(messages, budget.tokens, pressure=budget.pressure)


def _session_of(fields: dict[str, str]) -> str | None:
    change = read_change_entry(fields)
    sid = change.get("session") if change is not None else None
    return sid if isinstance(sid, str) and sid else None


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """XREAD's entries of the one stream read, RESP2 (list) or RESP3 (dict)."""
    streams = reply.values() if isinstance(reply, dict) else [e for _k, e in reply or ()]
    return [(_s(eid), {_s(k): _s(v) for k, v in (fields or {}).items()})
            for entries in streams for eid, fields in entries]


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
