"""Delete a session while the fleet's projections are live (real Kafka, Redis, processor).

The processor reads through the reader pipeline with the tenant's content opener: it
folds opened content, and when it meets the deletion's audit event it refolds the session
from the log, where the shredded content now opens as placeholders — the same views a
replay builds. Other sessions are untouched.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio import Redis

from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.privacy import DELETED_TEXT, DataClass
from sessionstream.core.rows import KeySpace, SessionRow
from sessionstream.core.session import Session
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.governance.rows import RowCipher, open_fields
from sessionstream.governance.service import Governance
from sessionstream.producers.audit import WriterAuditLog
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from sessionstream.streams.kafka_io import KafkaLogReader
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.streams_helpers import read_topic, stored_views
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CANARY = "canary-live-5e2a"


def _store(root: Path) -> FileKeyStore:
    return FileKeyStore(root, cache_ttl_s=0)


def _pipeline(root: Path) -> ReaderPipeline:
    return ReaderPipeline.default(
        opener=SealedContentOpener(ContentCipher(_store(root), "default")))


def _work(w: SessionWriter, n: int) -> None:
    w.append("turn/start", {})
    w.append("user/message", {"content": f"{CANARY} {n}"})
    w.append("step/start", {})
    w.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": f"c{n}", "name": "run_sql", "arguments": {"q": CANARY}}
    w.append("assistant/message", {"content": f"{CANARY} a{n}", "tool_calls": [call]})
    w.append("tool/call", call)
    w.append("tool/result", {"call_id": f"c{n}", "status": "ok",
                             "content": f"{CANARY} result {n} " * 8, "operation_id": f"op{n}"})
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})
    w.append("todo/add", {"id": f"t{n}", "text": f"{CANARY} todo"})
    w.flush(10)


async def _fold(proc: Processor, settings: Settings, topic: str, n: int, done: int) -> int:
    # every record again: the processor skips what its progress covers (and ``done`` can
    # not slice a (partition, offset)-sorted read whose new records land in any partition)
    records = read_topic(settings.kafka_bootstrap, topic, n)
    for i in range(0, len(records), 50):
        await proc.process(records[i:i + 50])
    return n


def _rows(root: Path) -> RowCipher:
    return RowCipher(ContentCipher(_store(root), "default"))


def _dump(r: redis.Redis, keys: KeySpace, sid: str, gen: int,
          rows: RowCipher | None = None) -> dict[str, Any]:
    """The session's views as readers get them (opened with ``rows``)."""
    fields = r.hgetall(keys.session_row(sid, gen))
    opened = open_fields(rows, sid, fields, SessionRow.VIEW, SessionRow.STATE)
    return SessionRow.views(opened)


def _raw(r: redis.Redis, keys: KeySpace, sid: str) -> str:
    """Every value Redis holds about the session, as stored (what a dump would show)."""
    out = []
    for key in r.scan_iter(match=keys.session_key(sid, "*")):
        kind = r.type(key)
        if kind == "hash":
            out.append(json.dumps(r.hgetall(key)))
        elif kind == "stream":
            out.append(json.dumps(r.xrange(key)))
    return "".join(out)


async def test_delete_mid_fleet_purges_content_keeps_metadata_and_replay_equals_live(
    settings: Settings, writer_cfg: WriterConfig, redis_client: redis.Redis,
    redis_prefix: str, tmp_path: Path, unique_topic: Callable[..., str],
) -> None:
    root = tmp_path / "keys"
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(_store(root), "default"),
                              spill_threshold=100)
    keys = KeySpace("default", redis_prefix)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    rows = _rows(root)
    proc = Processor(pipeline=_pipeline(root), sink=RedisSink(aredis, keys), group="g",
                     log_reader=KafkaLogReader(settings.kafka_bootstrap), rows=rows)
    doomed, kept = SessionWriter.create(cfg), SessionWriter.create(cfg)
    _work(doomed, 1)
    _work(kept, 1)
    total = doomed.next_seq + kept.next_seq
    done = await _fold(proc, settings, cfg.topic, total, 0)
    # readers with the keys see the content; Redis itself holds none in clear
    assert CANARY in json.dumps(_dump(redis_client, keys, doomed.session_id, 1, rows))
    assert CANARY not in _raw(redis_client, keys, doomed.session_id)
    assert "unavailable" in json.dumps(_dump(redis_client, keys, doomed.session_id, 1))
    _work(doomed, 2)  # the fleet goes on while the deletion happens
    _work(kept, 2)
    total = doomed.next_seq + kept.next_seq
    done = await _fold(proc, settings, cfg.topic, total, done)
    kept_before = _dump(redis_client, keys, kept.session_id, 1, rows)

    gov = Governance(cfg, _store(root), redis_client, audit=WriterAuditLog(cfg),
                     principal="dpo")
    report = gov.delete(doomed.session_id, reason="erasure request")
    assert report.attachments_deleted == 2
    # purged at once: no content of the session is left in Redis
    assert CANARY not in json.dumps(_dump(redis_client, keys, doomed.session_id, 1, rows))
    log = read_log(cfg, doomed.session_id).admitted
    done = await _fold(proc, settings, cfg.topic, total + 1, done)  # the audit event

    # live views: metadata folded normally, content as placeholders, audit visible
    live = _dump(redis_client, keys, doomed.session_id, 1, rows)
    text = json.dumps(live)
    assert CANARY not in text and DELETED_TEXT in text
    assert stored_views(redis_client, redis_prefix, "default", doomed.session_id)[0] == (
        log[-1].seq)
    assert _dump(redis_client, keys, kept.session_id, 1, rows) == kept_before  # untouched
    assert CANARY in json.dumps(kept_before)
    # nothing readable in Kafka, attachments gone; order, pairing and audit remain
    raw = read_topic(settings.kafka_bootstrap, cfg.topic, total + 1)
    assert all(CANARY.encode() not in (r.value or b"") for r in raw)
    assert cfg.attachment_dir is not None
    session = Session.from_events(log)
    calls = [c.call_id for m in session.derive_messages() for c in m.tool_calls]
    results = [m.call_id for m in session.derive_messages() if m.call_id]
    assert calls == results == ["c1", "c2"]
    assert log[-1].type == "session/shred" and log[-1].data["principal"] == "dpo"

    # a replay (fresh processor, new generation) equals the live projections
    replay = Processor(pipeline=_pipeline(root), sink=RedisSink(aredis, keys), group="r",
                       log_reader=KafkaLogReader(settings.kafka_bootstrap), generation=2,
                       rows=_rows(root))
    await _fold(replay, settings, cfg.topic, total + 1, 0)
    for sid in (doomed.session_id, kept.session_id):
        assert _dump(redis_client, keys, sid, 2, rows) == _dump(redis_client, keys, sid, 1,
                                                                 rows), sid
    await aredis.aclose()


def test_the_deleted_surface_is_a_valid_provider_request(writer_cfg: WriterConfig,
                                                         redis_client: redis.Redis,
                                                         tmp_path: Path) -> None:
    from sessionstream.core.providers import APIS, build
    from tests.unit.harness_cases import request_of
    from tests.unit.sdk_check import validate

    root = tmp_path / "keys"
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(_store(root), "default"))
    w = SessionWriter.create(cfg)
    _work(w, 1)
    w.close()
    Governance(cfg, _store(root), redis_client, audit=WriterAuditLog(cfg)).delete(w.session_id)
    session = Session.from_events(read_log(cfg, w.session_id).admitted)
    request = request_of(session)
    for api in APIS:
        validate(api, build(api, request).body)


async def test_the_dashboard_says_a_deleted_session_is_no_longer_fully_reconstructable(
    settings: Settings, writer_cfg: WriterConfig, redis_client: redis.Redis,
    redis_prefix: str, tmp_path: Path,
) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from sessionstream.dashboard.app import DashboardConfig, create_app

    root = tmp_path / "keys"
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(_store(root), "default"))
    w = SessionWriter.create(cfg)
    _work(w, 1)
    w.close()
    keys = KeySpace("default", redis_prefix)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    proc = Processor(pipeline=_pipeline(root), sink=RedisSink(aredis, keys), group="g",
                     log_reader=KafkaLogReader(settings.kafka_bootstrap), rows=_rows(root))
    await _fold(proc, settings, cfg.topic, w.next_seq, 0)
    config = DashboardConfig(redis_url=settings.redis_url, keys=keys, rows=_rows(root))
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        before = await (await c.get(f"/api/sessions/{w.session_id}")).json()
        assert before["reconstructability"] == {"fully_reconstructable": True, "shredded": []}
        Governance(cfg, _store(root), redis_client, audit=WriterAuditLog(cfg),
                   principal="dpo").delete(
            w.session_id, [DataClass.SURFACE], reason="erasure")
        await _fold(proc, settings, cfg.topic, w.next_seq + 1, 0)
        after = await (await c.get(f"/api/sessions/{w.session_id}")).json()
    assert after["reconstructability"]["fully_reconstructable"] is False
    assert [(s["data_class"], s["principal"], s["reason"])
            for s in after["reconstructability"]["shredded"]] == [("surface", "dpo", "erasure")]
    assert CANARY not in json.dumps(after["views"]["surface"])  # only surface was deleted
    assert CANARY in json.dumps(after["views"]["todo"])
    await aredis.aclose()
