"""Replay's compare with the live generation on the real Kafka and Redis (ADR 0015).

Redis answers equal / not comparable for rows whose stored view fields are identical;
any other pair (another layout, other text for the same JSON, sealed fields with their
random nonces) is opened, assembled and compared as views here. Either way a session
whose views differ is reported, and one at another ``as_of_seq`` is not comparable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio import Redis

from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.rows import KeySpace, SessionRow, assemble
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.governance.rows import RowCipher, is_sealed
from sessionstream.producers.writer import SessionWriter, WriterConfig
from sessionstream.streams import fold_native
from sessionstream.streams.replay import ReplayReport, allocate_generation, replay
from tests.integration.streams_helpers import fleet, interleave, produce
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


async def _replay(settings: Settings, topic: str, keys: KeySpace, *, switch: bool,
                  **kw: Any) -> ReplayReport:
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        return await replay(bootstrap=settings.kafka_bootstrap, redis=aredis, keys=keys,
                            topic=topic, switch=switch, **kw)
    finally:
        await aredis.aclose()


async def test_replay_reports_a_changed_view_and_a_moved_row_and_equal_rows_of_any_layout(
    settings: Settings, unique_topic: Callable[..., str], redis_client: redis.Redis,
    redis_prefix: str,
) -> None:
    topic = unique_topic(2)
    logs = fleet(12, seed=4, turns=3)
    produce(settings.kafka_bootstrap, topic, interleave(logs))
    keys = KeySpace(settings.tenant, redis_prefix)
    first = await _replay(settings, topic, keys, switch=True)
    assert first.switched and first.equal == 0 and len(first.not_comparable) == 12
    second = await _replay(settings, topic, keys, switch=True)  # against `first`
    assert second.live_generation == first.generation
    assert second.equal == 12 and second.equals_live and not second.not_comparable

    live = second.generation
    changed, moved, whole, retyped = sorted(logs)[:4]
    r = redis_client
    row = keys.session_row(changed, live)
    index = json.loads(r.hget(row, SessionRow.view("index")))
    r.hset(row, SessionRow.view("index"), json.dumps({**index, "status": "tampered"}))
    row = keys.session_row(moved, live)
    r.hset(row, SessionRow.AS_OF_SEQ, int(r.hget(row, SessionRow.AS_OF_SEQ)) + 1)
    # the same views in another layout: written whole (before ADR 0013's chunks)
    row = keys.session_row(whole, live)
    chunked = r.hgetall(row)
    assert any(k.startswith(SessionRow.PARTS) for k in chunked)
    r.delete(row)
    r.hset(row, mapping=assemble(chunked))
    # the same JSON value in other text
    row = keys.session_row(retyped, live)
    usage = json.loads(r.hget(row, SessionRow.view("usage")))
    r.hset(row, SessionRow.view("usage"), json.dumps(usage, indent=2, sort_keys=False))

    third = await _replay(settings, topic, keys, switch=False)
    assert third.different == [changed]
    assert third.not_comparable == [moved]
    assert third.equal == 10 and not third.switched


async def test_concurrent_replays_get_distinct_generations_past_the_counter_and_pointer(
    settings: Settings, redis_client: redis.Redis, redis_prefix: str,
) -> None:
    """Allocation is one atomic step: eight replays starting at once on a tenant whose
    pointer is ahead of its counter (absent here: a tenant from before the counter, or a
    restored pointer) get eight generations, none shared, and the counter ends at the
    highest; it never moves back below a generation a replay writes (a deletion purges
    every generation up to it)."""
    keys = KeySpace(settings.tenant, redis_prefix)
    redis_client.set(keys.generation(), 3)
    clients = [Redis.from_url(settings.redis_url, decode_responses=True) for _ in range(8)]
    try:
        got = await asyncio.gather(*(allocate_generation(c, keys) for c in clients))
        assert {live for live, _ in got} == {3}
        assert sorted(new for _, new in got) == list(range(4, 12))
        assert int(redis_client.get(keys.generation_counter())) == 11
        # from a counter ahead of the pointer: the next one after the counter
        redis_client.set(keys.generation_counter(), 20)
        assert await allocate_generation(clients[0], keys) == (3, 21)
    finally:
        for c in clients:
            await c.aclose()


def _store(root: Path) -> FileKeyStore:
    return FileKeyStore(root, cache_ttl_s=0)


@pytest.mark.parametrize("fold", ["auto", "python"])
async def test_sealed_rows_compare_by_their_opened_views(
    settings: Settings, writer_cfg: WriterConfig, redis_client: redis.Redis,
    redis_prefix: str, tmp_path: Path, fold: str,
) -> None:
    root = tmp_path / "keys"
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(_store(root), "default"))
    writers = [SessionWriter.create(cfg) for _ in range(4)]
    for n, w in enumerate(writers):
        tool_turn(w, n)
        w.append("todo/add", {"id": f"t{n}", "text": f"secret todo {n}"})
        w.flush(10)
    keys = KeySpace("default", redis_prefix)

    def sealed() -> dict[str, Any]:
        return {"fold": fold, "pipeline": ReaderPipeline.default(
                    opener=SealedContentOpener(ContentCipher(_store(root), "default"))),
                "rows": RowCipher(ContentCipher(_store(root), "default"))}

    first = await _replay(settings, cfg.topic, keys, switch=True, **sealed())
    # flushed every 3 records: each row is written in several flushes, some fields
    # rewritten, some kept from an earlier flush
    gc_before, interval = gc.get_threshold(), sys.getswitchinterval()
    second = await _replay(settings, cfg.topic, keys, switch=True, batch=3, flush_every=1,
                           **sealed())
    assert second.equal == 4 and second.equals_live
    # each flush froze what survived it for the collector; the replay leaves it as found
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == gc_before
    assert sys.getswitchinterval() == interval
    # the native fold kept digests of what it sealed: only the live rows were opened
    native = second.fold == "native"
    assert native == (fold == "auto" and fold_native.available())
    assert second.by_digest == (4 if native else 0)
    sid = writers[0].session_id
    row = keys.session_row(sid, second.generation)
    stored = redis_client.hget(row, SessionRow.view("todo"))
    assert stored is not None and is_sealed(stored)  # random nonces: never byte-equal
    rows = sealed()["rows"]
    head = json.loads(rows.open(sid, "todo", SessionRow.view("todo"), stored))
    redis_client.hset(row, SessionRow.view("todo"), rows.seal(
        sid, "todo", SessionRow.view("todo"), json.dumps({**head, "extra": 1})))

    # and a clear field of a sealed row (the script hands back only the fields that differ)
    clear = writers[1].session_id
    row = keys.session_row(clear, second.generation)
    index = json.loads(redis_client.hget(row, SessionRow.view("index")))
    redis_client.hset(row, SessionRow.view("index"), json.dumps({**index, "status": "x"}))

    # flushed every 3 records again: sessions written by an earlier flush and not
    # folded since are compared while the last flush writes the others
    third = await _replay(settings, cfg.topic, keys, switch=False, batch=3, flush_every=1,
                          **sealed())
    assert third.live_generation == second.generation != first.generation
    # the tampered live rows failed the digest check and were compared exactly
    assert sorted(third.different) == sorted([sid, clear]) and third.equal == 2
    assert third.by_digest == (2 if native else 0)
