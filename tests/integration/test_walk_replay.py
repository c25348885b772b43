"""How many of the package's modules replay's records pass through, from the batch the
reader hands on to the rows in Redis and their compare (tests/unit/test_walk.py counts
the live worker's): the modules with a Python frame entered, in every thread, after the
reader's first batch came back, over a replay of a real topic into the real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.rows import RowCipher
from sessionstream.streams import fold_native, replay_read
from sessionstream.streams.replay import replay
from tests.integration.streams_helpers import fleet, interleave, produce
from tests.unit.test_walk import entered

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not fold_native.available(),
                                 reason="the native extension is not built")]

#: The modules a replayed record may enter, from the reader's batch to the compare.
REPLAY_WALK = 8


def replay_walk(settings: Settings, topic: str, keys: KeySpace, rows: Any,
                monkeypatch: pytest.MonkeyPatch) -> set[str]:
    started = [False]
    next_batch = replay_read.Reader.next

    async def noting(self: replay_read.Reader) -> Any:
        got = await next_batch(self)
        started[0] = started[0] or got is not None
        return got
    monkeypatch.setattr(replay_read.Reader, "next", noting)

    async def run() -> None:
        aredis = Redis.from_url(settings.redis_url, decode_responses=True)
        try:
            report = await replay(bootstrap=settings.kafka_bootstrap, redis=aredis,
                                  keys=keys, topic=topic, rows=rows, fold="native")
            assert report.events > 0 and report.equals_live
        finally:
            await aredis.aclose()

    asyncio.run(run())  # a first replay: the second compares with it, as a rebuild does
    started[0] = False
    seen = entered(run, lambda: started[0])
    return seen if started[0] else set()


def test_a_replayed_record_walks_through_at_most_eight_modules(
        settings: Settings, unique_topic: Callable[..., str], redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    topic = unique_topic(2)
    produce(settings.kafka_bootstrap, topic, interleave(fleet(4, seed=3, turns=2)))
    seen = replay_walk(settings, topic, KeySpace(settings.tenant, redis_prefix), None,
                       monkeypatch)
    assert seen and len(seen) <= REPLAY_WALK, sorted(seen)
    assert {"sessionstream.streams.cycle", "sessionstream.streams.fold_native",
            "sessionstream.streams.replay_compare"} <= seen


def test_a_sealed_replay_walks_through_the_sealer_too(
        settings: Settings, unique_topic: Callable[..., str], redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    topic = unique_topic(2)
    produce(settings.kafka_bootstrap, topic, interleave(fleet(4, seed=5, turns=2)))
    rows = RowCipher(ContentCipher(FileKeyStore(tmp_path / "keys"), settings.tenant))
    seen = replay_walk(settings, topic, KeySpace(settings.tenant, redis_prefix), rows,
                       monkeypatch)
    # the sealer; the cipher and the key store (the keys read ahead of the flush) and
    # the data classes (the compare opens the live rows)
    assert seen and len(seen) <= REPLAY_WALK + 4, sorted(seen)
