"""The harness loop on the Kafka SessionWriter, and files ⇄ fleet (publish / fetch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sessionstream.cli.main import main
from sessionstream.core.events import Event
from sessionstream.core.harness import Harness, ToolContext, ToolOutcome
from sessionstream.core.jsonl import read_jsonl, write_jsonl
from sessionstream.core.providers.convert import export_session, import_conversation
from sessionstream.core.providers.scripted import Reply, ScriptedClient
from sessionstream.producers.transfer import fetch, publish
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.fixtures.bodies import INTERLEAVED
from tests.integration.writers import writer_cfg
from tests.unit import harness_cases as cases

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


def _same(e: Event) -> tuple[Any, ...]:
    return (e.seq, e.type, e.data, e.surface_op, e.source_event_seqs, e.turn_id, e.step_id)


def test_the_harness_loop_writes_through_the_session_writer(writer_cfg: WriterConfig) -> None:
    w = SessionWriter.create(writer_cfg)
    unconfirmed_at_run: list[int] = []

    def sql(args: Any, ctx: ToolContext) -> ToolOutcome:
        unconfirmed_at_run.append(len(w.unconfirmed()))  # the tool/call is already durable
        return ToolOutcome("3 rows", operation_id="op-1")

    h = Harness(w, ScriptedClient("anthropic", [
        Reply("Querying.", [("c1", "run_sql", {"q": "select 1"})]), Reply("3 rows.")]),
        "anthropic", cases.HEADER, cases.registry(), tools={"run_sql": sql},
        providers=[cases.TOOLS], variables={"agent": "Ada"}, stream=True)
    result = h.turn("count")
    assert result.reason == "completed"
    assert unconfirmed_at_run == [0]
    written = list(w.session.events)
    w.close()
    admitted = read_log(writer_cfg, w.session_id).admitted
    assert [e.event_id for e in admitted] == [e.event_id for e in written]
    call = next(e for e in admitted if e.type == "tool/call")
    assert call.data["idempotency_key"] == f"{w.session_id}/c1"


@pytest.mark.parametrize("make", [cases.manual, cases.compacted, cases.refused])
def test_publish_then_fetch_returns_the_same_events(writer_cfg: WriterConfig,
                                                    make: Any) -> None:
    events = list(make().events)
    published = publish(writer_cfg, events)
    fetched, rejected = fetch(writer_cfg, published.session_id)
    assert rejected == 0 and published.events == len(events)
    assert [_same(e) for e in fetched] == [_same(e) for e in events]
    assert {e.session_id for e in fetched} == {published.session_id}


@pytest.mark.parametrize("api", sorted(INTERLEAVED))
def test_interleaved_reasoning_survives_publish_and_fetch_in_its_place(
        writer_cfg: WriterConfig, api: str) -> None:
    body = INTERLEAVED[api]
    events = list(import_conversation(api, body, session_id="interleaved").events)
    published = publish(writer_cfg, events)
    fetched, rejected = fetch(writer_cfg, published.session_id)
    assert rejected == 0
    assert [_same(e) for e in fetched] == [_same(e) for e in events]
    built, _notes = export_session(api, fetched)
    assert built.body == body  # every thinking block where the model put it


def _env(monkeypatch: pytest.MonkeyPatch, cfg: WriterConfig) -> None:
    for k, v in {"EVENTS_TOPIC": cfg.topic, "KEY_PREFIX": cfg.key_prefix,
                 "KAFKA_BOOTSTRAP": cfg.bootstrap, "REDIS_URL": cfg.redis_url,
                 "TENANT": cfg.tenant, "ATTACHMENT_DIR": str(cfg.attachment_dir)}.items():
        monkeypatch.setenv(f"SESSIONSTREAM_{k}", v)


def test_log_publish_and_fetch_on_the_command_line(writer_cfg: WriterConfig, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, writer_cfg)
    src = tmp_path / "in.jsonl"
    write_jsonl(cases.manual().events, src)
    runner = CliRunner()
    pub = runner.invoke(main, ["log", "publish", str(src), "--session-id", "cli-s1", "--json"])
    assert pub.exit_code == 0, pub.output
    assert json.loads(pub.output)["session_id"] == "cli-s1"
    again = runner.invoke(main, ["log", "publish", str(src), "--session-id", "cli-s1"])
    assert again.exit_code == 1 and "already exists" in again.output
    out = tmp_path / "out.jsonl"
    got = runner.invoke(main, ["log", "fetch", "cli-s1", "-o", str(out), "--json"])
    assert got.exit_code == 0, got.output
    assert [_same(e) for e in read_jsonl(out)] == [_same(e) for e in read_jsonl(src)]
    missing = runner.invoke(main, ["log", "fetch", "no-such-session"])
    assert missing.exit_code == 1 and "no admitted events" in missing.output
