"""The writer-side per-session index in Redis: where a session's records are.

``<prefix>:{<tenant>/<sid>}:log`` is a hash {partition, first_offset, last_offset, clean,
epoch}. Writers maintain it from delivery reports: ``first_offset`` is set only if absent,
``last_offset`` only grows. ``clean=1`` means the writer at ``epoch`` closed after every
record was acknowledged and confirmed admitted, so nothing of the session that a reader
would admit lies beyond ``last_offset`` (a later lease acquire resets it to 0). Resume
reads ``[first_offset, last_offset]`` when clean, ``[first_offset, end)`` otherwise, and
scans the whole partition when the index is missing. The index is a hint for speed; the
log and the admission rule stay the authority.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from producers.errors import Fenced, RedisUnavailable
from sessionstream.core.rows import DEFAULT_PREFIX, KeySpace, LogIndexFields, lua

#: Fold offsets [lo, hi] of one partition into the index hash ``key`` (Lua expressions):
#: ``first_offset`` only falls, ``last_offset`` only grows. Shared with the lease's
#: flush settlement (``producers.lease``), which records the index in the same call.
RECORD_BODY = """
redis.call('HSET', {key}, $PARTITION, {partition})
redis.call('HSETNX', {key}, $FIRST_OFFSET, {lo})
local first = tonumber(redis.call('HGET', {key}, $FIRST_OFFSET))
if tonumber({lo}) < first then redis.call('HSET', {key}, $FIRST_OFFSET, {lo}) end
local last = tonumber(redis.call('HGET', {key}, $LAST_OFFSET) or '-1')
if tonumber({hi}) > last then redis.call('HSET', {key}, $LAST_OFFSET, {hi}) end
"""

# KEYS: log. ARGV: partition, min_offset, max_offset.
_RECORD = lua(RECORD_BODY.format(key="KEYS[1]", partition="ARGV[1]", lo="ARGV[2]",
                                 hi="ARGV[3]") + "return 1\n")

# KEYS: log, lease. ARGV: owner, epoch. Marks clean only if the lease is still ours.
_MARK_CLEAN = lua("""
local v = redis.call('HMGET', KEYS[2], $OWNER, $EPOCH)
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], $CLEAN, '1', $EPOCH, ARGV[2])
return 1
""")


@dataclass(frozen=True)
class LogIndex:
    partition: int
    first_offset: int
    last_offset: int
    clean: bool


class SessionIndex:
    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX,
                 url: str | None = None) -> None:
        self._r = client
        self.prefix = prefix
        self.url = url  # for error messages (shown without its password)
        self._record = client.register_script(_RECORD)
        self._mark = client.register_script(_MARK_CLEAN)

    def key(self, tenant: str, session_id: str, what: str = "log") -> str:
        """The offset index (``what="log"``) or the lease key of a session (row layout)."""
        space = KeySpace(tenant, self.prefix)
        return space.log_index(session_id) if what == "log" else space.lease(session_id)

    def record(self, tenant: str, session_id: str, partition: int, lo: int, hi: int) -> None:
        """Fold the offsets [lo, hi] of delivered records into the index (idempotent)."""
        try:
            self._record(keys=[self.key(tenant, session_id)], args=[partition, lo, hi])
        except redis.RedisError as exc:
            raise RedisUnavailable("session index update", self.url) from exc

    def mark_clean(self, tenant: str, session_id: str, writer_id: str, epoch: int) -> None:
        try:
            ok = self._mark(
                keys=[self.key(tenant, session_id), self.key(tenant, session_id, "lease")],
                args=[writer_id, epoch],
            )
        except redis.RedisError as exc:
            raise RedisUnavailable("session index close", self.url) from exc
        if int(ok) != 1:
            raise Fenced(session_id, epoch, "lease lost before close")

    def get(self, tenant: str, session_id: str) -> LogIndex | None:
        try:
            raw = self._r.hgetall(self.key(tenant, session_id))
        except redis.RedisError as exc:
            raise RedisUnavailable("session index read", self.url) from exc
        if not raw:
            return None
        v = {_text(k): _text(x) for k, x in raw.items()}
        f = LogIndexFields
        if f.PARTITION not in v or f.FIRST_OFFSET not in v:
            return None
        return LogIndex(
            int(v[f.PARTITION]),
            int(v[f.FIRST_OFFSET]),
            int(v.get(f.LAST_OFFSET, v[f.FIRST_OFFSET])),
            v.get(f.CLEAN) == "1",
        )

    def delete(self, tenant: str, session_id: str) -> None:
        try:
            self._r.delete(self.key(tenant, session_id))
        except redis.RedisError as exc:
            raise RedisUnavailable("session index delete", self.url) from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
