"""``sessionstream compaction report FILE``: the six questions per attempt, with evidence."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sessionstream.cli.main import main
from sessionstream.core.compaction import compact_session
from sessionstream.core.compaction.report import compaction_report
from sessionstream.core.jsonl import write_jsonl
from tests.fixtures.corpus import build_case
from tests.unit.test_compaction_retention import Editing


def _file(tmp_path: Path) -> Path:
    s = build_case(5, compact_midway=False).session
    compact_session(s, Editing(add="Refund total 9,999.99 EUR."), trigger="manual")  # refused
    compact_session(s, trigger="manual")  # completed
    path = tmp_path / "s.jsonl"
    write_jsonl(s.events, path)
    return path


def test_each_attempt_answers_the_six_questions_with_the_seqs_of_its_evidence(
        tmp_path: Path) -> None:
    path = _file(tmp_path)
    result = CliRunner().invoke(main, ["compaction", "report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    failed, done = body["attempts"]
    events = [json.loads(x) for x in path.read_text().splitlines()]
    assert failed["outcome"] == "failed" and failed["evidence"]["summary"] is None
    q = failed["questions"]
    assert q["5_surface_after"]["state"] == "unchanged"
    assert "adds facts absent" in q["5_surface_after"]["reason"]
    assert done["outcome"] == "completed"
    ev = done["evidence"]
    assert [events[ev[k]]["type"] for k in ("start", "summary", "replace", "end")] == [
        "compaction/start", "compaction/summary", "user/message", "compaction/end"]
    q = done["questions"]
    assert q["1_why"]["trigger"] == "manual" and q["1_why"]["budget_tokens"] == 32_000
    summary = events[ev["summary"]]["data"]
    assert q["2_range"] == {"first_position": 0, "last_position": summary["last_position"]}
    assert q["3_shadowed"]["seqs"] == events[ev["replace"]]["source_event_seqs"]
    assert q["4_summarizer"]["model"] == "extractive-v2"
    assert q["5_surface_after"] == {"state": "changed", "by_replace_seq": ev["replace"]}
    assert len(q["6_meanwhile"]["nodes_kept_after_run"]) == 4  # keep_recent
    assert all(c["kept"] == c["total"] for c in done["gate"]["categories"].values())


def test_the_text_report_names_every_question(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["compaction", "report", str(_file(tmp_path))])
    assert result.exit_code == 0
    for label in ("1. why", "2. range", "3. shadowed", "4. summarizer", "5. surface",
                  "6. meanwhile", "gate:"):
        assert label in result.stdout
    assert "unchanged (failed: quality gate" in result.stdout


def test_an_attempt_without_an_end_is_reported_open() -> None:
    s = build_case(1, compact_midway=False).session
    s.append("compaction/start", {"compaction_id": "crashed", "trigger": "manual"})
    (a,) = compaction_report(s.events)
    assert a.outcome == "open" and a.answers()["5_surface_after"]["state"] == "unchanged"


def test_a_bad_file_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    result = CliRunner().invoke(main, ["compaction", "report", str(bad)])
    assert result.exit_code == 2 and f"{bad}:1:" in result.stderr
