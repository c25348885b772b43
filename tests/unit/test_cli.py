"""The offline CLI over JSONL session files: every command, and bad input reported as
FILE:LINE with exit 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("sessionstream.core.session")  # the session rules (Core-A) back every command

from sessionstream.cli.main import main
from sessionstream.core.jsonl import read_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LAB = FIXTURES / "lab_two_step.jsonl"
TRUNCATED = FIXTURES / "lab_two_step_truncated.jsonl"
COMPACTED = FIXTURES / "lab_compacted.jsonl"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def lines() -> list[dict]:
    return [json.loads(x) for x in LAB.read_text(encoding="utf-8").splitlines()]


def write(tmp_path: Path, rows: list, name: str = "bad.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                 encoding="utf-8")
    return p


# -- the lab, end to end ---------------------------------------------------------------

def test_validate_accepts_the_lab() -> None:
    code, out, _ = run("log", "validate", str(LAB))
    assert code == 0 and "ok, session lab-two-step, 17 events" in out
    code, out, _ = run("log", "validate", str(LAB), "--json")
    assert json.loads(out)["types"]["tool/result"] == 1


def test_messages_lists_only_model_visible_events_with_their_seqs() -> None:
    code, out, _ = run("messages", str(LAB), "--json")
    assert code == 0
    msgs = json.loads(out)
    assert [(m["kind"], m["seqs"]) for m in msgs] == [
        ("context", [1]), ("user", [4]), ("assistant", [8]), ("tool_result", [10]),
        ("assistant", [14])]
    code, out, _ = run("messages", str(LAB))
    assert "-> call-1 sql_query(" in out


def test_projections_fold_turns_and_tools_at_one_watermark() -> None:
    code, out, _ = run("projections", str(LAB), "--json", "--key", "turns", "--key", "tools")
    assert code == 0
    snap = json.loads(out)
    assert snap["as_of_seq"] == 16
    assert snap["views"]["turns"]["counts"] == {"completed": 1}
    assert snap["views"]["tools"]["open"] == []


def test_projections_unknown_key_is_bad_input() -> None:
    code, _, err = run("projections", str(LAB), "--key", "nope")
    assert code == 2 and "unknown projection nope" in err


def test_recover_a_truncated_lab_closes_the_turn_as_interrupted(tmp_path: Path) -> None:
    code, out, _ = run("recover", str(TRUNCATED), "--json")
    assert code == 0
    repairs = json.loads(out)["repairs"]
    assert [(r["seq"], r["type"], r["data"]["reason"]) for r in repairs] == [
        (10, "turn/end", "interrupted")]
    assert all(r["type"] != "tool/result" for r in repairs)
    out_file = tmp_path / "recovered.jsonl"
    code, out, _ = run("recover", str(TRUNCATED), "-o", str(out_file))
    assert code == 0 and "wrote" in out
    assert len(read_jsonl(out_file)) == 11


def test_recover_a_complete_log_has_nothing_to_repair() -> None:
    code, out, _ = run("recover", str(LAB))
    assert code == 0 and "nothing to repair" in out


def test_fork_records_lineage(tmp_path: Path) -> None:
    out_file = tmp_path / "child.jsonl"
    code, out, _ = run("fork", str(LAB), "-o", str(out_file), "--child-id", "kid", "--json")
    assert code == 0 and json.loads(out)["seed_length"] == 17
    child = read_jsonl(out_file)
    assert child[0].session_id == "kid"
    assert child[0].data["lineage"] == {"parent_session": "lab-two-step", "seed_length": 17,
                                        "delegation_depth": 1}
    code, out, _ = run("fork", str(LAB), "--at", "2")
    assert code == 0 and json.loads(out.splitlines()[0])["session_id"] == "lab-two-step-fork-2"


def test_fork_inside_an_open_turn_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    out_file = tmp_path / "child.jsonl"
    code, _, err = run("fork", str(LAB), "--at", "5", "-o", str(out_file))
    assert code == 2 and "cuts inside open turn" in err
    assert not out_file.exists()


def test_explain_names_the_source_of_every_part() -> None:
    code, out, _ = run("explain", str(LAB), "--json")
    assert code == 0
    parts = json.loads(out)
    assert {"part": "header", "field": "max_tokens", "value": 1024,
            "source": "adapter-default"} in parts
    ctx = [p for p in parts if p["part"] == "message" and p["kind"] == "context"]
    assert ctx[0]["snapshot_id"] == "ctx-workspace"


def test_explain_shows_the_seqs_a_compaction_summary_replaced() -> None:
    events = read_jsonl(COMPACTED)
    replace = next(e for e in events if e.surface_op.value == "replace")
    code, out, _ = run("explain", str(COMPACTED), "--json")
    assert code == 0
    summaries = [p for p in json.loads(out) if p["part"] == "message" and p["kind"] == "summary"]
    assert summaries == [{"part": "message", "index": summaries[0]["index"], "role": "user",
                          "kind": "summary", "seqs": [replace.seq],
                          "replaces": list(replace.source_event_seqs)}]
    # the replaced seqs are shadowed: no other message comes from them
    others = {s for p in json.loads(out) if p["part"] == "message" for s in p["seqs"]}
    assert others.isdisjoint(replace.source_event_seqs)
    code, out, _ = run("explain", str(COMPACTED))
    seqs = ",".join(map(str, replace.source_event_seqs))
    assert code == 0 and f"(summary) from seq {replace.seq}, replaces seqs {seqs}" in out


def test_explain_text_names_snapshots_calls_and_results() -> None:
    code, out, _ = run("explain", str(LAB))
    assert code == 0
    assert "message  #0 user (context) from seq 1, snapshot ctx-workspace" in out
    assert "calls call-1" in out and "result of call-1" in out
    assert 'header   {"field": "max_tokens", "source": "adapter-default", "value": 1024}' in out


def test_simulated_fixtures_are_what_the_generator_writes() -> None:
    from sessionstream.core.jsonl import dumps_line
    from tests.fixtures.generate import FIXTURES as GENERATED

    for name, make in GENERATED.items():
        expected = "".join(dumps_line(e) + "\n" for e in make())
        assert (FIXTURES / name).read_text(encoding="utf-8") == expected, (
            f"tests/fixtures/{name} is stale: run python -m tests.fixtures.generate")


def test_explain_refuses_while_a_tool_call_is_unanswered() -> None:
    code, _, err = run("explain", str(TRUNCATED))
    assert code == 1 and "call-1" in err


def test_help_is_available_for_every_command() -> None:
    for cmd in (["log", "validate"], ["messages"], ["projections"], ["recover"], ["fork"],
                ["explain"]):
        code, out, _ = run(*cmd, "--help")
        assert code == 0 and "--json" in out


# -- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("mutate", "line", "reason"),
    [
        (lambda r: r.__setitem__(3, "{not json"), 4, "not valid JSON"),
        (lambda r: r.__setitem__(3, r[3].replace('"seq":3', '"seq":4')), 4,
         "seq 4 where seq 3 was expected"),
        (lambda r: r.__setitem__(4, r[4].replace('"user/message"', '"memo/set"')), 5,
         "unknown event type 'memo/set' is not ignorable"),
        (lambda r: r.__setitem__(3, r[3].replace('"report weekly order count"', "NaN")), 4,
         "NaN is not JSON"),
        (lambda r: r.__setitem__(3, r[3].replace('"report weekly order count"', "1e999")), 4,
         "not lossless"),
        (lambda r: r.__setitem__(3, r[3].replace('"lab-two-step"', '"other"')), 4,
         "a file holds one session"),
        (lambda r: r.__setitem__(3, r[3].replace('"goal":', '"gaol":')), 4,
         "goal/set: data at $.goal: required field missing"),
        (lambda r: r.__setitem__(3, r[3].replace('"time":', '"tmie":')), 4,
         "envelope field(s) missing: time"),
        (lambda r: r.__delitem__(9), 10, "rule 'orphan-tool-result'"),
        (lambda r: r.__setitem__(3, ""), 4, "blank line"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path: Path, mutate, line: int, reason: str) -> None:
    rows = LAB.read_text(encoding="utf-8").splitlines()
    mutate(rows)
    if reason.startswith("rule"):  # a removed line: renumber so seqs stay contiguous
        rows = [json.dumps({**json.loads(r), "seq": i}) for i, r in enumerate(rows)]
    bad = write(tmp_path, rows)
    for cmd in (["log", "validate"], ["messages"], ["projections"], ["recover"]):
        code, _out, err = run(*cmd, str(bad))
        assert code == 2, (cmd, err)
        assert err.startswith(f"{bad}:{line}: "), err
        assert reason in err, err


def test_an_unknown_ignorable_type_is_kept_and_skipped(tmp_path: Path) -> None:
    rows = LAB.read_text(encoding="utf-8").splitlines()
    rows[3] = rows[3].replace('"goal/set"', '"memo/set"')  # goal/set is ignorable
    code, _out, err = run("log", "validate", str(write(tmp_path, rows)))
    assert code == 0, err


def test_validate_json_reports_the_problem_on_stdout(tmp_path: Path) -> None:
    bad = write(tmp_path, ["[1]"])
    code, out, _err = run("log", "validate", str(bad), "--json")
    assert code == 2 and json.loads(out) == {"file": str(bad), "ok": False, "line": 1,
                                             "reason": "expected an event envelope object, "
                                                       "got a list"}


def test_missing_file_and_wrong_args_exit_2(tmp_path: Path) -> None:
    code, _, err = run("log", "validate", str(tmp_path / "none.jsonl"))
    assert code == 2 and "none.jsonl:0: cannot read the file" in err
    code, _, _ = run("fork", str(LAB), "--at", "zero")
    assert code == 2
    code, _, _ = run("fork", str(LAB), "--at", "0")
    assert code == 2


def test_recover_writes_nothing_on_bad_input(tmp_path: Path) -> None:
    bad = write(tmp_path, ["{"])
    out_file = tmp_path / "out.jsonl"
    code, _, _ = run("recover", str(bad), "-o", str(out_file))
    assert code == 2 and not out_file.exists()
    assert list(tmp_path.iterdir()) == [bad]


@pytest.mark.parametrize("cmd", [["recover"], ["fork", "--at", "5"], ["compact-file"]])
def test_output_into_a_missing_folder_is_bad_input_and_writes_nothing(
        tmp_path: Path, cmd: list[str]) -> None:
    target = tmp_path / "no-such-folder" / "out.jsonl"
    src = TRUNCATED if cmd[0] == "recover" else LAB
    code, _out, err = run(cmd[0], str(src), *cmd[1:], "-o", str(target))
    assert code == 2, err
    assert "does not exist: create it first" in err and "Traceback" not in err
    assert not target.parent.exists()


def test_a_newer_format_version_in_session_start_data_names_line_1(tmp_path: Path) -> None:
    rows = lines()
    rows[0]["data"]["format_version"] = 99
    bad = write(tmp_path, rows)
    code, _out, err = run("log", "validate", str(bad))
    assert code == 2
    assert err.startswith(f"{bad}:1: ") and "format_version 99" in err, err


def test_docs_claims_about_the_envelope_hold(tmp_path: Path) -> None:
    """docs/events.md: a missing surface_op reads as none (refused for user/message), and an
    event inside an open turn without the turn's id in its envelope is refused."""
    rows = lines()
    user = next(i for i, r in enumerate(rows) if r["type"] == "user/message")
    no_op = [dict(r) for r in rows]
    del no_op[user]["surface_op"]
    code, _out, err = run("log", "validate", str(write(tmp_path, no_op, "a.jsonl")))
    assert code == 2 and f":{user + 1}: " in err and "surface_op none" in err, err
    inside = next(i for i, r in enumerate(rows) if r.get("turn_id") and r["type"] != "turn/start")
    no_turn = [dict(r) for r in rows]
    no_turn[inside].pop("turn_id")
    no_turn[inside].pop("step_id", None)
    code, _out, err = run("log", "validate", str(write(tmp_path, no_turn, "b.jsonl")))
    assert code == 2 and f":{inside + 1}: " in err and "turn_id should be" in err, err


def test_the_faust_worker_runs_on_uvloop_when_it_is_installed() -> None:
    import importlib.util

    from sessionstream.cli.streams import faust_loop

    expected = "uvloop" if importlib.util.find_spec("uvloop") is not None else "aio"
    assert faust_loop() == expected
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert "\"uvloop>=" in pyproject  # a dependency off Windows: installed by the project


def test_the_faust_app_keeps_its_data_dir_under_the_settings_not_the_working_directory(
        tmp_path: Path) -> None:
    """faust's own default is ``<app id>-data/`` in the working directory (a checkout)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SESSIONSTREAM_STATE_DIR": str(tmp_path / "state"),
           "SESSIONSTREAM_STREAMS_GROUP": "g-datadir"}
    env.pop("SESSIONSTREAM_FAUST_DATADIR", None)
    out = subprocess.run(
        [sys.executable, "-c", "import sessionstream.streams.app as a; print(a.app.conf.datadir)"],
        cwd=root, env=env, capture_output=True, text=True, check=True, timeout=60)
    assert Path(out.stdout.strip()) == tmp_path / "state" / "faust" / "g-datadir"
