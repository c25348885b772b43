"""SessionstreamSession on the fleet (real Kafka + Redis): a two-process writer race through
the SDK API, a deleted session read through the SDK API, content sealed at rest."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.session import Session
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.service import Governance
from sessionstream.integrations.openai_agents import EVENT_TYPES, SessionstreamSession
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.audit import WriterAuditLog
from sessionstream.producers.writer import WriterConfig
from tests.integration.streams_helpers import read_topic
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration
RACER = Path(__file__).with_name("openai_agents_racer.py")
ROOT = Path(__file__).resolve().parents[2]
CANARY = "canary-sdk-7f3c"


def test_two_processes_overlapping_through_the_sdk_api_leave_one_history(
        writer_cfg: WriterConfig, tmp_path: Path) -> None:
    """Two processes write one SDK session; the racer's write is forced to overlap the
    holder's (it runs while the holder's write is in flight): the racer is refused with
    WriterConflict and nothing of it is stored, the holder's write is unaffected, and the
    racer's next write, once the holder's ended, goes through at once."""
    env = {**os.environ, "SESSIONSTREAM_EVENTS_TOPIC": writer_cfg.topic,
           "SESSIONSTREAM_KEY_PREFIX": writer_cfg.key_prefix, "SESSIONSTREAM_ENCRYPTION": "off"}
    procs = [subprocess.Popen([sys.executable, str(RACER), role, "race", str(tmp_path)],
                              env=env) for role in ("holder", "racer")]
    for p in procs:
        assert p.wait(timeout=120) == 0
    holder = [json.loads(x) for x in (tmp_path / "holder.jsonl").read_text().splitlines()]
    racer = [json.loads(x) for x in (tmp_path / "racer.jsonl").read_text().splitlines()]
    assert [o["outcome"] for o in holder] == ["ok", "ok"]
    assert [o["outcome"] for o in racer] == ["WriterConflict", "ok"]  # the loser was told
    cfg = dataclasses.replace(writer_cfg, cipher=None)
    store = FleetStore(cfg, EVENT_TYPES)
    events = store.open("race").events()
    Session.from_events(events, catalog=store.catalog)  # one valid history
    stored = [dict(e.data["item"]) for e in events if "item" in e.data]
    assert stored == [holder[0]["item"], holder[1]["item"], racer[1]["item"]]  # no more
    store.close()


async def test_a_conversation_served_by_ten_processes_in_turn_keeps_every_message(
        writer_cfg: WriterConfig) -> None:
    """A stateless tier: each turn is one process that builds the session, runs the agent
    once and exits without closing; the next process (another "node") continues at once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SESSIONSTREAM_EVENTS_TOPIC": writer_cfg.topic,
           "SESSIONSTREAM_KEY_PREFIX": writer_cfg.key_prefix, "SESSIONSTREAM_ENCRYPTION": "off"}
    for n in range(10):
        run = subprocess.run([sys.executable, "-m", "tests.integration.openai_agents_turn",
                              "ten", str(n)], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.strip() == "Paris."
    items = await SessionstreamSession("ten", FleetStore(writer_cfg)).get_items()
    assert [i.get("role") for i in items] == ["user", "assistant"] * 10
    assert [i["content"] for i in items[::2]] == [
        f"Turn {n}: capital of France?" for n in range(10)]


async def test_a_deleted_sdk_session_reads_as_placeholders(
        writer_cfg: WriterConfig, tmp_path: Path, redis_client: redis.Redis) -> None:
    keys = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(keys, "default"))
    store = FleetStore(cfg)
    s = SessionstreamSession("doomed", store)
    call = {"type": "function_call", "call_id": "call_1", "name": "ls",
            "arguments": json.dumps({"q": CANARY})}
    await s.add_items([{"role": "user", "content": f"{CANARY} question"}, call,
                       {"type": "function_call_output", "call_id": "call_1",
                        "output": f"{CANARY} output"}])
    records = read_topic(cfg.bootstrap, cfg.topic, len(s.handle.events()))
    assert records and not any(CANARY.encode() in (r.value or b"") for r in records)  # sealed
    assert (await s.get_items())[0]["content"] == f"{CANARY} question"
    s.close()
    views = [k for k in redis_client.scan_iter(f"{cfg.key_prefix}:*doomed*:fv*")]
    assert views, "the items view is kept in Redis"
    dump = b"".join(redis_client.dump(k) or b"" for k in views)  # type: ignore[misc]
    assert CANARY.encode() not in dump  # sealed in Redis too

    gov = Governance(cfg, keys, redis_client, audit=WriterAuditLog(cfg), principal="dpo")
    gov.delete("doomed", reason="erasure request")
    assert not list(redis_client.scan_iter(f"{cfg.key_prefix}:*doomed*:fv*"))  # purged

    items = await SessionstreamSession("doomed", FleetStore(cfg)).get_items()
    assert items == [
        {"role": "user", "content": DELETED_TEXT},
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": DELETED_TEXT}]
    store.close()
