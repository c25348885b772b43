"""ADK through two processes and through a deletion (real Kafka + Redis, sealed content):
two "nodes" race one session and leave one history with StaleSessionError for the loser;
``sessionstream delete`` shreds an ADK session and ADK then reads placeholders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessionstream.cli.main import main
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.settings import Settings
from sessionstream.integrations.google_adk import (
    EVENT_TYPES,
    SessionstreamSessionService,
    stream_id,
)
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig
from tests.contract.adk_contract import agent_calls, agent_says, texts, tool_answers, user_says
from tests.integration.streams_helpers import read_topic
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CANARY = "canary-adk-7f31"


@pytest.fixture
def env(writer_cfg: WriterConfig, tmp_path: Path) -> dict[str, str]:
    """One tenant's settings for this process, the children and the CLI (sealed)."""
    return {"SESSIONSTREAM_EVENTS_TOPIC": writer_cfg.topic,
            "SESSIONSTREAM_KEY_PREFIX": writer_cfg.key_prefix,
            "SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
            "SESSIONSTREAM_ATTACHMENT_DIR": str(tmp_path / "att"),
            "SESSIONSTREAM_STATE_DIR": os.environ.get("SESSIONSTREAM_STATE_DIR", str(tmp_path)),
            "SESSIONSTREAM_PRINCIPAL": "dpo"}


def _service(env: dict[str, str]) -> SessionstreamSessionService:
    settings = Settings.from_env({**os.environ, **env})
    return SessionstreamSessionService(FleetStore.from_settings(settings, EVENT_TYPES))


async def test_two_processes_race_one_session_one_history_stale_for_the_loser(
        env: dict[str, str], tmp_path: Path) -> None:
    app = f"race{uuid.uuid4().hex[:8]}"
    svc = _service(env)
    await svc.create_session(app_name=app, user_id="u", session_id="race")
    await svc.close()
    go, n = tmp_path / "go", 6
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.integration.adk_race_child", name, app, str(go), str(n)],
        cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("node-a", "node-b")]
    for p in procs:  # both loaded the session before either writes
        assert p.stdout is not None
        line = p.stdout.readline()
        assert "ready" in line, p.stderr.read() if p.stderr else line
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    winner = [r for r in results if r["stale"] is None]
    loser = [r for r in results if r["stale"] is not None]
    assert len(winner) == 1 and len(loser) == 1, results
    assert winner[0]["appended"] == n and loser[0]["appended"] == 0
    assert loser[0]["stale"] == "StaleSessionError"
    reader = _service(env)
    got = await reader.get_session(app_name=app, user_id="u", session_id="race")
    assert got is not None
    assert texts(got) == [f"{winner[0]['name']} {i}" for i in range(n)]
    await reader.close()


async def test_a_deleted_adk_session_reads_as_placeholders_through_adk(
        env: dict[str, str], writer_cfg: WriterConfig, settings: Settings) -> None:
    app = f"gdpr{uuid.uuid4().hex[:8]}"
    svc = _service(env)
    s = await svc.create_session(app_name=app, user_id="u", session_id="s",
                                 state={"secret": CANARY})
    for e in [user_says(f"{CANARY} my card"), agent_calls("c1", "charge", {"card": CANARY}),
              tool_answers("c1", "charge", {"ok": CANARY}), agent_says(f"{CANARY} done")]:
        await svc.append_event(s, e)
    await svc.close()
    sid = stream_id(app, "u", "s")
    # sealed at rest: the canary is in no record of the topic
    records = read_topic(settings.kafka_bootstrap, writer_cfg.topic, 12)
    assert records and not any(CANARY.encode() in bytes(r.value) for r in records)
    done = CliRunner().invoke(main, ["delete", sid, "--json"], env=env)
    assert done.exit_code == 0, done.output
    reader = _service(env)  # a fresh process's service (no cached data keys)
    got = await reader.get_session(app_name=app, user_id="u", session_id="s")
    assert got is not None and len(got.events) == 4
    assert [e.content.role for e in got.events if e.content] == ["user", "model", "user",
                                                                 "model"]
    assert all(p.text == DELETED_TEXT for e in got.events for p in e.content.parts)  # type: ignore[union-attr]
    assert CANARY not in json.dumps(got.model_dump(mode="json"))
    assert got.state == {}
    listed = (await reader.list_sessions(app_name=app, user_id="u")).sessions
    assert [x.id for x in listed] == ["s"]
    await reader.close()
