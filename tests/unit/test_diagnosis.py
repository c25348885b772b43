"""The pure diagnosis: each finding from crafted facts, in the seed's order."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

from click.testing import CliRunner

from sessionstream.cli.main import main
from sessionstream.core.diagnosis import (
    MATRIX,
    DiagnosisFacts,
    Finding,
    Layer,
    RejectedEvent,
    Status,
    StoredProjection,
    diagnose,
    exit_code,
    implicated,
)
from sessionstream.core.events import Event, Writer, make_event
from sessionstream.core.projections import default_registry
from sessionstream.core.recovery import recover
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session
from tests.unit.logbuilder import LogBuilder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VERSIONS = default_registry().versions()


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def lab() -> LogBuilder:
    b = LogBuilder("s1")
    b.tool_turn("compare volumes", [("c1", "run_sql")])
    return b


def stored(events: list[Event], **kw: object) -> StoredProjection:
    base: dict[str, object] = {"generation": 1, "as_of_seq": events[-1].seq,
                               "state_versions": dict(VERSIONS)}
    base.update(kw)
    return StoredProjection(**base)  # type: ignore[arg-type]


def live(events: list[Event], **kw: object) -> DiagnosisFacts:
    return DiagnosisFacts("s1", events, projections_checked=True, code_versions=VERSIONS,
                 log_index=True, lease_held=False, **kw)  # type: ignore[arg-type]


def test_a_healthy_session_is_all_ok_in_the_seed_order() -> None:
    events = lab().events
    findings = diagnose(live(events, stored=stored(events)))
    assert {f.status for f in findings} == {Status.OK}
    assert exit_code(findings) == 0 and implicated(findings) == []
    layers = [f.layer for f in findings]
    assert layers == sorted(layers, key=list(Layer).index)  # raw → surface → request → proj.
    assert set(by_check(findings)) >= {"log-readback", "rejections", "format", "open-tail",
                                       "tool-pairing", "compaction", "request-header",
                                       "context-snapshots", "watermark", "state-versions",
                                       "quarantine", "indexes"}


def test_a_simulated_session_is_healthy_and_its_placeholder_summaries_are_caught() -> None:
    events = simulate_session(random.Random(5), "s1", turns=3)
    findings = diagnose(DiagnosisFacts("s1", events))
    assert exit_code(findings) == 0, [f.to_json() for f in findings if f.status != "ok"]
    # The simulator's summaries are placeholders that bypass the quality gate.
    compacted = simulate_session(random.Random(5), "s1", turns=3, compact_every=2)
    found = by_check(diagnose(DiagnosisFacts("s1", compacted)))
    assert found["compaction"].status is Status.PROBLEM


def test_findings_never_carry_message_content() -> None:
    b = LogBuilder("s1")
    b.tool_turn("SECRET-PROMPT", [("c1", "run_sql")])
    out = json.dumps([f.to_json() for f in diagnose(live(b.events, stored=stored(b.events)))])
    assert "SECRET-PROMPT" not in out


def test_rejections_name_writer_epoch_and_verdict() -> None:
    events = lab().events
    zombie = RejectedEvent(seq=4, event_id="z1", writer_id="old-node", epoch=1,
                           verdict="stale_epoch", offset=17)
    f = by_check(diagnose(DiagnosisFacts("s1", events, rejections=[zombie])))["rejections"]
    assert f.status is Status.WARNING  # fencing worked: visible, not a corruption
    assert "old-node@1" in f.summary and f.evidence["by_verdict"] == {"stale_epoch": 1}
    assert f.next == "sessionstream views s1 --view rejections"
    gap = dataclasses.replace(zombie, verdict="seq_gap", seq=99)
    assert by_check(diagnose(DiagnosisFacts("s1", events, rejections=[gap])))["rejections"].status \
        is Status.PROBLEM
    dup = dataclasses.replace(zombie, verdict="duplicate")
    assert by_check(diagnose(DiagnosisFacts("s1", events, rejections=[dup])))["rejections"].status \
        is Status.OK


def test_an_open_turn_at_the_tail_is_a_crash_tail_unless_a_writer_holds_the_lease() -> None:
    b = LogBuilder("s1")
    b.add("turn/start")
    b.add("step/start")
    b.user("go")
    b.header()
    b.assistant("", [("c1", "run_sql")])
    b.call("c1", "run_sql")
    crashed = by_check(diagnose(DiagnosisFacts("s1", b.events)))["open-tail"]
    assert crashed.status is Status.PROBLEM
    assert crashed.evidence["pending_calls"] == ["c1"] and "resume" in (crashed.next or "")
    assert "tool-protocol" in crashed.symptoms
    running = by_check(diagnose(DiagnosisFacts("s1", b.events, lease_held=True)))["open-tail"]
    assert running.status is Status.WARNING
    session = Session.from_events(b.events)
    for d in recover(session):
        session.append(d)
    assert by_check(diagnose(DiagnosisFacts("s1", list(session.events))))["open-tail"].status \
        is Status.OK


def test_an_unmatched_compaction_start_is_reported() -> None:
    b = lab()
    b.add("compaction/start", {"compaction_id": "k9", "trigger": "manual"})
    f = by_check(diagnose(DiagnosisFacts("s1", b.events)))["open-tail"]
    assert f.status is Status.PROBLEM and f.evidence["open_compaction"] == "k9"


def test_unknown_ignorable_types_warn_and_a_newer_format_is_a_problem() -> None:
    b = lab()
    b.add("acme/ping", {"x": 1})
    f = by_check(diagnose(DiagnosisFacts("s1", b.events)))["format"]
    assert f.status is Status.WARNING and f.evidence["unknown_types"] == {"acme/ping": 1}
    newer = [*lab().events]
    last = newer[-1]
    newer.append(make_event(session_id="s1", seq=last.seq + 1, event_id="n", time=1,
                            type="user/message", data={"content": "x"}, writer=last.writer,
                            format_version=99, surface_op="append"))
    f = by_check(diagnose(DiagnosisFacts("s1", newer)))["format"]
    assert f.status is Status.PROBLEM and "old-log-unreadable" in f.symptoms


def test_a_broken_session_rule_stops_before_the_surface() -> None:
    events = lab().events
    bad = [*events[:5], *events[6:]]  # a hole: seqs stop being contiguous
    findings = by_check(diagnose(DiagnosisFacts("s1", bad)))
    assert findings["log-readback"].status is Status.PROBLEM
    assert findings["session-rules"].status is Status.PROBLEM
    assert "tool-pairing" not in findings


def test_compaction_evidence_and_a_summary_that_lost_an_operation_id() -> None:
    b = lab()
    b.tool_turn("again", [("c2", "send_invoice")])
    run = b.nodes[:5]
    b.compact(run, summary="kept op-c1 only", cid="k1")
    f = by_check(diagnose(DiagnosisFacts("s1", b.events)))["compaction"]
    assert f.evidence["shadowed"] == 5 and f.evidence["tokens_before"] == 100
    assert f.evidence["summarizer"] == {"provider": "offline", "model": "det"}
    assert f.status is Status.OK and f.evidence["operation_ids_lost"] == []
    b2 = lab()
    b2.tool_turn("again", [("c2", "send_invoice")])
    b2.compact(b2.nodes[:5], summary="lost it", cid="k1")
    f2 = by_check(diagnose(DiagnosisFacts("s1", b2.events)))["compaction"]
    assert f2.status is Status.PROBLEM and f2.evidence["operation_ids_lost"] == ["op-c1"]
    assert f2.symptoms == ("repeats-operation",)


def test_request_header_and_context_snapshots_after_a_resume() -> None:
    b = LogBuilder("s1")
    b.add("session/end-seed", {"reason": "resume", "seed_length": 1})
    findings = by_check(diagnose(DiagnosisFacts("s1", b.events)))
    assert findings["request-header"].status is Status.WARNING
    ctx = findings["context-snapshots"]
    assert ctx.status is Status.WARNING and ctx.symptoms == ("forgot-constraint",)
    b.add("context/snapshot", {"snapshot_id": "ctx-1", "content": "policy"},
          surface_op="append")
    ctx = by_check(diagnose(DiagnosisFacts("s1", b.events)))["context-snapshots"]
    assert ctx.status is Status.OK and ctx.evidence["snapshot_ids"] == ["ctx-1"]


def test_watermark_lag_stale_state_versions_and_quarantine() -> None:
    events = lab().events
    last = events[-1].seq
    lag = by_check(diagnose(live(events, stored=stored(events, as_of_seq=last - 3))))
    assert lag["watermark"].status is Status.WARNING and lag["watermark"].evidence["lag"] == 3
    ahead = by_check(diagnose(live(events, stored=stored(events, as_of_seq=last + 1))))
    assert ahead["watermark"].status is Status.PROBLEM
    old = {**VERSIONS, "surface": VERSIONS["surface"] - 1}
    stale = by_check(diagnose(live(events, stored=stored(events, state_versions=old))))
    assert stale["state-versions"].status is Status.WARNING
    assert stale["state-versions"].evidence["stale"] == {
        "surface": {"stored": VERSIONS["surface"] - 1, "code": VERSIONS["surface"]}}
    q = {"kind": "newer_format", "reason": "format 2", "seq": 4, "offset": 9}
    quar = by_check(diagnose(live(events, stored=stored(events, quarantine=q))))
    assert quar["quarantine"].status is Status.PROBLEM
    missing = by_check(diagnose(live(events, stored=None)))
    assert missing["watermark"].status is Status.PROBLEM
    unlisted = by_check(diagnose(dataclasses.replace(
        live(events, stored=stored(events, in_session_index=False)), log_index=False)))
    assert unlisted["indexes"].status is Status.WARNING
    assert "full-log-reads" in unlisted["indexes"].symptoms


def test_offline_facts_do_not_check_projections() -> None:
    findings = diagnose(DiagnosisFacts("s1", lab().events))
    assert Layer.PROJECTIONS not in {f.layer for f in findings}


def test_every_symptom_named_by_a_finding_is_in_the_matrix() -> None:
    b = lab()
    b.add("turn/start")
    facts = live(b.events, stored=stored(b.events, as_of_seq=0, in_session_index=False,
                                         quarantine={"seq": 1}),
                 rejections=[RejectedEvent(1, "e", "w", 0, "seq_gap")])
    for f in diagnose(facts):
        assert set(f.symptoms) <= set(MATRIX)


# -- the offline command --------------------------------------------------------------

def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_diagnose_file_of_a_complete_lab_exits_0() -> None:
    code, out = run("diagnose", "--file", str(FIXTURES / "lab_two_step.jsonl"))
    assert code == 0, out
    assert "0 problem(s)" in out and "not checked offline" in out


def test_diagnose_file_of_a_truncated_lab_reports_the_open_turn_and_exits_1() -> None:
    path = FIXTURES / "lab_two_step_truncated.jsonl"
    code, out = run("diagnose", "--file", str(path))
    assert code == 1
    assert "PROBLEM open-tail" in out and f"next: sessionstream recover {path}" in out
    _, out = run("diagnose", "--file", str(path), "--json")
    report = json.loads(out)
    assert code == 1 and report["exit"] == 1
    tail = next(f for f in report["findings"] if f["check"] == "open-tail")
    assert tail["status"] == "problem" and tail["evidence"]["pending_calls"] == ["call-1"]
    assert {m["key"] for m in report["matrix"]} >= {"tool-protocol", "lost-after-restart"}


def test_diagnose_file_of_the_compacted_lab_finds_the_lost_operation_id() -> None:
    code, out = run("diagnose", "--file", str(FIXTURES / "lab_compacted.jsonl"), "--json")
    comp = next(f for f in json.loads(out)["findings"] if f["check"] == "compaction")
    assert code == 1 and comp["evidence"]["operation_ids_lost"] == ["op-fc891b4a"]


def test_diagnose_file_prints_no_message_content() -> None:
    path = FIXTURES / "lab_two_step.jsonl"
    _, out = run("diagnose", "--file", str(path), "--json")
    for line in path.read_text().splitlines():
        content = json.loads(line)["data"].get("content")
        if isinstance(content, str) and len(content) > 8:
            assert content not in out


def test_diagnose_bad_input_exits_2(tmp_path: Path) -> None:
    assert run("diagnose")[0] == 2
    assert run("diagnose", "s1", "--file", str(FIXTURES / "lab_two_step.jsonl"))[0] == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert run("diagnose", "--file", str(bad))[0] == 2
    assert run("diagnose", "--file", str(tmp_path / "missing.jsonl"))[0] == 2


def test_writer_epochs_are_evidence() -> None:
    b = LogBuilder("s1")
    b.session.set_writer(Writer("node-b", 2))
    b.user("hi")
    f = by_check(diagnose(DiagnosisFacts("s1", b.events)))["log-readback"]
    assert {"id": "node-b", "epoch": 2} in f.evidence["writers"]
