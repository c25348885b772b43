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
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from sessionstream import native
from sessionstream.core.rows import (
    CHANGE_FIELD,
    FIRST_GENERATION,
    KeySpace,
    LogIndexFields,
    change_entry,
    generation_of,
)
from sessionstream.core.settings import Env
from sessionstream.streams.errors import SinkError
from sessionstream.streams.ports import BatchOutcome, SessionWrite, WriteOutcome
from sessionstream.streams.sink_scripts import (
    PROGRESS_MAX_LUA,
    WRITE_BATCH_LUA,
    WRITE_SESSION_LUA,
    WRITE_TENANT_LUA,
)

#: The extension packs the batch's script call (None: redis-py packs it).
_native_pack = native.ext.pack_session_writes if native.available() else None

log = logging.getLogger("sessionstream.streams.sink")

T = TypeVar("T")

#: One script call writes at most this many sessions and about this many bytes of
#: fields: a replay's flush of every session in one call took seconds on the server
#: (past the socket timeout) and as long again to pack.
CALL_SESSIONS = 256
CALL_BYTES = 4 << 20


def _slices(writes: Sequence[SessionWrite]) -> list[tuple[int, int]]:
    """(lo, hi) index ranges of ``writes``, each within CALL_SESSIONS and CALL_BYTES."""
    out: list[tuple[int, int]] = []
    lo, size = 0, 0
    for i, w in enumerate(writes):
        fields = w.fields
        n = sum(map(len, fields)) + sum(map(len, fields.values()))
        if i > lo and (i - lo >= CALL_SESSIONS or size + n > CALL_BYTES):
            out.append((lo, i))
            lo, size = i, 0
        size += n
    if lo < len(writes):
        out.append((lo, len(writes)))
    return out


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
        #: Told ``(what, seconds)`` of each call that succeeded, retries included (metrics).
        self.observe: Callable[[str, float], None] | None = None

    async def run(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        delay = self.first
        n = 0
        began = time.monotonic()
        while True:
            n += 1
            try:
                out = await op()
                if self.observe is not None:
                    self.observe(what, time.monotonic() - began)
                return out
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
                 feed_maxlen: int = 100_000, one_call: bool = True) -> None:
        self.redis = redis
        self.keys = keys
        self.retry = retry or Retry()
        self.change_maxlen = change_maxlen
        self.feed_maxlen = feed_maxlen
        self._write = Script(WRITE_SESSION_LUA)
        self._cluster = isinstance(redis, RedisCluster)
        #: False: one script call per session in a pipeline (before ADR 0013; benches)
        self.one_call = one_call
        self._progress = Script(PROGRESS_MAX_LUA)
        self._tenant = Script(WRITE_TENANT_LUA)
        self._batch = Script(WRITE_BATCH_LUA)

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
        if not writes:
            return []
        if self._write.sha is None:
            self._write.sha = await self.retry.run(
                "script load", lambda: self.redis.script_load(self._write.source))
        native = _native_pack is not None and self.one_call and not self._cluster \
            and self.redis.connection is None
        names = {1: "applied", 0: "stale", -1: "conflict"}
        out: list[WriteOutcome] = []
        for lo, hi in _slices(writes):
            part = writes[lo:hi]
            packed = [(self.keys.session_row(w.session_id, gen),
                       self.keys.session_changes(w.session_id, gen), w.base_offset,
                       w.last_offset, w.as_of_seq, w.force, _change_entry(w),
                       w.fields if type(w.fields) is dict else dict(w.fields), w.deletes)
                      for w in part] if native else []
            calls = [] if native else self._write_calls(gen, part)
            tries = 0

            async def op() -> list[Any]:
                nonlocal tries
                tries += 1
                if native:
                    return await self._packed_call(packed)  # noqa: B023 (awaited here)
                return await self._write_op(calls)()  # noqa: B023 (awaited here)

            flat = await self.retry.run("session writes", op)
            for j in range(0, len(flat), 2):
                status, stored = names[int(flat[j])], int(flat[j + 1])
                if status == "stale" and tries > 1 and stored == part[j // 2].last_offset:
                    status = "applied"  # by the attempt whose reply was lost
                out.append(WriteOutcome(status, stored))
        return out

    async def write_batch(self, gen: int, writes: Sequence[SessionWrite], group: str,
                          progress: Mapping[str, int]) -> BatchOutcome | None:
        """A live batch in one call (``WRITE_BATCH_LUA``): the generation check, the
        session writes, the applied ones' index and feed entries, and the progress when
        no session conflicted. None on a Redis Cluster (session and tenant keys live in
        different slots) and for a batch past one call's bounds (CALL_SESSIONS,
        CALL_BYTES): the caller takes the write_sessions/write_tenant path."""
        if self._cluster or not self.one_call or len(_slices(writes)) > 1:
            return None
        if self._batch.sha is None:
            self._batch.sha = await self.retry.run(
                "script load", lambda: self.redis.script_load(self._batch.source))
        native = _native_pack is not None and self.redis.connection is None
        before_keys = [self.keys.generation(), self.keys.sessions_index(gen),
                       self.keys.tenant_changes(gen), self.keys.progress(group)]
        before_args = [str(gen), "1" if gen == FIRST_GENERATION else "0",
                       str(self.feed_maxlen)]
        tail: list[str] = []
        for w in writes:
            tail += [w.session_id, str(w.activity_ms)]
        for tp, off in progress.items():
            tail += [tp, str(off)]
        packed = [(self.keys.session_row(w.session_id, gen),
                   self.keys.session_changes(w.session_id, gen), w.base_offset,
                   w.last_offset, w.as_of_seq, w.force, _change_entry(w),
                   w.fields if type(w.fields) is dict else dict(w.fields), w.deletes)
                  for w in writes] if native else []
        tries = 0

        async def op() -> list[Any]:
            nonlocal tries
            tries += 1
            if native:
                return await self._packed_call(packed, self._batch,
                                               (before_keys, before_args, tail))
            keys = list(before_keys)
            args: list[Any] = [*before_args, self.change_maxlen]
            for k, a in self._write_calls(gen, writes):
                keys += k
                args += a
            return list(await self._batch(self.redis, keys, [*args, *tail]))

        flat = await self.retry.run("batch write", op)
        if len(flat) == 1 and int(flat[0]) == -2:
            return BatchOutcome(moved=True)
        names = {1: "applied", 0: "stale", -1: "conflict"}
        out: list[WriteOutcome] = []
        for j in range(0, len(flat) - 1, 2):
            status, stored = names[int(flat[j])], int(flat[j + 1])
            if status == "stale" and tries > 1 and stored == writes[j // 2].last_offset:
                status = "applied"  # by the attempt whose reply was lost
            out.append(WriteOutcome(status, stored))
        return BatchOutcome(moved=False, outcomes=tuple(out),
                            progress_written=int(flat[-1]) == 1)

    async def _packed_call(self, calls: list[tuple[Any, ...]], script: Script | None = None,
                           extra: tuple[list[str], list[str], list[str]] | None = None
                           ) -> list[Any]:
        """The one script call of a batch, packed by the extension (the same bytes
        redis-py would send, without its per-argument encoding) and sent on a pooled
        connection; NOSCRIPT sends the source with EVAL, as :class:`Script` does.
        ``script``: the session-write script unless given; ``extra``: keys and
        arguments before the sessions', arguments after them (WRITE_BATCH_LUA)."""
        assert _native_pack is not None
        script = script or self._write
        keys, args, tail = extra or ([], [], [])
        try:
            return await self._send_packed(_native_pack(
                "EVALSHA", str(script.sha), self.change_maxlen, calls, keys, args, tail))
        except rexc.NoScriptError:
            script.sha = await self.redis.script_load(script.source)
            return await self._send_packed(_native_pack(
                "EVAL", script.source, self.change_maxlen, calls, keys, args, tail))

    async def _send_packed(self, packed: bytes) -> Any:
        pool = self.redis.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command(packed)
            reply = await conn.read_response()
        except rexc.ResponseError:
            raise  # the reply was read whole: the connection stays usable
        except BaseException:
            await conn.disconnect()  # a half-read reply must not reach the next command
            raise
        finally:
            await pool.release(conn)
        return list(reply)

    def _write_calls(self, gen: int, writes: Sequence[SessionWrite]
                     ) -> list[tuple[list[str], list[Any]]]:
        calls = []
        for w in writes:
            args: list[Any] = [w.base_offset, w.last_offset, w.as_of_seq,
                               "1" if w.force else "0", _change_entry(w), len(w.fields)]
            for k, v in w.fields.items():
                args += [k, v]
            args.append(len(w.deletes))
            args += w.deletes
            calls.append(([self.keys.session_row(w.session_id, gen),
                           self.keys.session_changes(w.session_id, gen)], args))
        return calls

    def _write_op(self, calls: list[tuple[list[str], list[Any]]]
                  ) -> Callable[[], Awaitable[list[Any]]]:
        async def op() -> list[Any]:
            # Re-sending after a lost reply is safe: each session is idempotent by offset.
            if self._cluster:
                return await self._cluster_calls(calls)
            if not self.one_call:
                return await self._pipelined(calls)
            keys: list[str] = []
            args = [self.change_maxlen]
            for k, a in calls:
                keys += k
                args += a
            return list(await self._write(self.redis, keys, args))
        return op

    async def _pipelined(self, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.evalsha(str(self._write.sha), len(keys), *keys, self.change_maxlen, *args)
            try:
                rows = await pipe.execute()
            except rexc.NoScriptError:
                self._write.sha = await self.redis.script_load(self._write.source)
                raise rexc.TryAgainError("script reloaded") from None
        return [x for r in rows for x in r]

    async def _cluster_calls(self, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """The script calls on a Redis Cluster: one per session, concurrent, each routed to
        its slot's master (a session's keys share one hash tag, so one slot). A master
        promoted by a failover may lack the script: EVAL sends the source."""
        sha, source = str(self._write.sha), self._write.source

        async def one(keys: list[str], args: list[Any]) -> Any:
            args = [self.change_maxlen, *args]
            try:
                return await self.redis.evalsha(sha, len(keys), *keys, *args)
            except rexc.NoScriptError:
                return await self.redis.eval(source, len(keys), *keys, *args)

        out: list[Any] = []
        for r in await asyncio.gather(*(one(k, a) for k, a in calls)):
            out += r
        return out

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
        if self.one_call:
            targs: list[Any] = [self.feed_maxlen, len(writes)]
            for w in writes:
                targs += [w.session_id, w.activity_ms, _change_entry(w)]
            targs += args
            await self.retry.run("tenant write", lambda: self._tenant(
                self.redis, [index, feed, pkey], targs))
            return
        if args and self._progress.sha is None:
            self._progress.sha = await self.retry.run(
                "script load", lambda: self.redis.script_load(self._progress.source))

        async def op() -> None:
            # (Before ADR 0013; benches.) One round trip: index, feed and progress share
            # the tenant's hash tag (one slot), so this is one pipeline. Each part is
            # idempotent. On a cluster redis-py refuses EVALSHA in a pipeline: the
            # progress script follows it.
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
