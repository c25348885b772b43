"""The sink contract over the real Redis sink and its Lua script (``streams.sink.RedisSink``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from sessionstream.core.rows import KeySpace, LogIndexFields, read_change_entry
from sessionstream.core.settings import Settings
from sessionstream.streams import sink as sink_module
from sessionstream.streams.sink import RedisSink
from tests.contract.sink_contract import SinkContract, write


class RedisHarness:
    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys
        self.sink = RedisSink(redis, keys)

    async def set_generation(self, gen: int) -> None:
        await self.redis.set(self.keys.generation(), gen)

    async def _stream(self, key: str) -> list[dict[str, Any]]:
        out = []
        for _id, fields in await self.redis.xrange(key):
            change = read_change_entry(fields)
            assert change is not None
            out.append(change)
        return out

    async def session_changes(self, gen: int, session_id: str) -> list[dict[str, Any]]:
        return await self._stream(self.keys.session_changes(session_id, gen))

    async def feed(self, gen: int) -> list[dict[str, Any]]:
        return await self._stream(self.keys.tenant_changes(gen))

    async def set_writer_first_offset(self, session_id: str, offset: int) -> None:
        await self.redis.hset(self.keys.log_index(session_id), LogIndexFields.FIRST_OFFSET,
                              offset)


class TestRedisSink(SinkContract):
    @pytest.fixture
    async def harness(self, settings: Settings, redis_prefix: str
                      ) -> AsyncIterator[RedisHarness]:
        redis = Redis.from_url(settings.redis_url, decode_responses=True)
        try:
            yield RedisHarness(redis, KeySpace(settings.tenant, redis_prefix))
        finally:
            await redis.aclose()


class TestRedisSinkPackedByRedisPy(TestRedisSink):
    """The same contract with the batch's script call packed by redis-py (no extension)."""

    @pytest.fixture
    async def harness(self, settings: Settings, redis_prefix: str,
                      monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RedisHarness]:
        monkeypatch.setattr(sink_module, "_native_pack", None)
        redis = Redis.from_url(settings.redis_url, decode_responses=True)
        try:
            yield RedisHarness(redis, KeySpace(settings.tenant, redis_prefix))
        finally:
            await redis.aclose()


async def test_a_script_the_server_lost_is_sent_again_and_the_batch_applies(
        settings: Settings, redis_prefix: str) -> None:
    redis = Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        keys = KeySpace(settings.tenant, redis_prefix)
        sink = RedisSink(redis, keys)
        sink._write.sha = "0" * 40  # as after SCRIPT FLUSH or a restart: NOSCRIPT
        out = await sink.write_sessions(1, [write("s1", last=3, seq=2)])
        assert [(o.status, o.stored_offset) for o in out] == [("applied", -1)]
        assert sink._write.sha != "0" * 40
        assert await redis.hget(keys.session_row("s1", 1), "as_of_offset") == "3"
        again = await sink.write_sessions(1, [write("s1", base=3, last=5, seq=4)])
        assert [o.status for o in again] == ["applied"]
    finally:
        await redis.aclose()


@pytest.mark.parametrize("packed", [True, False], ids=["extension", "redis-py"])
async def test_a_large_batch_goes_in_bounded_calls_and_a_lost_reply_counts_as_applied(
        settings: Settings, redis_prefix: str, monkeypatch: pytest.MonkeyPatch,
        packed: bool) -> None:
    if not packed:
        monkeypatch.setattr(sink_module, "_native_pack", None)
    redis = Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        keys = KeySpace(settings.tenant, redis_prefix)
        sink = RedisSink(redis, keys)
        sent: list[int] = []
        real_run = sink.retry.run

        async def lose_first_reply(what: str, op: Any) -> Any:
            if what != "session writes":
                return await real_run(what, op)

            async def flaky() -> Any:
                out = await op()  # the server applied the call...
                sent.append(len(out) // 2)
                if len(sent) == 1:
                    raise ConnectionError("reply lost")  # ...but its reply never came
                return out
            return await real_run(what, flaky)

        monkeypatch.setattr(sink.retry, "run", lose_first_reply)
        n = sink_module.CALL_SESSIONS + 10
        out = await sink.write_sessions(1, [write(f"s{i}", last=3, seq=2) for i in range(n)])
        assert [o.status for o in out] == ["applied"] * n
        assert sent == [sink_module.CALL_SESSIONS, sink_module.CALL_SESSIONS, 10]
        # a write already stored at its offset on a first attempt stays stale
        again = await sink.write_sessions(1, [write("s1", last=3, seq=2)])
        assert [(o.status, o.stored_offset) for o in again] == [("stale", 3)]
    finally:
        await redis.aclose()
