"""No content at rest or in logs: a canary in every content field, looked for everywhere.

A session whose every content field (user and assistant messages, chunks, tool-call
arguments, small and spilled tool results, context snapshot, turn-end detail, todo,
plan, goal, business values) carries a unique canary is written with the default
(encrypted) settings, folded by a worker process, compacted by the compactor and shown
by the dashboard. The canary must then be in no log of the writer, worker, compactor,
dashboard, Kafka or Redis, in no Kafka log segment of the topic, in no Redis AOF/RDB
file and in no attachment file — while an authorised reader (the dashboard's API)
still shows it.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.producers.writer import SessionWriter, WriterConfig
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.streams_helpers import wait_until, worker_env

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(cfg: WriterConfig, canary: str) -> SessionWriter:
    w = SessionWriter.create(cfg)
    w.append("context/snapshot", {"snapshot_id": "ctx", "content": f"{canary} context"})
    for n in range(3):
        w.append("turn/start", {})
        w.append("user/message", {"content": f"{canary} question {n}"})
        w.append("step/start", {})
        w.append("request/header", {"provider": "p", "model": "m"})
        w.append("assistant/chunk", {"text": f"{canary} chunk", "index": 0})
        calls = [{"call_id": f"c{n}a", "name": "sql", "arguments": {"q": canary}},
                 {"call_id": f"c{n}b", "name": "read", "arguments": {"path": canary}}]
        w.append("assistant/message", {"content": f"{canary} answer", "tool_calls": calls})
        for c in calls:
            w.append("tool/call", c)
        w.append("tool/result", {"call_id": f"c{n}a", "status": "ok",
                                 "content": f"{canary} small"})
        w.append("tool/result", {"call_id": f"c{n}b", "status": "ok",
                                 "content": f"{canary} spilled " * 40})
        w.append("step/end", {})
        w.append("turn/end", {"reason": "completed", "detail": f"{canary} detail"})
    w.append("todo/add", {"id": "t1", "text": f"{canary} todo"})
    w.append("plan/set", {"steps": [f"{canary} step"]})
    w.append("goal/set", {"goal": f"{canary} goal"})
    w.append("business/filters", {"filters": {"region": canary}})
    w.append("business/time", {"time": {"range": canary}})
    w.flush(10)
    return w


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists()
            for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()]


def test_a_canary_in_every_content_field_is_in_no_log_segment_dump_or_attachment(
    settings: Settings, unique_topic: Callable[..., str], redis_client: redis.Redis,
    redis_prefix: str, consumer_group: str, procs: ProcessGroup, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    canary = f"CANARY{uuid.uuid4().hex}"
    topic, dlq = unique_topic(2), unique_topic(1)
    env = worker_env(settings, topic, dlq, consumer_group, redis_prefix,
                     SESSIONSTREAM_KEY_DIR=str(tmp_path / "keys"),
                     SESSIONSTREAM_ATTACHMENT_DIR=str(tmp_path / "attachments"))
    mine = Settings.from_env({**env, "SESSIONSTREAM_STATE_DIR": str(settings.state_dir)})
    cfg = WriterConfig.from_settings(mine, spill_threshold=256, lease_ttl_ms=10_000)
    caplog.set_level(logging.DEBUG)

    worker = procs.start_module(WORKER, env={**env, "SESSIONSTREAM_LOGLEVEL":
                                                             "debug"}, name="kafka-worker")
    w = _write(cfg, canary)
    last = w.next_seq - 1
    w.close()
    row = KeySpace(settings.tenant, redis_prefix).session_row(w.session_id, 1)

    def at(seq: int) -> Callable[[], bool]:
        return lambda: int(redis_client.hget(row, "as_of_seq") or -1) >= seq

    wait_until(at(last), 90, "the worker folding the session")
    compacted = procs.run_module("sessionstream.cli.main", "compact", w.session_id,
                                 "--budget", "200", "--keep-recent", "2", "--json", env=env)
    assert compacted.returncode == 0, compacted.stderr
    assert json.loads(compacted.stdout)["outcome"] == "completed"
    wait_until(at(last + 4), 90, "the worker folding the compaction")

    port = _free_port()
    token = "canary-reader-token-0123456789"
    dash = procs.start_module("sessionstream.cli.main", "dashboard", "--port", str(port),
                              env={**env, "SESSIONSTREAM_DASHBOARD_TOKEN": token},
                              name="dashboard")
    url = f"http://127.0.0.1:{port}/api/sessions/{w.session_id}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})

    def shown() -> bool:
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return canary in r.read().decode()
        except OSError:
            return False

    dash.wait_for(shown, 30, "the dashboard showing the opened session to its reader")
    time.sleep(1.5)  # Redis appends to its AOF every second
    dash.stop()
    worker.stop()

    state = settings.state_dir
    places = {
        "test process log (writer)": [caplog.text.encode()],
        "compactor output on stderr": [compacted.stderr.encode()],
    }
    for name, paths in {
        "worker / dashboard logs": _files(*(p.log_path for p in procs.started)),
        "Kafka server log": _files(state / "kafka" / "kafka.log"),
        "Redis server log": _files(state / "redis" / "redis.log"),
        "Kafka log segments of the topic": [
            p for d in (state / "kafka" / "data").glob(f"{topic}-*") for p in _files(d)],
        "Redis AOF and RDB files": _files(state / "redis" / "data"),
        "attachment files": _files(tmp_path / "attachments"),
    }.items():
        places[name] = [p.read_bytes() for p in paths]
    assert places["Kafka log segments of the topic"], "no segment of the topic found"
    assert places["Redis AOF and RDB files"], "no Redis persistence file found"
    assert places["attachment files"], "nothing was spilled"
    found = [name for name, blobs in places.items() if any(canary.encode() in b for b in blobs)]
    assert found == []
