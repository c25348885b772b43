"""Summaries keep every commitment (seed §4.10.3), measured on a corpus of plainly worded
sessions, and the gate refuses a summary that loses one or invents a fact."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from sessionstream.core.compaction import (
    NO_RESULT,
    OfflineSummarizer,
    SummaryRequest,
    commitments,
    gather_facts,
    invented_facts,
    plan_compaction,
    select_range,
)
from sessionstream.core.session import Session
from tests.fixtures.corpus import CATEGORIES, build_case, corpus, measure
from tests.unit.test_compaction import apply, busy_session


def test_the_corpus_keeps_every_planted_commitment_and_shrinks_the_surface() -> None:
    cases = corpus()
    assert len(cases) >= 20
    totals = {c: [0, 0] for c in CATEGORIES}
    before = after = 0
    for case in cases:
        midway = [e.data["outcome"] for e in case.session.events if e.type == "compaction/end"]
        assert midway in ([], ["completed"]), (case.name, midway)
        r = measure(case)
        assert r.outcome == "completed", (case.name, r.lost)
        assert r.lost == [], (case.name, r.lost)
        for c, (kept, total) in r.counts.items():
            totals[c][0] += kept
            totals[c][1] += total
        before += r.surface_before
        after += r.surface_after
    for c, (kept, total) in totals.items():
        assert total > 50 and kept == total, (c, kept, total)
    assert after < before / 2, (before, after)


@dataclass
class Editing:
    """The offline summary, then an edit: drops a line holding ``drop`` or appends ``add``."""

    drop: str | None = None
    add: str | None = None
    provider: str = "test"
    model: str = "editing"
    config: dict[str, Any] = field(default_factory=dict)

    def summarize(self, request: SummaryRequest) -> str:
        text = OfflineSummarizer().summarize(request)
        if self.drop is not None:
            text = "\n".join(x for x in text.splitlines() if self.drop not in x)
        if self.add is not None:
            text += "\n" + self.add
        return text


def _refused(s: Session, summarizer: Any) -> str:
    before = tuple(s.derive_messages())
    events = apply(s, plan_compaction(s, summarizer, trigger="manual"))
    assert [e.type for e in events] == ["compaction/start", "compaction/end"]
    assert tuple(s.derive_messages()) == before, "a refused summary leaves the surface unchanged"
    reason: str = events[-1].data["reason"]
    assert events[-1].data["outcome"] == "failed" and reason.startswith("quality gate: ")
    return reason


def _case() -> Session:
    return build_case(3, compact_midway=False).session


def test_a_lost_idempotency_key_is_refused() -> None:
    case = build_case(3, compact_midway=False)
    key = case.planted.keyed_calls[0].key
    assert f"lost idempotency key(s) {key}" in _refused(case.session, Editing(drop=key))


def test_a_plainly_worded_correction_without_steering_flag_is_kept_or_refused() -> None:
    case = build_case(3, compact_midway=False)
    seq, text = next((q, t) for q, t in case.planted.corrections
                     if not case.session.events[q].data.get("steering"))
    words = " ".join(text.split()[:4])
    reason = _refused(case.session, Editing(drop=words))
    assert "lost user message(s) (corrections, constraints) at seq" in reason
    assert str(seq) in reason


def test_a_next_step_stated_only_in_assistant_text_is_kept_or_refused() -> None:
    case = build_case(3, compact_midway=False)
    seq, text = case.planted.open_tasks[0]
    assert "next step(s) stated at seq" in _refused(case.session, Editing(drop=text[:30])) \
        or case.session.events[seq].type == "user/message"


@pytest.mark.parametrize("invented", [
    "- call=call_9999 tool=refund_payment status=ok op=op-deadbeef00",
    'The customer asked for "express shipping" too.',
    "Total refunded: 7,777.77 EUR.",
    "- [seq 99999] the user said so",
])
def test_a_summary_that_adds_a_fact_absent_from_the_history_is_refused(invented: str) -> None:
    reason = _refused(_case(), Editing(add=invented))
    assert "adds facts absent from the shadowed events" in reason


def test_copied_ids_numbers_and_quotes_are_not_invented() -> None:
    s = busy_session()
    rng = select_range(s)
    assert not isinstance(rng, str)
    facts = gather_facts(s, rng.seqs)
    assert invented_facts('op-0001 and "reconcile the invoices" [seq 3] q1', facts) == []
    assert invented_facts("op-0001 op-4242", facts) == ["op-4242"]


def test_the_exposure_hook_refuses_what_the_surface_may_not_carry() -> None:
    s = busy_session()
    before = tuple(s.derive_messages())

    def no_rates(text: str, facts: Any) -> list[str]:
        return ["rates are business-class content"] if "rates" in text else []

    events = apply(s, plan_compaction(s, trigger="manual", exposure=no_rates))
    assert events[-1].data["outcome"] == "failed"
    assert "exposes: rates are business-class content" in events[-1].data["reason"]
    assert tuple(s.derive_messages()) == before


def test_a_call_without_a_result_keeps_its_key_with_status_no_result() -> None:
    s = busy_session(turns=3)
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": "pay the invoice"})
    s.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": "call-pay", "name": "transfer_funds", "arguments": {"amount": 120}}
    s.append("assistant/message", {"content": "", "tool_calls": [call]})
    s.append("tool/call", {**call, "idempotency_key": "pay-inv-77"})
    s.append("turn/end", {"reason": "interrupted"})
    for i in range(5):
        s.append("user/message", {"content": f"later {i}"})
    rng = select_range(s)
    assert not isinstance(rng, str)
    facts = gather_facts(s, rng.seqs)
    tool = next(t for t in facts.tools if t.call_id == "call-pay")
    assert tool.status == NO_RESULT and tool.idempotency_key == "pay-inv-77"
    text = OfflineSummarizer().summarize(
        SummaryRequest((), facts, rng.tokens_before))
    line = next(x for x in text.splitlines() if "call-pay" in x)
    assert "pay-inv-77" in line and NO_RESULT in line and "transfer_funds" in line


@pytest.mark.parametrize("sentence", [
    "I still need to confirm the hotel booking once they reply.",
    "Remaining: rotate the API key on billing-worker-2.",
    "The DNS change for shop.example.org is the last open item.",
    "Not done yet: the chart for the EMEA region.",
    "The PR needs one more approval before I can merge it.",
])
def test_commitments_recognises_plain_statements_of_remaining_work(sentence: str) -> None:
    assert commitments(f"Done with the rest. {sentence}") == [sentence]


def test_a_summary_copying_raw_only_content_is_refused_by_default() -> None:
    """Executed tool arguments are raw: copying text the surface never carried widens it."""
    s = busy_session(turns=2)
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": "rotate the key"})
    s.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": "call-rot", "name": "rotate_secret", "arguments": {"name": "billing"}}
    s.append("assistant/message", {"content": "", "tool_calls": [call]})
    secret = "new secret value hunter2-billing-prod"
    call_event = s.append("tool/call", {**call, "arguments": {"name": "billing",
                                                               "value": secret}})
    s.append("tool/result", {"call_id": "call-rot", "status": "ok", "content": "rotated"})
    s.append("step/end")
    s.append("turn/end", {"reason": "completed"})
    for i in range(5):
        s.append("user/message", {"content": f"later {i}"})
    reason = _refused(s, Editing(add=f"The new value is {secret}."))
    assert f"exposes: raw content of seq {call_event.seq} (tool/call /arguments)" in reason


def test_with_only_surface_allowed_business_text_is_refused_too() -> None:
    from sessionstream.core.compaction.exposure import class_exposure
    from sessionstream.core.sealed import DataClass

    s = busy_session()
    before = tuple(s.derive_messages())
    events = apply(s, plan_compaction(s, trigger="manual",
                                      exposure=class_exposure(s, {DataClass.SURFACE})))
    assert events[-1].data["outcome"] == "failed"
    assert "exposes: business content of seq" in events[-1].data["reason"]  # the goal
    assert tuple(s.derive_messages()) == before
