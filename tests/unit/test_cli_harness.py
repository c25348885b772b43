"""`log import`, `log export` and `explain --provider` on the command line (offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessionstream.cli.main import main
from sessionstream.core.jsonl import read_jsonl, write_jsonl
from sessionstream.core.providers import APIS
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import validate


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    write_jsonl(cases.manual().events, path)
    return path


@pytest.mark.parametrize("api", APIS)
def test_export_then_import_on_the_command_line(api: str, session_file: Path,
                                               tmp_path: Path) -> None:
    runner = CliRunner()
    body = tmp_path / "body.json"
    out = runner.invoke(main, ["log", "export", "--to", api, str(session_file), "-o", str(body)])
    assert out.exit_code == 0, out.output
    assert "note: " in out.output  # the dict result and the moved steering are reported
    validate(api, json.loads(body.read_text()))
    back = tmp_path / "back.jsonl"
    imp = runner.invoke(main, ["log", "import", "--from", api, str(body), "-o", str(back),
                               "--session-id", "back", "--json"])
    assert imp.exit_code == 0, imp.output
    summary = json.loads(imp.output[imp.output.index("{"):])
    assert summary["session_id"] == "back" and summary["events"] == len(read_jsonl(back))
    again = runner.invoke(main, ["log", "export", "--to", api, str(back), "--json"])
    assert json.loads(again.output)["body"] == json.loads(body.read_text())


def test_explain_provider_maps_every_body_path_to_its_source(session_file: Path) -> None:
    out = CliRunner().invoke(main, ["explain", "--provider", "anthropic", str(session_file),
                                    "--json"])
    assert out.exit_code == 0, out.output
    parts = json.loads(out.output)["parts"]
    by_path = {p["path"]: p for p in parts}
    assert by_path["/messages/3/content/1"]["call_id"] == "c2"
    assert by_path["/messages/3/content/1"]["seqs"] == [11]
    assert by_path["/model"]["source"] == "call"
    text = CliRunner().invoke(main, ["explain", "--provider", "openai-chat", str(session_file)])
    assert text.exit_code == 0 and "/messages/0" in text.output


@pytest.mark.parametrize(("content", "message"), [
    ('{"messages": [{"role": "tool", "tool_call_id": "zz", "content": "x"}]}',
     "at /messages/0: a tool result for call 'zz'"),
    ('{"messages": [', "not valid JSON"),
    ('{"messages": [{"role": "wizard"}]}', "at /messages/0/role"),
])
def test_bad_import_input_exits_2_naming_where_and_writes_nothing(
        tmp_path: Path, content: str, message: str) -> None:
    src = tmp_path / "in.json"
    src.write_text(content)
    dest = tmp_path / "out.jsonl"
    out = CliRunner().invoke(main, ["log", "import", "--from", "openai-chat", str(src),
                                    "-o", str(dest)])
    assert out.exit_code == 2
    assert message in out.output and str(src) in out.output
    assert not dest.exists()


def test_export_of_a_session_with_an_unanswered_call_exits_2(tmp_path: Path) -> None:
    s = cases.new_session("open")
    s.append("turn/start")
    s.append("user/message", {"content": "x"})
    s.append("step/start")
    s.append("request/header", {"provider": "p", "model": "m"})
    s.append("assistant/message", {"content": "", "tool_calls": [
        {"call_id": "o1", "name": "f", "arguments": {}}]})
    path = tmp_path / "open.jsonl"
    write_jsonl(s.events, path)
    out = CliRunner().invoke(main, ["log", "export", "--to", "openai-chat", str(path)])
    assert out.exit_code == 2 and "o1" in out.output
