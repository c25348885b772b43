"""Replay's compare: each session of the new generation against the live one, in Redis.

Redis compares the two rows' stored view fields (chunked views, ADR 0013, span several
fields) and answers equal / not comparable without sending them; a pair whose stored
texts differ (always so when sealed: random nonces) comes back and its views are opened,
assembled and compared here. With the digests the fold kept of what it sealed in the new
rows, only the live row is opened (ADR 0015).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from sessionstream import native
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.privacy import UNAVAILABLE_TEXT
from sessionstream.core.rows import SEALED_PREFIX, KeySpace, SessionRow, assemble, lua
from sessionstream.streams.native_seal import SEALED_REF, field_digest
from sessionstream.streams.sink import Script

#: The extension opens sealed row fields (None without it).
_open_row = native.ext.open_row if native.available() else None

#: Sessions compared per script call (and per round trip on a Redis Cluster).
COMPARE_CHUNK = 200

# The compare of each session's new row with its live row, in Redis (ADR 0015): KEYS per
# session the new row and the live row (one hash tag, so one slot); ARGV[1] the prefix
# of a sealed value and ARGV[2] a marker, to hand the new row's sealed values back as the
# marker and their SHA-1 ('' and '': whole), then the prefixes of the fields compared
# (views, chunk manifests, chunks). Per session: 0 when exactly one row
# has an as_of_seq or the two differ (not comparable); 1 when every compared field is
# byte-identical in both rows (so are their views, however assembled or opened); else
# both rows' compared fields and as_of_seq (field/value lists) for the caller's exact
# compare of the views, the new row's sealed values as the marker and their SHA-1 when
# ARGV[1] is not '' (the caller holds the digests of their clear texts,
# streams.native_seal.sealed_ref); then, when both rows hold the same field names, only
# the fields whose stored values differ come back. Sealed fields use random nonces: such
# rows always come back.
COMPARE_ROWS_LUA = lua("""
local sealed, marker = ARGV[1], ARGV[2]
local function pick(row)
  local t, n = {}, 0
  for i = 1, #row, 2 do
    local k = row[i]
    for j = 3, #ARGV do
      if string.sub(k, 1, #ARGV[j]) == ARGV[j] then
        t[k] = row[i + 1]
        n = n + 1
        break
      end
    end
  end
  return t, n
end
local function flat(t, seq, hash)
  local f = {}
  for k, v in pairs(t) do
    f[#f + 1] = k
    if hash and string.sub(v, 1, #sealed) == sealed then
      f[#f + 1] = marker .. redis.sha1hex(v)
    else
      f[#f + 1] = v
    end
  end
  if seq then
    f[#f + 1] = $AS_OF_SEQ
    f[#f + 1] = seq
  end
  return f
end
local out = {}
for s = 1, #KEYS, 2 do
  local sa = redis.call('HGET', KEYS[s], $AS_OF_SEQ)
  local sb = redis.call('HGET', KEYS[s + 1], $AS_OF_SEQ)
  if (not sa) ~= (not sb) or (sa and tonumber(sa) ~= tonumber(sb)) then
    out[#out + 1] = 0
  else
    local ta, na = pick(redis.call('HGETALL', KEYS[s]))
    local tb, nb = pick(redis.call('HGETALL', KEYS[s + 1]))
    local names = na == nb
    local same = names
    if names then
      for k, v in pairs(ta) do
        local w = tb[k]
        if w == nil then
          names, same = false, false
          break
        elseif w ~= v then
          same = false
        end
      end
    end
    if same then
      out[#out + 1] = 1
    elseif names and sealed ~= '' then
      -- the same field names: only the fields whose stored values differ
      local da, db = {}, {}
      for k, v in pairs(ta) do
        if tb[k] ~= v then
          da[k], db[k] = v, tb[k]
        end
      end
      out[#out + 1] = {flat(da, sa, true), flat(db, sb, false)}
    else
      out[#out + 1] = {flat(ta, sa, sealed ~= ''), flat(tb, sb, false)}
    end
  end
end
return out
""")


class Tally(Protocol):
    """Where a compare counts what it found (replay's report)."""

    sessions: int
    equal: int
    different: list[str]
    not_comparable: list[str]  # live at another as_of_seq
    #: of ``equal``: sealed pairs shown equal by the digests of the new rows' sealed
    #: fields (only the live row opened)
    by_digest: int


async def compare(redis: Redis, keys: KeySpace, live: int, new: int,
                   report: Tally, views: list[str], sealed: Any = None,
                   digests: Mapping[str, Mapping[str, tuple[str, bytes]]] | None = None,
                   only: list[str] | None = None, skip: Collection[str] = ()) -> None:
    """Each session of the new generation against the live one at the same as_of_seq.

    Redis compares the two rows' stored view fields (chunked views, ADR 0013, span
    several fields) and answers equal / not comparable without sending them; a pair
    whose stored texts differ (always so when sealed: random nonces) comes back and its
    ``views`` are opened, assembled and compared here (ADR 0015). With ``digests`` (the
    native fold's, of the new rows' sealed fields as it wrote them), only the fields
    whose stored values differ come back (when both rows hold the same names), the new
    row's sealed values as their SHA-1, and only the live row's are opened: equal when
    every such text matches, a sealed one by the digest kept for that very stored value;
    any other pair is read again whole and compared exactly.

    ``only``: these sessions (of the index) and no others; else every session of the
    new generation's index but ``skip`` (compared already)."""
    wanted = {SessionRow.AS_OF_SEQ, *views}
    if only is not None:
        ids = only
    else:
        every = [s.decode() if isinstance(s, bytes) else str(s)
                 for s in await redis.zrange(keys.sessions_index(new), 0, -1)]
        report.sessions = len(every)
        ids = [sid for sid in every if sid not in skip]
    script = Script(COMPARE_ROWS_LUA)
    prefixes = [SessionRow.VIEW, SessionRow.PARTS, SessionRow.PART]
    cluster = isinstance(redis, RedisCluster)

    async def call(chunk: list[str], hashed: bool) -> list[Any]:
        pairs = [[keys.session_row(sid, new), keys.session_row(sid, live)] for sid in chunk]
        args = [*((SEALED_PREFIX, SEALED_REF) if hashed else ("", "")), *prefixes]
        if cluster:  # one call per session, each in its session's slot
            return [r for rs in await asyncio.gather(
                *(script(redis, ks, args) for ks in pairs)) for r in rs]
        return list(await script(redis, [k for ks in pairs for k in ks], args))

    def judge(chunk: list[str], got: list[Any], by_digest: bool) -> list[str]:
        """Count each verdict; the sessions to read again whole (digest path only)."""
        again: list[str] = []
        for sid, verdict in zip(chunk, got, strict=True):
            if verdict == 0:
                report.not_comparable.append(sid)
                continue
            if verdict == 1:
                report.equal += 1
                continue
            if by_digest:
                if _equal_by_digest(verdict, sid, sealed, digests.get(sid) if digests else None):
                    report.equal += 1
                    report.by_digest += 1
                else:
                    again.append(sid)
                continue
            # opened, the same texts are the same views (sealed rows that are equal)
            opened = [_opened(_pairs(v), sid, sealed) for v in verdict]
            if opened[0] == opened[1]:
                report.equal += 1
                continue
            a = {k: v for k, v in _views({}, opened=opened[0]).items() if k in wanted}
            b = {k: v for k, v in _views({}, opened=opened[1]).items() if k in wanted}
            if a.get(SessionRow.AS_OF_SEQ) != b.get(SessionRow.AS_OF_SEQ):
                report.not_comparable.append(sid)
            elif a == b:
                report.equal += 1
            else:
                report.different.append(sid)
        return again

    async def settle(chunk: list[str], got: list[Any], by_digest: bool) -> None:
        if any(v not in (0, 1) for v in got):
            again = await asyncio.to_thread(judge, chunk, got, by_digest)
        else:
            again = judge(chunk, got, by_digest)
        if again:  # a digest did not settle it: both rows whole, the exact compare
            await settle(again, await call(again, False), False)

    hashed = digests is not None
    chunks = [ids[i:i + COMPARE_CHUNK] for i in range(0, len(ids), COMPARE_CHUNK)]
    got = await call(chunks[0], hashed) if chunks else []
    for n, chunk in enumerate(chunks):
        # Redis compares the next chunk while this process opens this one's pairs
        nxt = (asyncio.ensure_future(call(chunks[n + 1], hashed)) if n + 1 < len(chunks)
               else None)
        try:
            await settle(chunk, got, hashed)
        except BaseException:
            if nxt is not None:
                nxt.cancel()
            raise
        if nxt is not None:
            got = await nxt


def _equal_by_digest(verdict: list[Any], sid: str, sealed: Any,
                     kept: Mapping[str, tuple[str, bytes]] | None) -> bool:
    """Whether the new row (sealed values as :func:`sealed_ref` gives them) and the live
    row hold the same texts in every field the script handed back (the rest are
    byte-identical): a clear field byte for byte, a sealed one by the digest the fold
    kept of what it sealed in that very value.
    False: not shown equal this way (the caller compares them exactly)."""
    fresh = _text(_pairs(verdict[0]))
    old = _text(_pairs(verdict[1]))
    if fresh.keys() != old.keys():
        return False
    opened = _opened(old, sid, sealed)
    if opened.keys() != fresh.keys():
        return False
    for name, value in fresh.items():
        if value.startswith(SEALED_PREFIX):
            d = kept.get(name) if kept is not None else None
            if d is None or d[0] != value or d[1] != field_digest(opened[name]):
                return False
        elif value != opened[name]:
            return False
    return True


def _text(row: dict[Any, Any]) -> dict[str, str]:
    return {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
            for k, v in row.items() if v is not None}


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _opened(row: dict[Any, Any], sid: str = "", sealed: Any = None) -> dict[str, str]:
    """A row's fields as text, sealed values opened (they use random nonces)."""
    clear: dict[str, str] = {}
    for k, v in row.items():
        if v is not None:
            clear[k.decode() if isinstance(k, bytes) else k] = (
                v.decode() if isinstance(v, bytes) else v)
    if any(v.startswith(SEALED_PREFIX) for v in clear.values()):
        from sessionstream.governance.rows import open_fields

        fast = _open_natively(sealed, sid, clear)
        clear = fast if fast is not None else open_fields(
            sealed, sid, clear, SessionRow.VIEW, SessionRow.STATE)
    return clear


def _open_natively(sealed: Any, sid: str, fields: dict[str, str]) -> dict[str, str] | None:
    """``fields`` opened by the extension (AES-GCM there, the GIL released) when the
    cipher is the governance row cipher and every sealed field opens; else None, and
    the Python opener decides (placeholders for what does not open)."""
    if _open_row is None:
        return None
    from sessionstream.core.privacy import DataClass, unit_class
    from sessionstream.governance.rows import RowCipher

    if type(sealed) is not RowCipher:
        return None
    units = {SessionRow.part_unit(k) if k.startswith(SessionRow.PART) else
             k.split(":", 1)[1] for k in fields
             if k.startswith((SessionRow.PART, SessionRow.VIEW, SessionRow.STATE))}
    classes = {u: None if (c := unit_class(u)) is None else c.value for u in units}
    store, tenant = sealed.cipher.store, sealed.tenant

    def key_of(cls: str) -> bytes | None:
        key = store.lookup(tenant, sid, DataClass(cls)).key
        return None if key is None else bytes(key)
    opened: dict[str, str] | None = _open_row(tenant, sid, fields, classes, key_of)
    return opened


def _views(row: dict[Any, Any], sid: str = "", sealed: Any = None,
           opened: dict[str, str] | None = None) -> dict[str, Any]:
    """The views of a row (``opened``: its fields as :func:`_opened` gave them)."""
    out: dict[str, Any] = {}
    clear = _opened(row, sid, sealed) if opened is None else opened
    clear = assemble(clear, unavailable=canonical_dumps({"unavailable": UNAVAILABLE_TEXT}),
                     sides=("view",))
    for k, v in clear.items():
        if k.startswith(SessionRow.VIEW):
            out[k] = json.loads(v)
        elif k == SessionRow.AS_OF_SEQ:
            out[k] = int(v)
    return out
