"""Compaction core: policy, range by surface position, pruning, quality gate, lifecycle."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.compaction import (
    REASON_QUALITY,
    Budget,
    OfflineSummarizer,
    SummaryRequest,
    attempt_compaction,
    commit_drafts,
    compact_session,
    plan_compaction,
    prune_message,
    select_range,
    should_compact,
)
from sessionstream.core.errors import CompactionBusy, SummarizerError
from sessionstream.core.events import Event, SurfaceOp
from sessionstream.core.messages import Kind, Message, Role
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session
from sessionstream.core.surface import derive_from_scratch, token_estimate
from tests.unit.strategies import new_session, sessions

LONG = " ".join(f"word{i}" for i in range(60))


def tool_turn(s: Session, i: int, *, op: str | None = None, steer: str | None = None,
              status: str = "ok") -> None:
    """One completed turn: request, a tool call with its result, a conclusion."""
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": f"request {i}: {LONG}"})
    s.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": f"call-{i}", "name": "run_query", "arguments": {"q": f"q{i}"}}
    s.append("assistant/message", {"content": f"I will query {i}", "tool_calls": [call]})
    s.append("tool/call", call)
    result: dict[str, Any] = {"call_id": f"call-{i}", "status": status,
                              "content": f"rows {i}: {LONG} {LONG}"}
    if op is not None:
        result["operation_id"] = op
    s.append("tool/result", result)
    s.append("step/end")
    if steer is not None:
        s.append("user/message", {"content": steer, "steering": True})
    s.append("step/start")
    s.append("request/header", {"provider": "p", "model": "m"})
    s.append("assistant/message", {"content": f"conclusion {i}: {LONG}"})
    s.append("step/end")
    s.append("turn/end", {"reason": "completed"})


def busy_session(turns: int = 4) -> Session:
    s = new_session("c1")
    s.append("goal/set", {"goal": "reconcile the invoices"})
    s.append("todo/add", {"id": "t-open", "text": "send the report"})
    s.append("todo/add", {"id": "t-done", "text": "read the ledger"})
    for i in range(turns):
        tool_turn(s, i, op=f"op-{i:04d}", steer="use the 2024 rates, not 2023" if i == 1 else None)
    s.append("todo/update", {"id": "t-done", "status": "done"})
    return s


def unmatched(messages: Any) -> tuple[set[str], set[str]]:
    """(calls without a result, results without a call) on a surface."""
    calls = {c.call_id for m in messages for c in m.tool_calls}
    results = {m.call_id for m in messages if m.call_id is not None}
    return calls - results, results - calls


def surface_pairs_ok(messages: Any) -> bool:
    return unmatched(messages) == (set(), set())


def apply(s: Session, drafts: list[Any]) -> list[Event]:
    return [s.append(d) for d in drafts]


# -- policy -------------------------------------------------------------------------------

def test_policy_answers_why_with_numbers() -> None:
    msgs = [Message(Role.USER, Kind.USER, "x" * 400, (1,))]  # ~104 tokens
    tokens = token_estimate(msgs)
    quiet = should_compact(msgs, 1000)
    assert not quiet.compact and quiet.trigger is None and quiet.tokens == tokens
    pressure = should_compact(msgs, 120, pressure=0.8)
    assert pressure.trigger == "pressure" and pressure.threshold_tokens == 96
    assert str(tokens) in pressure.reason and "96" in pressure.reason
    assert should_compact(msgs, 50).trigger == "overflow"
    manual = should_compact(msgs, 10_000, trigger="manual")
    assert manual.compact and manual.trigger == "manual"
    with pytest.raises(ValueError):
        should_compact(msgs, 100, trigger="boredom")


def test_no_pressure_plans_nothing() -> None:
    assert plan_compaction(busy_session(), budget=1_000_000) == []


# -- range selection ----------------------------------------------------------------------

def test_range_is_the_oldest_run_and_keeps_the_recent_nodes() -> None:
    s = busy_session()
    rng = select_range(s, keep_recent=4)
    assert not isinstance(rng, str)
    n = len(s.surface)
    assert rng.first_position == 0 and rng.last_position <= n - 5
    assert rng.seqs == s.surface.seqs_at(0, rng.last_position)
    assert s.surface.check_range(rng.seqs) is None


def test_range_never_splits_a_call_from_its_result() -> None:
    s = busy_session(2)
    nodes = s.derive_messages()
    # keep_recent chosen so that the naive cut falls between a call and its result
    for keep in range(len(nodes)):
        rng = select_range(s, keep_recent=keep, min_nodes=1)
        if isinstance(rng, str):
            continue
        assert s.surface.check_range(rng.seqs) is None
        shadowed = nodes[: rng.last_position + 1]
        assert surface_pairs_ok(shadowed)


def test_range_leaves_the_open_turn_and_pending_calls_alone() -> None:
    s = busy_session(3)
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": "new work"})
    s.append("assistant/message", {"content": "", "tool_calls": [
        {"call_id": "pending", "name": "run_query", "arguments": {}}]})
    rng = select_range(s, keep_recent=0)
    assert not isinstance(rng, str)
    turn_seq = s.open_turn_seq
    assert turn_seq is not None and all(seq < turn_seq for seq in rng.seqs)


def test_no_range_is_a_reason_not_a_crash() -> None:
    s = new_session("tiny")
    s.append("user/message", {"content": "hi"})
    reason = select_range(s, keep_recent=4)
    assert isinstance(reason, str) and reason.startswith("no compactable range")
    drafts = plan_compaction(s, trigger="manual")
    assert [d.type for d in drafts] == ["compaction/start", "compaction/end"]
    assert drafts[1].data["outcome"] == "failed"


# -- pruning ------------------------------------------------------------------------------

def test_pruning_keeps_head_tail_and_a_reference() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"
    msg = Message(Role.TOOL, Kind.TOOL_RESULT, text, (42,), call_id="c", status="ok")
    pruned, cut = prune_message(msg, 200)
    assert isinstance(pruned.content, str)
    assert pruned.content.startswith("HEAD") and pruned.content.endswith("TAIL")
    assert "full: seq 42" in pruned.content and cut > 4000 and len(pruned.content) < 300
    att = Message(Role.TOOL, Kind.TOOL_RESULT, {"attachment": {
        "sha256": "ab" * 32, "size": 900_000, "media_type": "text/plain", "head": "H",
        "tail": "T"}}, (7,), call_id="c", status="ok")
    pruned_att, cut_att = prune_message(att, 200)
    assert "sha256:" + "ab" * 32 in str(pruned_att.content) and cut_att > 800_000
    user = Message(Role.USER, Kind.USER, "y" * 5000, (1,))
    assert prune_message(user, 200) == (user, 0)


# -- quality gate -------------------------------------------------------------------------

@dataclass(frozen=True)
class Lossy:
    """A summarizer that drops one kind of fact from the offline summary."""

    drop: str
    provider: str = "test"
    model: str = "lossy"
    config: dict[str, Any] = field(default_factory=dict)

    def summarize(self, request: SummaryRequest) -> str:
        text = OfflineSummarizer().summarize(request)
        return text.replace(self.drop, "")


@pytest.mark.parametrize(("drop", "reason"), [
    ("op-0001", "lost operation id(s) op-0001"),
    ("use the 2024 rates, not 2023", "lost user message(s) (corrections, constraints) at seq"),
    ("t-open", "lost open task(s) t-open"),
])
def test_gate_refuses_a_lossy_summary_with_the_reason(drop: str, reason: str) -> None:
    s = busy_session()
    before = tuple(s.derive_messages())
    events = apply(s, plan_compaction(s, Lossy(drop), trigger="manual"))
    assert [e.type for e in events] == ["compaction/start", "compaction/end"]
    end = events[-1].data
    assert end["outcome"] == "failed"
    assert end["reason"].startswith(f"{REASON_QUALITY}: ") and reason in end["reason"]
    assert tuple(s.derive_messages()) == before  # a failed attempt changes nothing
    assert s.open_compaction is None


def test_gate_refuses_a_summary_that_does_not_shrink_the_surface() -> None:
    @dataclass(frozen=True)
    class Verbose:
        provider: str = "test"
        model: str = "verbose"
        config: dict[str, Any] = field(default_factory=dict)

        def summarize(self, request: SummaryRequest) -> str:
            return OfflineSummarizer().summarize(request) + "\n" + "padding " * 5000

    s = busy_session()
    events = apply(s, plan_compaction(s, Verbose(), trigger="manual"))
    assert "does not reduce tokens" in events[-1].data["reason"]


def test_a_summarizer_error_ends_the_attempt_failed() -> None:
    @dataclass(frozen=True)
    class Down:
        provider: str = "http"
        model: str = "down"
        config: dict[str, Any] = field(default_factory=dict)

        def summarize(self, request: SummaryRequest) -> str:
            raise SummarizerError("HTTP 503")

    s = busy_session()
    events = apply(s, plan_compaction(s, Down(), trigger="manual"))
    assert events[-1].data == {"compaction_id": events[0].data["compaction_id"],
                               "outcome": "failed", "reason": "summarizer failed: HTTP 503"}


# -- lifecycle ----------------------------------------------------------------------------

def test_lifecycle_is_accepted_and_the_summary_takes_the_runs_position() -> None:
    s = busy_session()
    before = tuple(s.derive_messages())
    events = compact_session(s, trigger="manual", budget=Budget(keep_recent=4))
    assert [e.type for e in events] == [
        "compaction/start", "compaction/summary", "user/message", "compaction/end"]
    start, summary, replace, end = events
    assert start.data["trigger"] == "manual" and start.data["tokens"] == token_estimate(before)
    sd = summary.data
    assert sd["summarizer"]["provider"] == "offline"
    assert replace.surface_op is SurfaceOp.REPLACE
    assert list(replace.source_event_seqs) == list(sd["shadowed_seqs"])
    assert end.data["outcome"] == "completed"
    after = s.derive_messages()
    first, last = sd["first_position"], sd["last_position"]
    assert after[first].kind is Kind.SUMMARY and after[first].seqs == (replace.seq,)
    assert tuple(after[first + 1:]) == before[last + 1:]  # the recent nodes are untouched
    assert sd["tokens_before"] == token_estimate(before[first : last + 1])
    assert sd["tokens_after"] < sd["tokens_before"]
    assert sd["surface_tokens_after"] < sd["surface_tokens_before"]
    assert token_estimate(after) < token_estimate(before)
    text = after[first].content
    assert isinstance(text, str)
    for needle in ("reconcile the invoices", "use the 2024 rates, not 2023", "t-open",
                   "op-0000", "op-0001"):
        assert needle in text
    assert "t-done" not in text  # a done task is not an open task
    assert tuple(after) == derive_from_scratch(s.events)


def test_a_second_compaction_keeps_what_the_first_summary_kept() -> None:
    s = busy_session(6)
    compact_session(s, trigger="manual", budget=Budget(keep_recent=12))
    first_ops = {f"op-{i:04d}" for i in range(6)
                 if f"op-{i:04d}" in str(s.derive_messages()[0].content)}
    assert first_ops
    tool_turn(s, 7, op="op-0007")
    events = compact_session(s, trigger="manual", budget=Budget(keep_recent=2))
    assert events[-1].data["outcome"] == "completed"
    text = str(s.derive_messages()[0].content)
    assert all(op in text for op in first_ops)


def test_events_arriving_while_summarizing_are_kept() -> None:
    s = busy_session()
    attempt = attempt_compaction(s, OfflineSummarizer(), trigger="manual")
    assert attempt is not None and attempt.failure is None
    tool_turn(s, 10, op="op-late")  # the writer appended meanwhile
    late = tuple(s.derive_messages())[-5:]
    events = apply(s, commit_drafts(attempt, s))
    assert events[-1].data["outcome"] == "completed"
    assert tuple(s.derive_messages())[-5:] == late


def test_a_run_that_changed_before_commit_is_abandoned() -> None:
    s = busy_session()
    attempt = attempt_compaction(s, OfflineSummarizer(), trigger="manual")
    assert attempt is not None
    compact_session(s, trigger="manual", budget=Budget(keep_recent=10))  # someone else won
    before = tuple(s.derive_messages())
    events = apply(s, commit_drafts(attempt, s))
    assert events[-1].data["outcome"] == "abandoned"
    assert events[-1].data["reason"].startswith("range changed before commit")
    assert tuple(s.derive_messages()) == before


def test_one_attempt_at_a_time() -> None:
    s = busy_session()
    s.append("compaction/start", {"compaction_id": "other", "trigger": "manual"})
    with pytest.raises(CompactionBusy):
        plan_compaction(s, trigger="manual")


def test_the_offline_summarizer_is_deterministic() -> None:
    a, b = busy_session(), busy_session()
    ta = compact_session(a, trigger="manual")[2].data["content"]
    tb = compact_session(b, trigger="manual")[2].data["content"]
    assert ta == tb


# -- properties ---------------------------------------------------------------------------

def _check_attempt(s: Session) -> None:
    if s.open_compaction is not None:
        with pytest.raises(CompactionBusy):
            plan_compaction(s, trigger="manual")
        return
    before = tuple(s.derive_messages())
    events = compact_session(s, trigger="manual", budget=Budget(keep_recent=2, min_nodes=1))
    after = tuple(s.derive_messages())
    outcome = events[-1].data["outcome"]
    if outcome == "completed":
        # no orphan made: only calls still waiting for their result stay unmatched
        assert unmatched(after) == unmatched(before)
        assert not unmatched(after)[1]
        assert token_estimate(after) < token_estimate(before)
    else:
        assert after == before
    assert after == derive_from_scratch(s.events)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(max_steps=150))
def test_random_sessions_compact_without_orphans_or_fail_unchanged(s: Session) -> None:
    _check_attempt(s)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.none() | st.integers(1, 3))
def test_lab_sessions_compact_and_shrink(seed: int, turns: int, every: int | None) -> None:
    events = simulate_session(random.Random(seed), "lab", turns=turns, compact_every=every,
                              failures=0.2)
    _check_attempt(Session.from_events(events))


# -- offline CLI --------------------------------------------------------------------------

def test_compact_file_appends_the_lifecycle(tmp_path: Any) -> None:
    import json

    from click.testing import CliRunner

    from sessionstream.cli.main import main
    from sessionstream.core.jsonl import read_jsonl, write_jsonl

    src, out = tmp_path / "s.jsonl", tmp_path / "out.jsonl"
    write_jsonl(simulate_session(random.Random(7), "f", turns=12), src)
    result = CliRunner().invoke(main, ["compact-file", str(src), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["outcome"] == "completed"
    assert report["surface_tokens_after"] < report["surface_tokens_before"]
    events = read_jsonl(out)
    assert [e.type for e in events[-4:]] == [
        "compaction/start", "compaction/summary", "user/message", "compaction/end"]
    tiny = CliRunner().invoke(main, ["compact-file", "tests/fixtures/lab_two_step.jsonl",
                                     "--json", "--keep-recent", "2"])
    assert tiny.exit_code == 1
    assert "does not reduce tokens" in json.loads(tiny.output)["reason"]
