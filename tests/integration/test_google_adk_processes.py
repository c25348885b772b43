"""ADK through separate processes and through a deletion (real Kafka + Redis, sealed
content): a conversation served by ten processes in turn keeps every message; two "nodes"
race one session and leave one history with StaleSessionError for the loser, also when
one's write is forced to overlap the other's; ``sessionstream delete`` shreds an ADK
session and ADK then reads placeholders."""

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


async def test_a_conversation_served_by_ten_processes_in_turn_keeps_every_message(
        env: dict[str, str]) -> None:
    """A stateless tier: each turn is a process that builds the service, loads the
    session, appends the user's message and the agent's answer, and exits without
    closing; the next process (another node) continues at once. The first handoff is
    the one that failed before (A creates and writes a turn, B appends the next user
    message: 'outside-turn', then StaleSessionError)."""
    app = f"ten{uuid.uuid4().hex[:8]}"
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT),
                 "SESSIONSTREAM_LEASE_TTL_MS": "60000"}  # a lease left held would show
    for n in range(10):
        run = subprocess.run(
            [sys.executable, "-m", "tests.integration.adk_turn_child", app, "conv", str(n)],
            cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads(run.stdout.strip().splitlines()[-1]) == {"found": 2 * n}
    reader = _service(env)
    got = await reader.get_session(app_name=app, user_id="u", session_id="conv")
    assert got is not None
    assert texts(got) == [t for n in range(10) for t in (f"question {n}", f"answer {n}")]
    # each process continued the history it was handed: no resume, no repair
    log = reader.store.open(stream_id(app, "u", "conv")).events()
    assert [e.type for e in log].count("session/end-seed") == 0
    assert not [e for e in log if e.type == "turn/end" and e.data["reason"] != "completed"]
    await reader.close()


async def test_a_write_overlapping_another_process_s_waits_and_is_stale(
        env: dict[str, str], tmp_path: Path) -> None:
    """The racer appends while the holder's write is in flight (forced: the holder's
    write waits until the racer's met the held session): the racer waits for it, then
    finds the session changed and gets StaleSessionError with nothing stored; reloaded,
    it appends at once."""
    app = f"over{uuid.uuid4().hex[:8]}"
    svc = _service(env)
    await svc.create_session(app_name=app, user_id="u", session_id="s")
    await svc.close()
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    procs = {role: subprocess.Popen(
        [sys.executable, "-m", "tests.integration.adk_overlap_child", role, app,
         str(tmp_path)], cwd=ROOT, env=child_env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for role in ("holder", "racer")}
    out = {}
    for role, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-3000:]
        out[role] = json.loads(stdout.strip().splitlines()[-1])
    assert (tmp_path / "tried").exists()  # the racer's write met the held session
    assert out == {"holder": ["ok"], "racer": ["StaleSessionError", "ok"]}
    reader = _service(env)
    got = await reader.get_session(app_name=app, user_id="u", session_id="s")
    assert got is not None and texts(got) == ["holder", "racer, reloaded"]
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
