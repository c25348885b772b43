"""The rules of each built-in projection unit."""

from __future__ import annotations

import json

import pytest

from sessionstream.core.admission import AdmissionState, admit
from sessionstream.core.events import Writer
from sessionstream.core.messages import Kind
from sessionstream.core.projections import default_registry, quarantine, record_rejection
from sessionstream.core.projections.business import BusinessUnit
from sessionstream.core.projections.compaction import CompactionUnit
from sessionstream.core.projections.index import IndexUnit
from sessionstream.core.projections.rejections import RECENT, RejectionsUnit
from sessionstream.core.projections.surface import SurfaceUnit
from sessionstream.core.projections.tools import ToolsUnit
from sessionstream.core.projections.turns import TurnsUnit
from sessionstream.core.projections.vec import Vec
from sessionstream.core.surface import pending_calls
from tests.unit.logbuilder import LogBuilder


def views(b: LogBuilder) -> dict:
    return default_registry().fold(b.events).views()


# Vec ---------------------------------------------------------------------------------

def test_vec_append_leaves_older_versions_unchanged_even_when_branching():
    a = Vec([1])
    b = a.append(2)
    c = a.append(3)  # branch from an older version: must not see or clobber 2
    assert a.to_list() == [1] and b.to_list() == [1, 2] and c.to_list() == [1, 3]
    assert b.append(4).to_list() == [1, 2, 4] and b.to_list() == [1, 2]
    assert Vec([1, 2]) == b and b[-1] == 2 and len(c) == 2


# turns --------------------------------------------------------------------------------

def test_turns_records_status_and_reason_for_every_turn():
    b = LogBuilder()
    b.tool_turn("q", [("c1", "search")])
    b.add("turn/start")
    b.add("turn/end", {"reason": "refused", "detail": "policy"})
    b.add("turn/start")
    b.add("step/start")
    v = views(b)["turns"]
    assert [t["status"] for t in v["turns"]] == ["completed", "refused", "open"]
    assert v["turns"][1]["detail"] == "policy"
    assert v["turns"][0]["steps"] == 2
    assert v["open_turn"] == "t3" and v["open_step"] == "p3"
    assert v["counts"] == {"completed": 1, "refused": 1}


@pytest.mark.parametrize("reason", ["cancelled", "failed", "interrupted"])
def test_turn_end_reason_becomes_the_turn_status_and_closes_the_step(reason):
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    b.add("turn/end", {"reason": reason})
    v = views(b)["turns"]
    assert v["turns"][0]["status"] == reason
    assert v["open_turn"] is None and v["open_step"] is None


def test_turns_unit_returns_the_same_state_for_events_it_does_not_read():
    unit = TurnsUnit()
    b = LogBuilder()
    state = unit.init()
    for e in [b.user("hi"), b.add("todo/add", {"id": "1", "text": "x"}),
              b.add("vendor/x", {})]:
        assert unit.apply(state, e) is state


# tools --------------------------------------------------------------------------------

def test_tools_pairs_results_with_calls_and_lists_operation_ids():
    b = LogBuilder()
    b.tool_turn("q", [("c1", "send_invoice"), ("c2", "search")])
    v = views(b)["tools"]
    assert set(v["results"]) == {"c1", "c2"}
    assert v["results"]["c1"]["name"] == "send_invoice"
    assert v["results"]["c1"]["status"] == "ok"
    assert v["operation_ids"] == {"op-c1": "c1", "op-c2": "c2"}
    assert v["declared"] == [] and v["open"] == [] and v["abandoned"] == []
    assert v["counts"] == {"ok": 2}


def test_tools_shows_declared_then_executing_calls():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    b.assistant("", [("c1", "search"), ("c2", "search")])
    v = views(b)["tools"]
    assert [c["call_id"] for c in v["declared"]] == ["c1", "c2"]
    b.call("c1", "search", key="idem-1")
    v = views(b)["tools"]
    assert [c["call_id"] for c in v["declared"]] == ["c2"]
    assert v["open"][0]["call_id"] == "c1" and v["open"][0]["idempotency_key"] == "idem-1"


def test_interrupted_turn_abandons_calls_and_never_invents_a_result():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    b.assistant("", [("c1", "send_invoice"), ("c2", "search")])
    b.call("c1", "send_invoice")
    b.add("turn/end", {"reason": "interrupted"})
    v = views(b)["tools"]
    assert v["results"] == {}
    assert {(a["call_id"], a["stage"], a["reason"]) for a in v["abandoned"]} == {
        ("c1", "executing", "interrupted"), ("c2", "declared", "interrupted")}
    assert v["counts"] == {"abandoned": 2}


def test_tool_error_results_are_counted_separately():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    b.assistant("", [("c1", "search")])
    b.call("c1", "search")
    b.result("c1", status="error", content="boom")
    assert views(b)["tools"]["counts"] == {"error": 1}


def test_tools_unit_returns_the_same_state_for_an_assistant_message_without_calls():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    unit = ToolsUnit()
    s = unit.init()
    assert unit.apply(s, b.assistant("just text")) is s


# surface ------------------------------------------------------------------------------

def test_surface_holds_only_model_messages_with_their_seqs_and_a_token_estimate():
    b = LogBuilder()
    b.tool_turn("question", [("c1", "search")])
    v = views(b)["surface"]
    kinds = [m["kind"] for m in v["messages"]]
    assert kinds == ["user", "assistant", "tool_result", "assistant"]
    assert all(len(m["seqs"]) == 1 for m in v["messages"])
    assert v["token_estimate"] > 0 and v["count"] == 4


def test_compaction_replace_puts_the_summary_where_the_shadowed_nodes_were():
    b = LogBuilder()
    s1 = b.user("one").seq
    s2 = b.user("two").seq
    s3 = b.user("three").seq
    summary = b.compact([s1, s2])
    snap = default_registry().fold(b.events)
    msgs = snap.view("surface")["messages"]
    assert [(m["kind"], m["seqs"]) for m in msgs] == [("summary", [summary.seq]),
                                                      ("user", [s3])]
    before = default_registry().fold(b.events[:4]).view("surface")["token_estimate"]
    assert snap.view("surface")["token_estimate"] < before


def test_failed_turn_drops_unanswered_calls_from_the_surface():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    b.assistant("thinking", [("c1", "search"), ("c2", "search")])
    b.call("c1", "search")
    b.result("c1")
    b.add("turn/end", {"reason": "failed"})
    state = default_registry().fold(b.events).states["surface"]
    assert pending_calls(state.messages) == []
    assistant = next(m for m in state.messages if m.kind is Kind.ASSISTANT)
    assert [c.call_id for c in assistant.tool_calls] == ["c1"]


def test_attachment_results_show_the_reference_as_derive_messages_does():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    b.assistant("", [("c1", "dump")])
    b.call("c1", "dump")
    b.add("tool/result", {"call_id": "c1", "status": "ok", "attachment": {
        "sha256": "ab" * 32, "size": 10**6, "media_type": "text/plain",
        "head": "first", "tail": "last"}}, surface_op="append")
    msg = views(b)["surface"]["messages"][-1]
    assert msg["content"] == {"attachment": {
        "sha256": "ab" * 32, "size": 10**6, "media_type": "text/plain", "head": "first",
        "tail": "last"}}
    assert msg == b.session.derive_messages()[-1].to_json()


def test_surface_unit_ignores_chunks_headers_and_domain_events():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    unit = SurfaceUnit()
    s = unit.init()
    for e in [b.header(), b.add("assistant/chunk", {"text": "x"}),
              b.add("goal/set", {"goal": "g"})]:
        assert unit.apply(s, e) is s


# usage --------------------------------------------------------------------------------

def test_usage_counts_tokens_per_provider_model_and_requests_from_headers():
    b = LogBuilder()
    b.tool_turn("q", [("c1", "search")])
    b.add("turn/start")
    b.add("step/start")
    b.header("acme", "model-a")
    b.assistant("hi", usage=(7, 3), provider="vendor", model="other")
    v = views(b)["usage"]
    rows = {(r["provider"], r["model"]): r for r in v["by_model"]}
    assert rows[("openai", "gpt-x")] == {"provider": "openai", "model": "gpt-x",
                                         "requests": 2, "messages": 2,
                                         "input_tokens": 250, "output_tokens": 30}
    assert rows[("acme", "model-a")]["requests"] == 1
    assert rows[("acme", "model-a")]["input_tokens"] == 0
    assert rows[("vendor", "other")]["input_tokens"] == 7
    assert v["total"]["input_tokens"] == 257 and v["total"]["requests"] == 3


# todo / plan / goal -------------------------------------------------------------------

def test_todo_items_keep_order_status_and_count_unknown_updates():
    b = LogBuilder()
    b.add("todo/add", {"id": "a", "text": "first"})
    b.add("todo/add", {"id": "b", "text": "second", "status": "in_progress"})
    b.add("todo/update", {"id": "a", "status": "done"})
    b.add("todo/update", {"id": "zz", "status": "done"})
    v = views(b)["todo"]
    assert [(i["id"], i["status"]) for i in v["items"]] == [("a", "done"), ("b", "in_progress")]
    assert v["counts"] == {"done": 1, "in_progress": 1} and v["unknown_updates"] == 1


def test_plan_and_goal_hold_the_latest_value_and_its_seq():
    b = LogBuilder()
    b.add("plan/set", {"steps": ["a"]})
    p = b.add("plan/set", {"steps": ["a", "b"], "plan_hash": "h"})
    g = b.add("goal/set", {"goal": "compare"})
    v = views(b)
    assert v["plan"] == {"steps": ["a", "b"], "plan_hash": "h", "seq": p.seq, "revisions": 2}
    assert v["goal"] == {"goal": "compare", "seq": g.seq, "changes": 1}


# business -----------------------------------------------------------------------------

def _metric(b: LogBuilder, mid: str = "reported_test_item_count", status: str = "confirmed"):
    return b.add("business/metric", {"id": mid, "definition_version": "2026-07",
                                     "status": status, "source_turn": 3})


def test_business_state_matches_the_seed_shape_with_a_source_seq_per_field():
    b = LogBuilder()
    g = b.add("goal/set", {"goal": "比较门诊检验量同比"})
    m = _metric(b)
    f = b.add("business/filters", {"filters": {"patient_type": "outpatient"}})
    t = b.add("business/time", {"time": {"calendar": "natural_year", "mode": "year_over_year"}})
    v = views(b)["business"]
    assert v["goal"] == "比较门诊检验量同比"
    assert v["metric"] == {"id": "reported_test_item_count", "definition_version": "2026-07",
                           "status": "confirmed", "source_turn": 3}
    assert v["filters"] == {"patient_type": "outpatient"}
    assert v["ambiguities"] == [] and v["plan_hash"] is None and v["approval"] == "pending"
    assert v["sources"] == {"goal": g.seq, "metric": m.seq, "filters": f.seq, "time": t.seq,
                            "plan_hash": f.seq, "approval": f.seq}


@pytest.mark.parametrize("change", ["metric", "filters"])
def test_changing_metric_or_filters_invalidates_plan_and_approval(change):
    b = LogBuilder()
    _metric(b)
    b.add("business/filters", {"filters": {"patient_type": "outpatient"}})
    b.add("business/plan", {"plan_hash": "h1"})
    b.add("business/approval", {"approval": "approved"})
    assert views(b)["business"]["approval"] == "approved"
    if change == "metric":
        e = _metric(b, mid="another_metric")
    else:
        e = b.add("business/filters", {"filters": {"patient_type": "inpatient"}})
    v = views(b)["business"]
    assert v["plan_hash"] is None and v["approval"] == "pending"
    assert v["sources"]["approval"] == e.seq
    assert v["invalidations"][-1] == {"seq": e.seq, "reason": f"{change} changed"}


def test_confirming_the_same_metric_keeps_the_approved_plan():
    b = LogBuilder()
    _metric(b, status="proposed")
    b.add("business/plan", {"plan_hash": "h1"})
    b.add("business/approval", {"approval": "approved"})
    _metric(b, status="confirmed")
    v = views(b)["business"]
    assert v["metric"]["status"] == "confirmed"
    assert v["plan_hash"] == "h1" and v["approval"] == "approved"


def test_reasserting_the_same_business_value_changes_nothing():
    b = LogBuilder()
    unit = BusinessUnit()
    s = unit.apply(unit.init(), b.add("business/filters", {"filters": {"a": 1}}))
    assert unit.apply(s, b.add("business/filters", {"filters": {"a": 1}})) is s


# compaction ---------------------------------------------------------------------------

def test_compaction_history_records_the_evidence_of_each_attempt():
    b = LogBuilder()
    s1, s2 = b.user("a").seq, b.user("b").seq
    b.add("compaction/start", {"compaction_id": "k1", "trigger": "pressure"})
    assert views(b)["compaction"]["open"]["compaction_id"] == "k1"
    b.add("compaction/summary", {
        "compaction_id": "k1", "first_position": 0, "last_position": 1,
        "shadowed_seqs": [s1, s2], "tokens_before": 120, "tokens_after": 30,
        "summarizer": {"provider": "offline", "model": "det", "config": {"max": 5}}})
    r = b.add("user/message", {"content": "sum"}, surface_op="replace", source=[s1, s2])
    b.add("compaction/end", {"compaction_id": "k1", "outcome": "completed"})
    b.add("compaction/start", {"compaction_id": "k2", "trigger": "manual"})
    b.add("compaction/end", {"compaction_id": "k2", "outcome": "failed", "reason": "timeout"})
    v = views(b)["compaction"]
    assert v["open"] is None and v["outcomes"] == {"completed": 1, "failed": 1}
    first = v["attempts"][0]
    assert first["shadowed_seqs"] == [s1, s2] and first["replacement_seq"] == r.seq
    assert (first["tokens_before"], first["tokens_after"]) == (120, 30)
    assert first["summarizer"]["config"] == {"max": 5}
    assert (first["first_position"], first["last_position"]) == (0, 1)
    assert v["attempts"][1]["reason"] == "timeout" and v["attempts"][1]["trigger"] == "manual"


def test_an_attempt_open_at_end_seed_is_marked_as_a_leftover():
    b = LogBuilder()
    b.add("compaction/start", {"compaction_id": "k1", "trigger": "pressure"})
    b.add("session/end-seed", {"reason": "resume", "seed_length": 2})
    assert views(b)["compaction"]["open"]["from_seed"] is True
    b.add("compaction/end", {"compaction_id": "k1", "outcome": "abandoned"})
    assert views(b)["compaction"]["attempts"][0]["outcome"] == "abandoned"


def test_compaction_unit_ignores_plain_user_messages():
    b = LogBuilder()
    unit = CompactionUnit()
    s = unit.apply(unit.init(), b.add("compaction/start",
                                      {"compaction_id": "k", "trigger": "manual"}))
    assert unit.apply(s, b.user("hello")) is s


# rejections and index -----------------------------------------------------------------

def _rejections_of_a_zombie_and_a_gap(n_stale: int) -> tuple[list, list]:
    """Real admission decisions: a log, a zombie writer re-sending, and a gap."""
    b = LogBuilder()
    b.user("x")
    events = b.events
    state = AdmissionState(b.session.session_id)
    for e in events:
        state = admit(state, e).state
    state = admit(state, events[1].replace(event_id="new", seq=2, writer=Writer("new", 1),
                                           prev_event_id=events[-1].event_id)).state
    refused = [events[1].replace(event_id=f"zombie-{i}", seq=3, writer=Writer("old", 0))
               for i in range(n_stale)]
    refused.append(events[1].replace(event_id="ahead", seq=9, writer=Writer("new", 1)))
    return refused, [admit(state, e) for e in refused]


def test_rejections_are_fed_by_admission_decisions_not_by_events():
    unit = RejectionsUnit()
    s = unit.init()
    b = LogBuilder()
    assert unit.apply(s, b.user("x")) is s
    refused, decisions = _rejections_of_a_zombie_and_a_gap(RECENT + 5)
    for e, d in zip(refused, decisions, strict=True):
        assert d.rejected
        s = record_rejection(s, d.to_json(e))
    v = unit.view(s)
    assert v["total"] == RECENT + 6
    assert v["by_verdict"] == {"seq_gap": 1, "stale_epoch": RECENT + 5}
    assert len(v["recent"]) == RECENT
    last = v["recent"][-1]
    assert last == decisions[-1].to_json(refused[-1])
    assert (last["verdict"], last["seq"], last["next_seq"], last["writer"]) == (
        "seq_gap", 9, 3, {"id": "new", "epoch": 1})
    assert "missing" in last["reason"]  # the sentence for humans, not the grouping key
    assert unit.view(unit.load(json.loads(json.dumps(unit.dump(s))))) == v


def test_record_rejection_keeps_extra_keys_such_as_the_offset():
    refused, decisions = _rejections_of_a_zombie_and_a_gap(1)
    s = record_rejection(RejectionsUnit().init(), {**decisions[0].to_json(refused[0]),
                                                   "offset": 42})
    assert RejectionsUnit().view(s)["recent"][0]["offset"] == 42


def test_record_rejection_refuses_what_is_not_a_rejection_decision():
    unit = RejectionsUnit()
    b = LogBuilder()
    e = b.events[0]
    admitted = admit(AdmissionState(e.session_id), e)
    duplicate = admit(admitted.state, e)
    for d in (admitted, duplicate):
        with pytest.raises(ValueError, match="not a rejection"):
            record_rejection(unit.init(), d.to_json(e))
    with pytest.raises(ValueError, match="lacks"):
        record_rejection(unit.init(), {"reason": "stale_epoch", "seq": 1})


def test_rejections_state_of_the_older_shape_still_loads():
    unit = RejectionsUnit()
    s = unit.load({"total": 2, "by_reason": {"stale_epoch": 2}, "recent": []})
    assert unit.view(s)["by_verdict"] == {"stale_epoch": 2}


def test_index_summarizes_the_session_for_listing():
    lineage = {"parent_session": "p", "seed_length": 4, "delegation_depth": 1}
    b = LogBuilder("child", tenant="acme", lineage=lineage)
    b.tool_turn("q", [("c1", "search")])
    b.add("turn/start")
    v = views(b)["index"]
    assert v["tenant"] == "acme" and v["lineage"] == lineage and v["session_id"] == "child"
    assert v["event_count"] == len(b.events) and v["last_seq"] == len(b.events) - 1
    assert v["last_time"] == b.events[-1].time and v["first_time"] == b.events[0].time
    assert v["open_turn"] == "t2" and v["turns"] == 2 and v["status"] == "active"


def test_quarantine_marks_the_index_with_reason_and_seq():
    unit = IndexUnit()
    s = quarantine(unit.init(), "unknown event type vendor/x", 7)
    v = unit.view(s)
    assert (v["status"], v["status_reason"], v["status_seq"]) == (
        "quarantined", "unknown event type vendor/x", 7)
