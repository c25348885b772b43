"""Session leases in Redis: one writer per session at a time, fenced by an epoch.

Keys (``sessionstream.core.rows``; all in the session's hash tag, so each script stays in
one Redis Cluster slot):

- ``<prefix>:{<tenant>/<sid>}:epoch`` — integer, INCR on every acquire, never expires:
  the fencing token is monotonically increasing per session;
- ``<prefix>:{<tenant>/<sid>}:lease`` — hash {owner, epoch, expires_at, next_seq}. The hash
  persists; ownership is ``owner`` while ``expires_at`` (Redis server time, ms) is ahead.
  ``next_seq`` is the hand-off hint written on flush/release;
- ``<prefix>:{<tenant>/<sid>}:log`` — the writer-side index (see :mod:`producers.index`);
  acquiring clears its ``clean`` flag, because a new writer may leave a tail beyond it.

Safety does not depend on Redis: readers apply the admission rule to epochs in the log.
Redis only keeps two live writers from racing in the common case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from sessionstream.core.rows import DEFAULT_PREFIX, KeySpace, LeaseFields, lua
from sessionstream.producers.errors import Fenced, LeaseUnavailable, RedisUnavailable
from sessionstream.producers.index import RECORD_BODY
from sessionstream.producers.views import VIEWS_BODY, ViewWrite, view_args, view_keys

DEFAULT_TTL_MS = 30_000

# KEYS: lease, epoch, log. ARGV: owner, ttl_ms, steal(0/1).
# Returns {1, epoch, next_seq_hint|-1, was_clean, last_id} or {0, owner, remaining_ms}.
_ACQUIRE = lua("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = redis.call('HGET', KEYS[1], $OWNER)
local exp = tonumber(redis.call('HGET', KEYS[1], $EXPIRES_AT) or '0')
if owner and owner ~= '' and owner ~= ARGV[1] and exp > now and ARGV[3] ~= '1' then
  return {0, owner, exp - now}
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], $OWNER, ARGV[1], $EPOCH, epoch,
           $EXPIRES_AT, now + tonumber(ARGV[2]))
local h = redis.call('HMGET', KEYS[1], $NEXT_SEQ, $LAST_ID)
local clean = redis.call('HGET', KEYS[3], $CLEAN) or '0'
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('HSET', KEYS[3], $CLEAN, '0') end
return {1, epoch, tonumber(h[1] or '-1'), tonumber(clean), h[2] or ''}
""")

# KEYS: lease. ARGV: owner, epoch, ttl_ms. Returns 1 if renewed, 0 if not ours any more.
_RENEW = lua("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], $OWNER, $EPOCH, $EXPIRES_AT)
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], $EXPIRES_AT, now + tonumber(ARGV[3]))
return 1
""")

# KEYS: lease. ARGV: owner, epoch. Returns remaining ms (>0) if ours and live, else 0.
_CHECK = lua("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], $OWNER, $EPOCH, $EXPIRES_AT)
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
local left = tonumber(v[3]) - now
if left <= 0 then return 0 end
return left
""")

# KEYS: lease. ARGV: owner, epoch, next_seq, release(0/1), last_id. Returns 1 if ours.
_HANDOFF = lua("""
local v = redis.call('HMGET', KEYS[1], $OWNER, $EPOCH)
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], $NEXT_SEQ, ARGV[3], $LAST_ID, ARGV[5])
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], $OWNER, '', $EXPIRES_AT, 0) end
return 1
""")


# KEYS: lease, epoch, log[, view registry, head and chunks per view]. ARGV: owner,
# epoch, next_seq, partition ('' : no offsets), min_offset, max_offset, last_id, release
# ('1': give the lease up, the index clean), then the view writes (producers.views).
# One round trip at the end of a flush: read the session's epoch and, if the lease is
# still ours at that epoch (so the flushed records are admitted, see SessionWriter.flush),
# record them in the index, hand off the next seq and the last event id, apply the inline
# view writes and, with release, mark the index clean and give the lease up.
# Returns {current epoch, 1 if done else 0, stale view indexes...}.
_SETTLE = lua("""
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
local v = redis.call('HMGET', KEYS[1], $OWNER, $EPOCH)
if cur ~= tonumber(ARGV[2]) or v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return {cur, 0} end
if ARGV[4] ~= '' then
""" + RECORD_BODY.format(key="KEYS[3]", partition="ARGV[4]", lo="ARGV[5]", hi="ARGV[6]") + """
end
redis.call('HSET', KEYS[1], $NEXT_SEQ, ARGV[3], $LAST_ID, ARGV[7])
local vk, va = 4, 9
""" + VIEWS_BODY + """
if ARGV[8] == '1' then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HSET', KEYS[3], $CLEAN, '1', $EPOCH, ARGV[2])
  end
  redis.call('HSET', KEYS[1], $OWNER, '', $EXPIRES_AT, 0)
end
local out = {cur, 1}
for _, i in ipairs(stale) do table.insert(out, i) end
return out
""")


@dataclass(frozen=True)
class Settled:
    """What :meth:`LeaseStore.settle` found: the session's epoch now, whether it
    recorded (the lease was ours), and the inline views that were not where the write
    expected them (to rebuild whole)."""

    epoch: int
    done: bool
    stale_views: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lease:
    """A held lease: the epoch is the fencing token stamped on every event."""

    tenant: str
    session_id: str
    writer_id: str
    epoch: int
    ttl_ms: int
    next_seq_hint: int | None = None  # the previous holder's hand-off, if any
    index_was_clean: bool = False  # the previous holder closed with a confirmed index
    #: The event id at ``next_seq_hint - 1`` the hand-off names ("" before it was kept).
    last_event_id: str = ""

    @property
    def handed_over(self) -> bool:
        """The previous holder released after proving every record it wrote admitted:
        the log ends at ``next_seq_hint`` with ``last_event_id`` (nobody acquired since,
        which would have reset the index's clean flag), so a writer that knows that
        history can continue it without reading the log."""
        return (self.index_was_clean and self.next_seq_hint is not None
                and bool(self.last_event_id))


class LeaseStore:
    """Acquire, renew, check and release session leases (sync redis client)."""

    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX,
                 url: str | None = None) -> None:
        self._r = client
        self.prefix = prefix
        self.url = url  # for error messages (shown without its password)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._check = client.register_script(_CHECK)
        self._handoff = client.register_script(_HANDOFF)
        self._settle = client.register_script(_SETTLE)

    def _keys(self, tenant: str, session_id: str, *what: str) -> list[str]:
        """Keys of ``session_id`` by role: ``lease``, ``epoch`` or ``log`` (the row layout's)."""
        space = KeySpace(tenant, self.prefix)
        shapes = {"lease": space.lease, "epoch": space.epoch, "log": space.log_index}
        return [shapes[w](session_id) for w in what]

    def acquire(
        self,
        tenant: str,
        session_id: str,
        writer_id: str,
        ttl_ms: int = DEFAULT_TTL_MS,
        *,
        steal: bool = False,
    ) -> Lease:
        """Take the lease (epoch + 1); LeaseUnavailable if another live writer holds it."""
        keys = self._keys(tenant, session_id, "lease", "epoch", "log")
        try:
            res = self._acquire(keys=keys, args=[writer_id, ttl_ms, 1 if steal else 0])
        except redis.RedisError as exc:
            raise RedisUnavailable("lease acquire", self.url) from exc
        if int(res[0]) == 0:
            owner = res[1].decode() if isinstance(res[1], bytes) else str(res[1])
            raise LeaseUnavailable(session_id, owner, int(res[2]))
        hint = int(res[2])
        last = res[4].decode() if isinstance(res[4], bytes) else str(res[4])
        return Lease(
            tenant, session_id, writer_id, int(res[1]), ttl_ms,
            next_seq_hint=hint if hint >= 0 else None,
            index_was_clean=int(res[3]) == 1,
            last_event_id=last,
        )

    def renew(self, lease: Lease) -> None:
        """Extend the lease; raises Fenced if it is no longer ours at this epoch."""
        try:
            ok = self._renew(
                keys=self._keys(lease.tenant, lease.session_id, "lease"),
                args=[lease.writer_id, lease.epoch, lease.ttl_ms],
            )
        except redis.RedisError as exc:
            raise RedisUnavailable("lease renew", self.url) from exc
        if int(ok) != 1:
            raise Fenced(lease.session_id, lease.epoch, "another writer took the lease")

    def check(self, lease: Lease) -> bool:
        """Is the lease still ours at this epoch and not expired?"""
        try:
            left = self._check(
                keys=self._keys(lease.tenant, lease.session_id, "lease"),
                args=[lease.writer_id, lease.epoch],
            )
        except redis.RedisError as exc:
            raise RedisUnavailable("lease check", self.url) from exc
        return int(left) > 0

    def hand_off(self, lease: Lease, next_seq: int, *, release: bool,
                 last_id: str = "") -> bool:
        """Record the next seq (and the event id before it) for the next holder; with
        ``release`` give the lease up."""
        try:
            ok = self._handoff(
                keys=self._keys(lease.tenant, lease.session_id, "lease"),
                args=[lease.writer_id, lease.epoch, next_seq, 1 if release else 0, last_id],
            )
        except redis.RedisError as exc:
            raise RedisUnavailable(
                "lease release" if release else "lease hand-off", self.url
            ) from exc
        return int(ok) == 1

    def settle(self, lease: Lease, next_seq: int,
               offsets: tuple[int, int, int] | None = None, *, last_id: str = "",
               release: bool = False, views: Sequence[ViewWrite] = ()) -> Settled:
        """A flush's Redis half in one round trip: read the session's epoch and, if the
        lease is still ours at it, fold ``offsets`` (partition, lo, hi) into the session's
        log index, record the hand-off (next seq, last event id), apply the inline
        ``views`` and, with ``release``, mark the index clean and give the lease up."""
        part, lo, hi = offsets if offsets is not None else ("", 0, 0)
        keys = self._keys(lease.tenant, lease.session_id, "lease", "epoch", "log")
        if views:
            keys += view_keys(KeySpace(lease.tenant, self.prefix), lease.session_id, views)
        try:
            res = self._settle(
                keys=keys,
                args=[lease.writer_id, lease.epoch, next_seq, part, lo, hi, last_id,
                      1 if release else 0, *view_args(views)],
            )
        except redis.RedisError as exc:
            raise RedisUnavailable("flush settlement", self.url) from exc
        stale = tuple(views[int(i) - 1].name for i in res[2:])
        return Settled(int(res[0]), int(res[1]) == 1, stale)

    def release(self, lease: Lease, next_seq: int, last_id: str = "") -> bool:
        return self.hand_off(lease, next_seq, release=True, last_id=last_id)

    def handoff(self, tenant: str, session_id: str) -> tuple[int, str]:
        """The last hand-off: (next seq, the event id before it); (-1, "") if none."""
        try:
            raw = self._r.hmget(self._keys(tenant, session_id, "lease")[0],
                                [LeaseFields.NEXT_SEQ, LeaseFields.LAST_ID])
        except redis.RedisError as exc:
            raise RedisUnavailable("hand-off read", self.url) from exc
        seq, last = raw
        text = last.decode() if isinstance(last, bytes) else (last or "")
        return (int(seq) if seq is not None else -1), text

    def current_epoch(self, tenant: str, session_id: str) -> int:
        try:
            raw = self._r.get(self._keys(tenant, session_id, "epoch")[0])
        except redis.RedisError as exc:
            raise RedisUnavailable("epoch read", self.url) from exc
        return int(raw) if raw is not None else 0
