"""`sessionstream diagnose SESSION` against the real Kafka and Redis.

A session written by SessionWriter, plus a zombie write the admission rule rejects,
folded by the real processor in-process (unique topic and key prefix).
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from redis.asyncio import Redis

from sessionstream.cli.diagnose import live_facts
from sessionstream.cli.main import main
from sessionstream.core.diagnosis import Status, diagnose, exit_code
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.settings import Settings
from sessionstream.producers.errors import Fenced
from sessionstream.producers.writer import SessionWriter, WriterConfig
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]  # the fixture, imported for pytest


def records_of(bootstrap: str, topic: str) -> list[Record]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "diag", "log_level": 3,
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        want = 0
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            want += hi - lo
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Record] = []
        deadline = time.monotonic() + 30
        while len(out) < want and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is None:
                    out.append(Record(topic, m.partition(), m.offset(), m.key(), m.value()))
        assert len(out) == want
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        c.close()


async def test_diagnose_reports_a_zombie_rejection_and_a_caught_up_watermark(
    writer_cfg: WriterConfig, monkeypatch: object, settings: Settings,
) -> None:
    cfg = WriterConfig(**{**writer_cfg.__dict__, "lease_ttl_ms": 300})
    zombie = SessionWriter.create(cfg)
    sid = zombie.session_id
    zombie_writer = zombie.lease.writer_id
    tool_turn(zombie, 0)
    zombie.flush(10)
    time.sleep(0.5)  # the zombie pauses past its TTL; the lease expires
    heir = SessionWriter.open(cfg, sid)
    tool_turn(heir, 1)
    heir.flush(10)
    zombie._maybe_renew = lambda: None  # type: ignore[method-assign]
    zombie.append("user/message", {"content": "zombie"})
    with pytest.raises(Fenced):  # the broker took it, readers refuse it
        zombie.flush(10)
    heir.close()

    aredis = Redis.from_url(cfg.redis_url, decode_responses=True)
    try:
        sink = RedisSink(aredis, cfg.keys)
        await Processor(pipeline=ReaderPipeline.default(), sink=sink, group="diag").process(
            records_of(cfg.bootstrap, cfg.topic))
    finally:
        await aredis.aclose()

    facts = live_facts(settings, sid, prefix=cfg.key_prefix, topic=cfg.topic)
    assert facts is not None
    findings = {f.check: f for f in diagnose(facts)}
    rej = findings["rejections"]
    assert rej.status is Status.WARNING
    assert rej.evidence["by_verdict"] == {"stale_epoch": 1}
    assert rej.evidence["rejected"][0]["writer"] == zombie_writer
    assert findings["watermark"].status is Status.OK
    assert findings["watermark"].evidence["lag"] == 0
    assert findings["state-versions"].status is Status.OK
    assert findings["quarantine"].status is Status.OK
    assert findings["open-tail"].status is Status.OK
    assert exit_code(list(findings.values())) == 0

    # the command itself, and an unknown session as bad input
    mp = monkeypatch
    mp.setenv("SESSIONSTREAM_KEY_PREFIX", cfg.key_prefix)  # type: ignore[attr-defined]
    mp.setenv("SESSIONSTREAM_EVENTS_TOPIC", cfg.topic)  # type: ignore[attr-defined]
    result = CliRunner().invoke(main, ["diagnose", sid, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["projections_checked"] is True
    assert "zombie" not in result.output  # ids and counts only, never content
    assert CliRunner().invoke(main, ["diagnose", "no-such-session"]).exit_code == 2
