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
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from sessionstream import redisconn
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics
from sessionstream.producers.writer import SessionWriter, WriterConfig
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.secure_profiles import PROFILES, SecureProfile, cli_env, started
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


@pytest.fixture(scope="module", params=PROFILES)
def secure_profile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   settings: Settings) -> Iterator[SecureProfile]:
    with started(request.param, tmp_path_factory.mktemp(f"canary-{request.param}"),
                 settings.cache_dir) as profile:
        yield profile


def _role_env(profile: SecureProfile, tenant: str, role: str) -> dict[str, str]:
    """What `acl env --role R` with the profile's flag exports, as a dict."""
    done = subprocess.run([sys.executable, "-m", "sessionstream.cli.main", "acl", "env",
                           "--tenant", tenant, "--role", role, profile.local_flag],
                          capture_output=True, text=True, env=cli_env(profile), timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    pairs = (line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines())
    return {k: v.strip("'") for k, v in pairs}


def test_a_canary_is_in_no_file_of_a_secure_profile_with_every_process_as_its_tenants_role(
    secure_profile: SecureProfile, procs: ProcessGroup, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same canary session on `up --secure` and on `cluster up --secure`: the writer,
    the worker, the compactor and the dashboard each run with only what `acl env` gives
    its role (its tenant's principals, data keys in the profile's Redis, the tenant key
    ring in its environment), and the canary is in no segment of any broker, no AOF/RDB
    of any Redis node, no server or process log, no attachment — while the dashboard's
    reader is shown it."""
    profile = secure_profile
    canary = f"CANARY{uuid.uuid4().hex}"
    tenant = f"canary{uuid.uuid4().hex[:8]}"
    applied = subprocess.run([sys.executable, "-m", "sessionstream.cli.main", "acl", "apply",
                              "--tenant", tenant, profile.local_flag, "--json"],
                             capture_output=True, text=True, env=cli_env(
                                 profile, SESSIONSTREAM_STREAMS_GROUP=f"sessionstream.{tenant}.p"),
                             timeout=90, check=False)
    assert applied.returncode == 0, applied.stderr
    mine = Settings(tenant=tenant, kafka_bootstrap=profile.bootstrap, partitions=2,
                    replication_factor=profile.replication_factor, state_dir=profile.base)
    admin = admin_client(profile.bootstrap, profile.admin_security)
    ensure_topics(admin, tenant_topics(mine))
    del admin  # no client left polling the profile's brokers after they stop
    common = {"SESSIONSTREAM_STATE_DIR": str(profile.base),
              "SESSIONSTREAM_ATTACHMENT_DIR": str(tmp_path / "attachments"),
              "SESSIONSTREAM_STREAMS_GROUP": f"sessionstream.{tenant}.projections",
              "SESSIONSTREAM_LOGLEVEL": "debug"}
    writer, worker, reader, auditor = (
        {**_role_env(profile, tenant, role), **common}
        for role in ("writer", "worker", "reader", "auditor"))
    caplog.set_level(logging.DEBUG)
    wproc = procs.start_module(WORKER, env=worker, name="kafka-worker")
    cfg = WriterConfig.from_settings(Settings.from_env(writer), spill_threshold=256,
                                     lease_ttl_ms=10_000)
    w = _write(cfg, canary)
    last = w.next_seq - 1
    w.close()
    row = KeySpace(tenant, "ss").session_row(w.session_id, 1)
    rclient = redisconn.sync_redis(reader["SESSIONSTREAM_REDIS_URL"],
                                   cluster=profile.redis_cluster, decode_responses=True)

    def at(seq: int) -> Callable[[], bool]:
        return lambda: int(rclient.hget(row, "as_of_seq") or -1) >= seq

    wait_until(at(last), 120, "the worker folding the session")
    compacted = procs.run_module("sessionstream.cli.main", "compact", w.session_id,
                                 "--budget", "200", "--keep-recent", "2", "--json", env=writer)
    assert compacted.returncode == 0, compacted.stderr
    assert json.loads(compacted.stdout)["outcome"] == "completed"
    wait_until(at(last + 4), 120, "the worker folding the compaction")
    rclient.close()

    port = _free_port()
    kafka_of_auditor = {k: v for k, v in auditor.items() if "KAFKA" in k}
    dash = procs.start_module("sessionstream.cli.main", "dashboard", "--port", str(port),
                              env={**reader, **kafka_of_auditor}, name="dashboard")
    token = reader["SESSIONSTREAM_DASHBOARD_TOKEN"].split(":", 1)[1]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/sessions/{w.session_id}",
                                     headers={"Authorization": f"Bearer {token}"})

    def shown() -> bool:
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return canary in r.read().decode()
        except OSError:
            return False

    dash.wait_for(shown, 60, "the dashboard showing the opened session to its reader")
    time.sleep(1.5)  # Redis appends to its AOF every second
    dash.stop()
    wproc.stop()

    servers = [p for d in profile.server_dirs for p in _files(d)]
    places = {
        "test process log (writer)": [caplog.text.encode()],
        "compactor output": [(compacted.stdout + compacted.stderr).encode()],
        "worker / dashboard logs": [p.read_bytes() for p in
                                    _files(*(p.log_path for p in procs.started))],
        "server files (segments, AOF/RDB, logs, configs)": [p.read_bytes() for p in servers],
        "attachment files": [p.read_bytes() for p in _files(tmp_path / "attachments")],
    }
    segments = [p for p in servers if p.suffix == ".log" and f"{tenant}.events-" in str(p)]
    assert len({p.parent.parent for p in segments}) == (
        3 if profile.redis_cluster else 1), "the topic's segments on every broker"
    assert [p for p in servers if "appendonly" in p.name], "no Redis persistence file found"
    assert places["attachment files"], "nothing was spilled"
    found = [name for name, blobs in places.items() if any(canary.encode() in b for b in blobs)]
    assert found == []
