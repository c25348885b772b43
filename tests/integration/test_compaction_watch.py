"""The automatic compaction trigger against the real Kafka and Redis.

Sessions are written with ``SessionWriter``, projected by the real processor in-process
(so the test controls when the change feed moves), then the watcher steps over the feed.
"""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import Redis

from sessionstream.core.compaction import Budget
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from sessionstream.streams.compaction_watch import CompactionWatcher
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.streams_helpers import read_topic
from tests.integration.test_compactor import work_turn
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

LIFECYCLE = ["compaction/start", "compaction/summary", "user/message", "compaction/end"]


def write(cfg: WriterConfig, turns: int) -> tuple[str, int]:
    """A session of ``turns`` tool turns; (session id, events written)."""
    w = SessionWriter.create(cfg)
    w.append("todo/add", {"id": "t1", "text": "ship the report"})
    for n in range(turns):
        work_turn(w, n)
    w.close()
    return w.session_id, w.session.next_seq


async def project(cfg: WriterConfig, aredis: Redis, n_records: int) -> None:
    """Fold the topic's first ``n_records`` into Redis with the real processor."""
    records = read_topic(cfg.bootstrap, cfg.topic, n_records)
    sink = RedisSink(aredis, cfg.keys)
    await Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g").process(records)


def types_after(cfg: WriterConfig, sid: str, seq: int) -> list[str]:
    return [e.type for e in read_log(cfg, sid).admitted[seq:]]


async def test_a_session_over_budget_is_compacted_once_and_one_under_it_is_not(
    writer_cfg: WriterConfig, redis_client: redis.Redis,
) -> None:
    long_sid, long_n = write(writer_cfg, turns=6)
    short_sid, short_n = write(writer_cfg, turns=1)
    aredis = Redis.from_url(writer_cfg.redis_url, decode_responses=True)
    try:
        await project(writer_cfg, aredis, long_n + short_n)
        budget = Budget(tokens=1500, keep_recent=4)
        watcher = CompactionWatcher(writer_cfg, budget=budget, keys=writer_cfg.keys,
                                    redis=aredis)
        first = await watcher.step()
        assert (first.sessions, first.compacted, first.failed) == (2, 1, 0), first.to_json()
        assert first.not_needed == 1
        assert types_after(writer_cfg, long_sid, long_n) == LIFECYCLE
        assert read_log(writer_cfg, long_sid).rejections == []
        assert types_after(writer_cfg, short_sid, short_n) == []
        report = first.reports[0]
        assert report["session_id"] == long_sid and report["outcome"] == "completed"
        assert report["trigger"] in ("pressure", "overflow")
        assert report["surface_tokens_after"] < report["surface_tokens_before"]

        # The compaction's own events reach the feed: no second attempt for them.
        await project(writer_cfg, aredis, long_n + short_n + len(LIFECYCLE))
        second = await watcher.step()
        assert second.sessions == 1 and second.compacted == 0 and second.failed == 0
        assert types_after(writer_cfg, long_sid, long_n + len(LIFECYCLE)) == []

        # A restarted watcher resumes after the last entry it processed.
        saved = redis_client.hgetall(writer_cfg.keys.compaction_watch("default"))
        assert saved["generation"] == "1" and saved["entry_id"] != "0-0"
        again = CompactionWatcher(writer_cfg, budget=budget, keys=writer_cfg.keys,
                                  redis=aredis)
        resumed = await again.step()
        assert (resumed.entries, resumed.compacted) == (0, 0)
    finally:
        await aredis.aclose()


async def test_the_same_seq_is_not_attempted_twice_while_still_over_budget(
    writer_cfg: WriterConfig, redis_client: redis.Redis,
) -> None:
    """A budget no compaction can meet: one attempt, then nothing until new events."""
    sid, n = write(writer_cfg, turns=3)
    aredis = Redis.from_url(writer_cfg.redis_url, decode_responses=True)
    try:
        await project(writer_cfg, aredis, n)
        watcher = CompactionWatcher(writer_cfg, budget=Budget(tokens=10, keep_recent=4),
                                    keys=writer_cfg.keys, redis=aredis)
        first = await watcher.step()
        assert first.compacted + first.failed == 1, first.to_json()
        written = len(read_log(writer_cfg, sid).admitted)
        await project(writer_cfg, aredis, written)
        second = await watcher.step()
        assert (second.sessions, second.compacted, second.failed) == (1, 0, 0)
        assert second.skipped == 1
        assert len(read_log(writer_cfg, sid).admitted) == written
    finally:
        await aredis.aclose()


def test_compactor_once_prints_a_summary_and_exits(
    writer_cfg: WriterConfig, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from sessionstream.cli.main import main

    sid, n = write(writer_cfg, turns=6)

    async def project_once() -> None:
        aredis = Redis.from_url(writer_cfg.redis_url, decode_responses=True)
        try:
            await project(writer_cfg, aredis, n)
        finally:
            await aredis.aclose()

    asyncio.run(project_once())
    for k, v in {"EVENTS_TOPIC": writer_cfg.topic, "KEY_PREFIX": writer_cfg.key_prefix,
                 "KAFKA_BOOTSTRAP": writer_cfg.bootstrap, "REDIS_URL": writer_cfg.redis_url,
                 "TENANT": writer_cfg.tenant}.items():
        monkeypatch.setenv(f"SESSIONSTREAM_{k}", v)
    result = CliRunner().invoke(main, ["compactor", "--budget", "1500", "--once", "--json"])
    assert result.exit_code == 0, result.output
    assert '"compacted": 1' in result.output and '"failed": 0' in result.output
    assert types_after(writer_cfg, sid, n) == LIFECYCLE
