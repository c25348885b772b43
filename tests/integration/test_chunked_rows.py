"""Chunked session rows on the real Redis (ADR 0013): a reader racing the writer gets
every view at one ``as_of_seq``, and the chunked row equals a whole-row write."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis

from sessionstream import redisconn
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.projections import default_registry
from sessionstream.core.rows import KeySpace, SessionRow, assemble
from sessionstream.core.settings import Settings
from sessionstream.core.simulate import simulate_session
from sessionstream.localstack.cluster import ClusterConfig, LocalCluster
from sessionstream.streams.processor import Processor
from sessionstream.streams.read import read_views
from sessionstream.streams.sink import RedisSink
from tests.unit.test_streams_processor import as_records


def _expected_by_seq(events: list[Any]) -> dict[int, dict[str, Any]]:
    """The views after each event, by seq (what a reader may see at that as_of_seq)."""
    reg = default_registry()
    states = reg.init_states()
    out = {}
    for e in events:
        states, _ = reg.apply(states, e)
        out[e.seq] = json.loads(json.dumps(reg.views(states)))
    return out


async def test_a_reader_racing_the_writer_sees_every_view_at_one_as_of_seq(
        settings: Settings, redis_prefix: str) -> None:
    events = simulate_session(random.Random(11), "race", turns=40, compact_every=3,
                              failures=0.2)
    expected = _expected_by_seq(events)
    keys = KeySpace(settings.tenant, redis_prefix)
    row_key = keys.session_row("race", 1)
    seen: list[tuple[int, dict[str, Any]]] = []
    stop = threading.Event()

    def reader() -> None:  # a thread: its HGETALLs interleave with the writer's calls
        r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
        try:
            while not stop.is_set():
                row = r.hgetall(row_key)
                if row:
                    seen.append((SessionRow.as_of_seq(row), SessionRow.views(row)))
        finally:
            r.close()

    thread = threading.Thread(target=reader)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    thread.start()
    try:
        proc = Processor(pipeline=ReaderPipeline.default(), sink=RedisSink(aredis, keys),
                         group="g")
        proc.codec.chunk = 2  # many chunks: appends, replaces and deletes cross them
        records = as_records(events, partitions=1)
        for i in range(0, len(records), 3):
            await proc.process(records[i:i + 3])
            await asyncio.sleep(0.001)
        stop.set()
        thread.join()
        snap = await read_views(aredis, keys, "race")
    finally:
        stop.set()
        thread.join()
        await aredis.aclose()
    assert snap is not None and snap.views == expected[events[-1].seq]
    distinct = {seq for seq, _ in seen}
    assert len(distinct) >= 5, "the reader raced the writer"
    for seq, views in seen:
        assert views == expected[seq], f"views torn at as_of_seq {seq}"


async def test_a_chunked_row_on_redis_holds_what_a_whole_write_holds(
        settings: Settings, redis_prefix: str, redis_client: redis.Redis) -> None:
    events = simulate_session(random.Random(12), "eq", turns=30, compact_every=2)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    rows = []
    try:
        for n, (chunked, batch) in enumerate(((True, 4), (False, 10_000))):
            keys = KeySpace(settings.tenant, f"{redis_prefix}-{n}")
            proc = Processor(pipeline=ReaderPipeline.default(),
                             sink=RedisSink(aredis, keys), group="g")
            proc.codec.chunked, proc.codec.chunk = chunked, 3
            records = as_records(events, partitions=1)
            for i in range(0, len(records), batch):
                await proc.process(records[i:i + batch])
            rows.append(redis_client.hgetall(keys.session_row("eq", 1)))
    finally:
        await aredis.aclose()
        for n in range(2):
            for k in redis_client.scan_iter(match=f"{redis_prefix}-{n}:*"):
                redis_client.delete(k)
    chunked_row, whole_row = rows
    assert any(k.startswith(SessionRow.PART) for k in chunked_row)
    assert not any(k.startswith(SessionRow.PART) for k in whole_row)
    flat = assemble(chunked_row)
    for name, text in whole_row.items():
        if name.startswith((SessionRow.VIEW, SessionRow.STATE)):
            assert json.loads(flat[name]) == json.loads(text), name


def test_chunked_rows_on_a_redis_cluster_stay_in_their_sessions_slot(
        tmp_path: Path) -> None:
    """Three masters: each session's chunks are fields of its one row (one slot), the
    batch's sessions are written one call per slot, and readers reassemble them."""
    from tests.integration.test_cluster_faults import pick_ports

    kafka, controllers, redis_ports = pick_ports()
    cfg = ClusterConfig(state_dir=tmp_path / "cluster", kafka_ports=kafka,
                        controller_ports=controllers, redis_ports=redis_ports)
    local = LocalCluster(cfg, echo=lambda _: None)
    rng = random.Random(13)
    logs = {f"c{i}": simulate_session(rng, f"c{i}", turns=12, compact_every=3)
            for i in range(6)}
    merged = [e for evs in zip(*logs.values(), strict=False) for e in evs]
    merged += [e for evs in logs.values() for e in evs[min(map(len, logs.values())):]]

    async def run() -> dict[str, Any]:
        client = redisconn.async_redis(cfg.redis_url, cluster=True, decode_responses=True)
        keys = KeySpace("default", "cl")
        try:
            proc = Processor(pipeline=ReaderPipeline.default(),
                             sink=RedisSink(client, keys), group="g")
            proc.codec.chunk = 4
            records = as_records(merged, partitions=3)
            for i in range(0, len(records), 11):
                await proc.process(records[i:i + 11])
            return {sid: await read_views(client, keys, sid) for sid in logs}
        finally:
            await client.aclose()

    try:
        local.up_redis()  # the Redis Cluster only: no brokers needed here
        snaps = asyncio.run(run())
        masters = {local.redis_master_for(KeySpace("default", "cl").session_row(s, 1)).port
                   for s in logs}
    finally:
        local.down()
    assert len(masters) > 1, "the sessions spread over several masters"
    reg = default_registry()
    for sid, events in logs.items():
        snap = snaps[sid]
        assert snap is not None
        assert snap.views == json.loads(json.dumps(reg.fold(events).views())), sid
