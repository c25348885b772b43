"""The processor in-process against the real Redis script and a real topic (no faust).

Covers what needs control over batches: redelivery, stale events, state_version bumps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import redis
from redis.asyncio import Redis

from sessionstream.core.events import Writer, make_event
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.projections import Registry, default_units
from sessionstream.core.rows import KeySpace, SessionRow
from sessionstream.core.settings import Settings
from sessionstream.streams.kafka_io import KafkaLogReader
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.streams_helpers import (
    expected_views,
    fleet,
    interleave,
    produce,
    read_topic,
)


def dump(r: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every hash of the generation (views, states, offsets), as plain data."""
    return {k: r.hgetall(k) for k in sorted(r.scan_iter(match=f"{prefix}:{{*/*}}:g1"))}


async def test_a_redelivered_batch_and_a_stale_event_change_nothing(
    settings: Settings, unique_topic: Callable[..., str], redis_client: redis.Redis,
    redis_prefix: str,
) -> None:
    topic = unique_topic(2)
    logs = fleet(10, seed=21)
    events = interleave(logs)
    produce(settings.kafka_bootstrap, topic, events)
    records = read_topic(settings.kafka_bootstrap, topic, len(events))
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    sink = RedisSink(aredis, KeySpace(settings.tenant, redis_prefix))
    proc = Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g")
    for i in range(0, len(records), 100):
        await proc.process(records[i:i + 100])
    before = dump(redis_client, redis_prefix)
    # redelivery to the same worker, and to a fresh worker that lost its cache and progress
    await proc.process(records[50:250])
    redis_client.delete(f"{redis_prefix}:{{{settings.tenant}}}:progress:g")
    await Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g").process(records)
    assert dump(redis_client, redis_prefix) == before
    # a stale event (seq already taken, by a zombie writer) is a rejection, not a change
    sid, log = next(iter(logs.items()))
    zombie = make_event(session_id=sid, seq=3, event_id="zombie", time=1, type="todo/add",
                        data={"id": "z", "text": "zombie"}, writer=Writer("old", 0))
    produce(settings.kafka_bootstrap, topic, [zombie])
    more = read_topic(settings.kafka_bootstrap, topic, len(events) + 1)
    new = [r for r in more if r.key == sid.encode() and r.offset > max(
        x.offset for x in records if x.partition == r.partition)]
    await proc.process(new)
    h = redis_client.hgetall(f"{redis_prefix}:{{{settings.tenant}/{sid}}}:g1")
    views = SessionRow.views(h)
    exp = expected_views(log)
    assert {k: v for k, v in views.items() if k != "rejections"} == \
        {k: v for k, v in exp.items() if k != "rejections"}
    assert views["rejections"]["total"] == 1
    await aredis.aclose()


async def test_a_state_version_bump_rebuilds_only_that_unit_from_the_log(
    settings: Settings, unique_topic: Callable[..., str], redis_client: redis.Redis,
    redis_prefix: str,
) -> None:
    topic = unique_topic(2)
    logs = fleet(8, seed=31, turns=3)
    events = interleave(logs)
    produce(settings.kafka_bootstrap, topic, events)
    records = read_topic(settings.kafka_bootstrap, topic, len(events))
    half = len(records) // 2
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    sink = RedisSink(aredis, KeySpace(settings.tenant, redis_prefix))
    await Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g").process(records[:half])
    before = dump(redis_client, redis_prefix)

    units = default_units()
    usage = next(u for u in units if u.key == "usage")

    class UsageV2(type(usage)):  # type: ignore[misc]
        state_version: ClassVar[int] = usage.state_version + 1

    bumped = Registry([UsageV2() if u.key == "usage" else u for u in units])
    pipeline = ReaderPipeline.default(registry=bumped)
    proc = Processor(pipeline=pipeline, sink=sink, group="g2",
                     log_reader=KafkaLogReader(settings.kafka_bootstrap))
    rebuilt: dict[str, tuple[str, ...]] = {}
    for i in range(half, len(records), 50):
        rebuilt.update((await proc.process(records[i:i + 50])).rebuilt)
    assert rebuilt and set(rebuilt.values()) == {("usage",)}
    after = dump(redis_client, redis_prefix)
    touched = {r.key.decode() for r in records[half:]}
    for key, h in after.items():
        sid = key.split("/", 1)[1].split("}", 1)[0]
        if sid not in touched:  # rebuilt when next touched; until then the old view stays
            assert h == before[key]
            continue
        assert h["sv:usage"] == str(UsageV2.state_version)
        views = SessionRow.views(h)
        assert views == expected_views(logs[sid], bumped)
        # the other units kept their state version
        if key in before:
            assert h["sv:todo"] == before[key]["sv:todo"]
    assert before, "no session was projected before the bump; the test proves nothing"
    await aredis.aclose()
