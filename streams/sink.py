"""The Redis side of the processor: one atomic, idempotent script call per session.

Keys and fields are those of the row layout (``sessionstream.core.rows``): the session
row ``<p>:{<t>/<s>}:g<N>`` and change stream, the tenant's session index, change feed,
partition progress and generation pointer.

The per-session script touches only keys with the session's hash tag; the tenant keys
are written by a second call. Both are idempotent: the script refuses a write whose
last offset is not past the stored ``as_of_offset``; ZADD GT and a max-only progress
script never move backwards; a feed entry can repeat after a crash and carries
``(session, as_of_seq)`` for consumers to de-duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from sessionstream.core.rows import (
    CHANGE_FIELD,
    KeySpace,
    LogIndexFields,
    change_entry,
    generation_of,
    lua,
)
from sessionstream.core.settings import Env
from streams.errors import SinkError
from streams.ports import SessionWrite, WriteOutcome

log = logging.getLogger("sessionstream.streams.sink")

T = TypeVar("T")

# KEYS[1] session hash, KEYS[2] session change stream.
# ARGV: base_offset, last_offset, as_of_seq, force(0/1), change maxlen, change entry, n,
#       then n field/value pairs.
WRITE_SESSION_LUA = lua("""
local stored = tonumber(redis.call('HGET', KEYS[1], $AS_OF_OFFSET) or '-1')
local base = tonumber(ARGV[1])
local last = tonumber(ARGV[2])
if stored > last or (stored == last and ARGV[4] ~= '1') then
  return {0, stored}
end
if stored ~= base then
  return {-1, stored}
end
local n = tonumber(ARGV[7])
if n > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 8, 7 + 2 * n))
end
redis.call('HSET', KEYS[1], $AS_OF_OFFSET, ARGV[2], $AS_OF_SEQ, ARGV[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', $CHANGE, ARGV[6])
return {1, stored}
""")

# KEYS[1] progress hash; ARGV: field, offset, field, offset, ... (only ever moves forward)
PROGRESS_MAX_LUA = """
for i = 1, #ARGV, 2 do
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) > cur then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
"""

_RETRYABLE = (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError,
              rexc.TryAgainError, rexc.ClusterDownError, OSError)



class Script:
    """A Lua script run by EVALSHA, loaded on first use and again after NOSCRIPT."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha: str | None = None

    async def __call__(self, redis: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if self.sha is None:
            self.sha = await redis.script_load(self.source)
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except rexc.NoScriptError:  # server restarted, SCRIPT FLUSH, or a promoted replica
            self.sha = await redis.script_load(self.source)
            # EVAL, not EVALSHA: on a Redis Cluster the load may have reached another node.
            return await redis.eval(self.source, len(keys), *keys, *args)


class Retry:
    """Bounded exponential backoff; ``attempts=None`` retries forever (the worker)."""

    def __init__(self, attempts: int | None = 8, first: float = 0.05, cap: float = 2.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.attempts = attempts
        self.first = first
        self.cap = cap
        self.sleep = sleep

    async def run(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        delay = self.first
        n = 0
        while True:
            n += 1
            try:
                return await op()
            except _RETRYABLE as exc:
                if self.attempts is not None and n >= self.attempts:
                    raise SinkError(
                        f"Redis {what} failed {n} times ({type(exc).__name__}: {exc}); "
                        "check that Redis is running (`sessionstream status`) and "
                        f"{Env.REDIS_URL} points at it"
                    ) from exc
                log.warning("Redis %s failed (%s), retry %d in %.2fs", what,
                            type(exc).__name__, n, delay)
                await self.sleep(delay * (0.5 + random.random() / 2))
                delay = min(self.cap, delay * 2)


class RedisSink:
    """The processor's sink over ``redis.asyncio`` (decode_responses=True)."""

    def __init__(self, redis: Redis, keys: KeySpace, *,
                 retry: Retry | None = None, change_maxlen: int = 100,
                 feed_maxlen: int = 100_000) -> None:
        self.redis = redis
        self.keys = keys
        self.retry = retry or Retry()
        self.change_maxlen = change_maxlen
        self.feed_maxlen = feed_maxlen
        self._write = Script(WRITE_SESSION_LUA)
        self._cluster = isinstance(redis, RedisCluster)
        self._progress = Script(PROGRESS_MAX_LUA)

    async def generation(self) -> int:
        raw = await self.retry.run(
            "generation read", lambda: self.redis.get(self.keys.generation()))
        return generation_of(raw)

    async def load(self, gen: int, session_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        async def op() -> list[Any]:
            async with self.redis.pipeline(transaction=False) as pipe:
                for sid in session_ids:
                    pipe.hgetall(self.keys.session_row(sid, gen))
                return await pipe.execute()  # type: ignore[no-any-return,unused-ignore]

        rows = await self.retry.run("session load", op)
        return {sid: _text(row) for sid, row in zip(session_ids, rows, strict=True)}

    async def write_sessions(self, gen: int, writes: Sequence[SessionWrite]) -> list[WriteOutcome]:
        if self._write.sha is None:
            self._write.sha = await self.retry.run(
                "script load", lambda: self.redis.script_load(self._write.source))
        calls = []
        for w in writes:
            args: list[Any] = [w.base_offset, w.last_offset, w.as_of_seq,
                               "1" if w.force else "0", self.change_maxlen, _change_entry(w),
                               len(w.fields)]
            for k, v in w.fields.items():
                args += [k, v]
            calls.append(([self.keys.session_row(w.session_id, gen),
                           self.keys.session_changes(w.session_id, gen)], args))

        async def op() -> list[Any]:
            # Re-sending after a lost reply is safe: each call is idempotent by offset.
            if self._cluster:
                return await self._cluster_calls(calls)
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.evalsha(str(self._write.sha), len(keys), *keys, *args)
                try:
                    return await pipe.execute()  # type: ignore[no-any-return,unused-ignore]
                except rexc.NoScriptError:
                    self._write.sha = await self.redis.script_load(self._write.source)
                    raise rexc.TryAgainError("script reloaded") from None

        rows = await self.retry.run("session writes", op)
        names = {1: "applied", 0: "stale", -1: "conflict"}
        return [WriteOutcome(names[int(status)], int(stored)) for status, stored in rows]

    async def _cluster_calls(self, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """The script calls on a Redis Cluster: concurrent, each routed to its slot's master.

        redis-py refuses EVALSHA in a cluster pipeline; every call's keys share one hash
        tag, so each is one slot. A master promoted by a failover may lack the script:
        EVAL sends the source (and caches it there).
        """
        sha, source = str(self._write.sha), self._write.source

        async def one(keys: list[str], args: list[Any]) -> Any:
            try:
                return await self.redis.evalsha(sha, len(keys), *keys, *args)
            except rexc.NoScriptError:
                return await self.redis.eval(source, len(keys), *keys, *args)

        return list(await asyncio.gather(*(one(k, a) for k, a in calls)))

    async def write_tenant(self, gen: int, writes: Sequence[SessionWrite], group: str,
                           progress: Mapping[str, int]) -> None:
        index = self.keys.sessions_index(gen)
        feed = self.keys.tenant_changes(gen)
        pkey = self.keys.progress(group)

        args: list[Any] = []
        for tp, off in progress.items():
            args += [tp, off]
        if not writes and not args:
            return
        if args and self._progress.sha is None:
            self._progress.sha = await self.retry.run(
                "script load", lambda: self.redis.script_load(self._progress.source))

        async def op() -> None:
            # One round trip: index, feed and progress share the tenant's hash tag (one
            # slot), so this is one pipeline. Each part is idempotent. On a cluster
            # redis-py refuses EVALSHA in a pipeline: the progress script follows it.
            async with self.redis.pipeline(transaction=False) as pipe:
                if writes:
                    # GT: an existing member's score never moves back; new members are added.
                    pipe.zadd(index, {w.session_id: w.activity_ms for w in writes}, gt=True)
                    for w in writes:
                        pipe.xadd(feed, {CHANGE_FIELD: _change_entry(w)},
                                  maxlen=self.feed_maxlen, approximate=True)
                if args and self._cluster:
                    if writes:
                        await pipe.execute()
                    await self._progress(self.redis, [pkey], args)
                    return
                if args:
                    pipe.evalsha(str(self._progress.sha), 1, pkey, *args)
                try:
                    await pipe.execute()
                except rexc.NoScriptError:
                    self._progress.sha = await self.redis.script_load(self._progress.source)
                    raise rexc.TryAgainError("script reloaded") from None

        await self.retry.run("tenant write", op)

    async def load_progress(self, group: str, keys: Sequence[str]) -> dict[str, int]:
        pkey = self.keys.progress(group)
        vals = await self.retry.run("progress read", lambda: self.redis.hmget(pkey, list(keys)))
        return {k: int(v) for k, v in zip(keys, vals, strict=True) if v is not None}

    async def session_ids(self, gen: int, start: int, count: int) -> list[str]:
        index = self.keys.sessions_index(gen)
        rows = await self.retry.run(
            "index read", lambda: self.redis.zrange(index, start, start + count - 1))
        return [r.decode() if isinstance(r, bytes) else str(r) for r in rows]

    async def load_fields(self, gen: int, session_ids: Sequence[str], fields: Sequence[str]
                          ) -> dict[str, dict[str, str]]:
        async def op() -> list[Any]:
            async with self.redis.pipeline(transaction=False) as pipe:
                for sid in session_ids:
                    pipe.hmget(self.keys.session_row(sid, gen), list(fields))
                return await pipe.execute()  # type: ignore[no-any-return,unused-ignore]

        rows = await self.retry.run("session fields load", op) if session_ids else []
        return {sid: {f: (v.decode() if isinstance(v, bytes) else v)
                      for f, v in zip(fields, row, strict=True) if v is not None}
                for sid, row in zip(session_ids, rows, strict=True)}

    async def writer_first_offset(self, session_id: str) -> int | None:
        key = self.keys.log_index(session_id)
        raw = await self.retry.run("writer index read",
                                   lambda: self.redis.hget(key, LogIndexFields.FIRST_OFFSET))
        return int(raw) if raw not in (None, "") else None


def _change_entry(w: SessionWrite) -> str:
    return change_entry(w.session_id, w.as_of_seq, w.last_offset, w.changed)


def _text(row: Mapping[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in row.items()}
