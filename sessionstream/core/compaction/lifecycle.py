"""The compaction lifecycle: decide, select, summarize, gate, then the drafts to append.

::

    compaction/start    {compaction_id, trigger, tokens, budget_tokens, reason}
    compaction/summary  {first_position, last_position, shadowed_seqs, tokens_before,
                         tokens_after, summarizer{provider, model, config}, pruned, kept,
                         gate}
    user/message        surface_op=replace, source_event_seqs = shadowed_seqs
    compaction/end      completed
  or
    compaction/start → compaction/end {outcome: failed | abandoned, reason}

:func:`plan_compaction` does it at once; the compaction agent splits it into
:func:`attempt_compaction` (slow, holds no lease) and :func:`commit_drafts` (under the
lease, checked against the session as it is then). A summary the gate refuses is never
committed: the attempt ends ``failed`` and the surface is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sessionstream.core.compaction.exposure import class_exposure
from sessionstream.core.compaction.facts import Facts
from sessionstream.core.compaction.gate import ExposureCheck, GateReport, gate
from sessionstream.core.compaction.policy import (
    DEFAULT_BUDGET,
    REASON_QUALITY,
    REASON_RANGE_CHANGED,
    REASON_SUMMARIZER,
    Budget,
    Decision,
    should_compact,
)
from sessionstream.core.compaction.pruning import Pruned
from sessionstream.core.compaction.ranges import Range, select_range
from sessionstream.core.compaction.summarizer import OfflineSummarizer, Summarizer, build_request
from sessionstream.core.errors import CompactionBusy, SummarizerError
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.messages import Kind, Message, Role
from sessionstream.core.session import Session
from sessionstream.core.surface import message_tokens, token_estimate

# -- the lifecycle ------------------------------------------------------------------------

@dataclass(frozen=True)
class Attempt:
    """A summarized (or failed) attempt, not yet in the log."""

    compaction_id: str
    decision: Decision
    provider: str
    model: str
    config: Mapping[str, JsonValue]
    range: Range | None = None
    summary: str | None = None
    tokens_after: int | None = None
    pruned: Pruned = field(default_factory=Pruned)
    facts: Facts | None = None
    failure: str | None = None  # why it must end failed (None: commit it)
    gate: GateReport | None = None  # the quality gate's verdict (None: never summarized)

    def to_json(self) -> dict[str, Any]:
        r = self.range
        return {
            "compaction_id": self.compaction_id, "decision": self.decision.to_json(),
            "summarizer": {"provider": self.provider, "model": self.model,
                           "config": dict(self.config)},
            "range": None if r is None else {
                "first_position": r.first_position, "last_position": r.last_position,
                "shadowed_seqs": list(r.seqs), "tokens_before": r.tokens_before},
            "tokens_after": self.tokens_after, "failure": self.failure,
            "pruned": {"results": self.pruned.results, "chars": self.pruned.chars},
            "gate": None if self.gate is None else self.gate.to_json(),
        }


def _as_budget(budget: Budget | int) -> Budget:
    return budget if isinstance(budget, Budget) else Budget(tokens=budget)


def attempt_compaction(
    session: Session,
    summarizer: Summarizer,
    *,
    trigger: str | None = None,
    budget: Budget | int = DEFAULT_BUDGET,
    compaction_id: str | None = None,
    exposure: ExposureCheck | None = None,
) -> Attempt | None:
    """Decide, pick the range, summarize and gate — without touching the session.

    None when the policy says no compaction is needed. Raises CompactionBusy if an
    attempt is already open (the compaction lock).
    """
    b = _as_budget(budget)
    open_ = session.open_compaction
    if open_ is not None:
        raise CompactionBusy(session.session_id, open_.compaction_id, open_.start_seq)
    decision = should_compact(session.derive_messages(), b.tokens, trigger=trigger,
                              pressure=b.pressure)
    if not decision.compact:
        return None
    cid = compaction_id or f"cmp-{session.ids()}"
    base = Attempt(cid, decision, summarizer.provider, summarizer.model,
                   dict(summarizer.config))
    rng = select_range(session, keep_recent=b.keep_recent, min_nodes=b.min_nodes)
    if isinstance(rng, str):
        return _replace(base, failure=rng)
    request = build_request(session, rng, prune_chars=b.prune_chars)
    try:
        text = summarizer.summarize(request)
    except SummarizerError as exc:
        return _replace(base, range=rng, pruned=request.pruned, facts=request.facts,
                        failure=f"{REASON_SUMMARIZER}: {exc}")
    after = message_tokens(Message(Role.USER, Kind.SUMMARY, text, (session.next_seq,)))
    check = exposure if exposure is not None else class_exposure(session)
    verdict = gate(text, request.facts, rng.tokens_before, after, exposure=check)
    problems = verdict.problems
    failure = f"{REASON_QUALITY}: {'; '.join(problems)}" if problems else None
    return _replace(base, range=rng, summary=text, tokens_after=after, pruned=request.pruned,
                    facts=request.facts, failure=failure, gate=verdict)


def _replace(attempt: Attempt, **changes: Any) -> Attempt:
    return replace(attempt, **changes)


def commit_drafts(attempt: Attempt, session: Session) -> list[Draft]:
    """The lifecycle drafts for ``attempt``, checked against ``session`` as it is now.

    New events since the summary was made are kept: the run is looked up again by its
    seqs; if it is still a contiguous run of current surface nodes (check_range) it is
    replaced at its current positions, else the attempt ends ``abandoned``.
    """
    open_ = session.open_compaction
    if open_ is not None:
        raise CompactionBusy(session.session_id, open_.compaction_id, open_.start_seq)
    d = attempt.decision
    cid = attempt.compaction_id
    drafts = [Draft("compaction/start", {
        "compaction_id": cid, "trigger": d.trigger, "tokens": d.tokens,
        "budget_tokens": d.budget_tokens, "reason": d.reason,
    })]
    rng = attempt.range
    if attempt.failure is not None or rng is None or attempt.summary is None:
        drafts.append(Draft("compaction/end", {
            "compaction_id": cid, "outcome": "failed",
            "reason": attempt.failure or "no summary",
        }))
        return drafts
    surface = session.surface
    problem = surface.check_range(rng.seqs)
    if problem is None and session.open_turn_seq is not None:
        # the open turn's nodes are never shadowed (a turn may have started since)
        turn_seq = session.open_turn_seq
        if any(s >= turn_seq and session.events[s].surface_op is SurfaceOp.APPEND
               for s in rng.seqs):
            problem = "the run now reaches into the open turn"
    if problem is not None:
        drafts.append(Draft("compaction/end", {
            "compaction_id": cid, "outcome": "abandoned",
            "reason": f"{REASON_RANGE_CHANGED}: {problem}",
        }))
        return drafts
    first = surface.position_of(rng.seqs[0])
    assert first is not None
    surface_before = token_estimate(session.derive_messages())
    tokens_before = token_estimate(surface.messages()[first : first + len(rng.seqs)])
    assert attempt.tokens_after is not None
    facts = attempt.facts
    drafts += [
        Draft("compaction/summary", {
            "compaction_id": cid,
            "first_position": first,
            "last_position": first + len(rng.seqs) - 1,
            "shadowed_seqs": list(rng.seqs),
            "tokens_before": tokens_before,
            "tokens_after": attempt.tokens_after,
            "summarizer": {"provider": attempt.provider, "model": attempt.model,
                           "config": dict(attempt.config)},
            "surface_tokens_before": surface_before,
            "surface_tokens_after": surface_before - tokens_before + attempt.tokens_after,
            "pruned": {"results": attempt.pruned.results, "chars": attempt.pruned.chars},
            "kept": {
                "operation_ids": len(facts.operation_ids) if facts else 0,
                "idempotency_keys": len(facts.idempotency_keys) if facts else 0,
                "tool_calls": len(facts.tools) if facts else 0,
                "user_messages": len(facts.user_messages) if facts else 0,
                "corrections": len(facts.corrections) if facts else 0,
                "open_tasks": [t.id for t in facts.open_tasks] if facts else [],
                "next_steps": len(facts.next_steps) if facts else 0,
            },
            **({"gate": attempt.gate.to_json()} if attempt.gate is not None else {}),
        }),
        Draft("user/message", {"content": attempt.summary}, surface_op=SurfaceOp.REPLACE,
              source_event_seqs=rng.seqs),
        Draft("compaction/end", {"compaction_id": cid, "outcome": "completed"}),
    ]
    return drafts


def plan_compaction(
    session: Session,
    summarizer: Summarizer | None = None,
    *,
    trigger: str | None = None,
    budget: Budget | int = DEFAULT_BUDGET,
    exposure: ExposureCheck | None = None,
) -> list[Draft]:
    """The full lifecycle drafts for one attempt on ``session`` (empty: not needed).

    start → summary → replace → end(completed), or start → end(failed, reason).
    """
    attempt = attempt_compaction(session, summarizer or OfflineSummarizer(), trigger=trigger,
                                 budget=budget, exposure=exposure)
    return [] if attempt is None else commit_drafts(attempt, session)


def compact_session(
    session: Session,
    summarizer: Summarizer | None = None,
    *,
    trigger: str | None = None,
    budget: Budget | int = DEFAULT_BUDGET,
    exposure: ExposureCheck | None = None,
) -> list[Event]:
    """Plan and append one attempt to ``session``; returns the events appended."""
    return [session.append(d) for d in plan_compaction(session, summarizer, trigger=trigger,
                                                       budget=budget, exposure=exposure)]
