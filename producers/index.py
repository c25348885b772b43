"""The writer-side per-session index in Redis: where a session's admitted records are.

``<prefix>:{<tenant>/<sid>}:log`` is a hash {partition, first_offset, last_offset, runs,
run_lo, run_hi, clean, epoch}. Writers record only offsets of their records that were
**proven admitted** (flush's epoch check or a read-back; a resumer records what it read
outside the runs): ``first_offset`` only falls, ``last_offset`` only grows, and the runs
say where in between the records lie (a flush landing within :data:`RUN_GAP` records of
the open run extends it, else the open run is closed and a new one starts). ``clean=1``
means the writer at ``epoch`` closed with every record acknowledged and proven admitted,
so nothing of the session that a reader would admit lies beyond ``last_offset`` (a later
lease acquire resets it to 0).

Resume (:func:`producers.resume.read_back`) reads the runs, and the partition's tail
after ``last_offset`` unless clean; it trusts that read only if it admitted the record
at ``last_offset`` over a fully linked history, and otherwise scans the partition. The
index is a hint for speed; the log and the admission rule stay the authority.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from sessionstream.core.rows import DEFAULT_PREFIX, KeySpace, LogIndexFields, lua
from sessionstream.producers.errors import Fenced, RedisUnavailable

#: A flush whose records land within this many offsets of the open run extends it:
#: reading a few hundred other sessions' records costs less than a fresh fetch.
RUN_GAP = 500

#: Fold offsets [lo, hi] of one partition into the index hash ``key`` (Lua expressions):
#: ``first_offset`` only falls, ``last_offset`` only grows, the runs take [lo, hi] in.
#: Shared with the lease's flush settlement (``producers.lease``), which records the
#: index in the same call.
RECORD_BODY = """
local lo, hi = tonumber({lo}), tonumber({hi})
local first = tonumber(redis.call('HGET', {key}, $FIRST_OFFSET) or '-1')
local last = tonumber(redis.call('HGET', {key}, $LAST_OFFSET) or '-1')
local rlo = tonumber(redis.call('HGET', {key}, $RUN_LO) or '-1')
local rhi = tonumber(redis.call('HGET', {key}, $RUN_HI) or '-1')
redis.call('HSET', {key}, $PARTITION, {partition})
if first < 0 or lo < first then redis.call('HSET', {key}, $FIRST_OFFSET, lo) end
if hi > last then redis.call('HSET', {key}, $LAST_OFFSET, hi) end
if rlo < 0 then
  if first >= 0 then
    -- an index from before runs: its first..last becomes the first closed run
    redis.call('HSET', {key}, $RUNS, first .. ':' .. math.max(first, last) .. ' ')
  end
  redis.call('HSET', {key}, $RUN_LO, lo, $RUN_HI, hi)
elseif lo <= rhi + {gap} and hi + {gap} >= rlo then
  redis.call('HSET', {key}, $RUN_LO, math.min(lo, rlo), $RUN_HI, math.max(hi, rhi))
elseif lo > rhi then
  local closed = redis.call('HGET', {key}, $RUNS) or ''
  redis.call('HSET', {key}, $RUNS, closed .. rlo .. ':' .. rhi .. ' ', $RUN_LO, lo, $RUN_HI, hi)
else
  local closed = redis.call('HGET', {key}, $RUNS) or ''
  redis.call('HSET', {key}, $RUNS, closed .. lo .. ':' .. hi .. ' ')
end
""".replace("{gap}", str(RUN_GAP))

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
    #: [lo, hi] offset runs holding the session's admitted records, sorted and merged
    #: (an index from before runs: one run, first..last).
    runs: tuple[tuple[int, int], ...] = ()


def merge_runs(runs: list[tuple[int, int]], gap: int = RUN_GAP) -> tuple[tuple[int, int], ...]:
    """Sort [lo, hi] runs and merge those that overlap or lie within ``gap`` offsets."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(runs):
        if out and lo <= out[-1][1] + gap:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def parse_runs(closed: str | None, run_lo: str | None, run_hi: str | None,
               first: int, last: int) -> tuple[tuple[int, int], ...]:
    """The runs of an index hash's fields (see :data:`RECORD_BODY`)."""
    runs: list[tuple[int, int]] = []
    try:
        for item in (closed or "").split():
            lo, _, hi = item.partition(":")
            runs.append((int(lo), int(hi)))
        if run_lo is not None and run_hi is not None:
            runs.append((int(run_lo), int(run_hi)))
    except ValueError:
        runs = []  # unreadable: fall back to the whole range
    return merge_runs(runs) if runs else ((first, last),)


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
        """Fold the offsets [lo, hi] of records proven admitted into the index (idempotent)."""
        try:
            self._record(keys=[self.key(tenant, session_id)], args=[partition, lo, hi])
        except redis.RedisError as exc:
            raise RedisUnavailable("session index update", self.url) from exc

    def record_runs(self, tenant: str, session_id: str, partition: int,
                    runs: Sequence[tuple[int, int]], *, replace: bool = False) -> None:
        """Fold several runs of admitted records into the index in one round trip;
        ``replace``: drop the index's offsets first (a scan contradicted them)."""
        key = self.key(tenant, session_id)
        f = LogIndexFields
        try:
            pipe = self._r.pipeline(transaction=True)
            if replace:
                pipe.hdel(key, f.PARTITION, f.FIRST_OFFSET, f.LAST_OFFSET, f.RUNS, f.RUN_LO,
                          f.RUN_HI)
            for lo, hi in runs:
                self._record(keys=[key], args=[partition, lo, hi], client=pipe)
            pipe.execute()
        except redis.RedisError as exc:
            raise RedisUnavailable("session index repair", self.url) from exc

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
        first = int(v[f.FIRST_OFFSET])
        last = int(v.get(f.LAST_OFFSET, v[f.FIRST_OFFSET]))
        return LogIndex(
            int(v[f.PARTITION]), first, last, v.get(f.CLEAN) == "1",
            parse_runs(v.get(f.RUNS), v.get(f.RUN_LO), v.get(f.RUN_HI), first, last),
        )

    def delete(self, tenant: str, session_id: str) -> None:
        try:
            self._r.delete(self.key(tenant, session_id))
        except redis.RedisError as exc:
            raise RedisUnavailable("session index delete", self.url) from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
