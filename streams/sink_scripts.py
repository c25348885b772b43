"""The sink's Lua scripts (``streams.sink.RedisSink``): the session writes, the tenant
writes, the progress and the one-call batch, written with the row layout's field names
(``$NAME``, rendered by ``sessionstream.core.rows.lua``; tests/unit/test_rows.py checks
every quoted name left in them)."""

from __future__ import annotations

from sessionstream.core.rows import lua


# Every session of a batch in one call (ADR 0013: one command instead of one per
# session; on a Redis Cluster one call per session, each in its session's slot).
# KEYS: per session its hash and its change stream. ARGV[1] the change maxlen, then per
# session: base_offset, last_offset, as_of_seq, force(0/1), change entry, n, n
# field/value pairs, m, m fields to delete. Returns status, stored offset per session.
# Each session is compare-and-set on its own; the call is atomic, so a reader's HGETALL
# sees every field of a session at one as_of_seq.
def _session_loop(first_key: int, maxlen: str, on_write: str = "") -> str:
    """Lua: the compare-and-set write of each session, its (row, change stream) key pairs
    from ``KEYS[first_key]``, its arguments from ``ARGV[a]`` (``a`` set before); appends
    status and stored offset per session to ``out``; ``on_write`` runs after each
    session is decided (``status``: 1 applied, 0 stale, -1 conflict; ``entry``: the
    index of its change entry in ARGV)."""
    return f"""
for s = {first_key}, #KEYS, 2 do
  local row = KEYS[s]
  local base = tonumber(ARGV[a])
  local last = tonumber(ARGV[a + 1])
  local n = tonumber(ARGV[a + 5])
  local p = a + 6
  local m = tonumber(ARGV[p + 2 * n])
  local d = p + 2 * n + 1
  local entry = a + 4
  local status = 1
  local stored = tonumber(redis.call('HGET', row, $AS_OF_OFFSET) or '-1')
  if stored > last or (stored == last and ARGV[a + 3] ~= '1') then
    status = 0
  elseif stored ~= base then
    status = -1
  else
    for i = p, p + 2 * n - 1, 1000 do
      redis.call('HSET', row, unpack(ARGV, i, math.min(i + 999, p + 2 * n - 1)))
    end
    for i = d, d + m - 1, 1000 do
      redis.call('HDEL', row, unpack(ARGV, i, math.min(i + 999, d + m - 1)))
    end
    redis.call('HSET', row, $AS_OF_OFFSET, ARGV[a + 1], $AS_OF_SEQ, ARGV[a + 2])
    redis.call('XADD', KEYS[s + 1], 'MAXLEN', '~', {maxlen}, '*', $CHANGE, ARGV[entry])
  end
  out[#out + 1] = status
  out[#out + 1] = stored
{on_write}  a = d + m
end
"""


WRITE_SESSION_LUA = lua("local out = {}\nlocal a = 2\n" + _session_loop(1, "ARGV[1]")
                        + "return out\n")

def _progress_max(key: str, first: str) -> str:
    """Lua: HSET each (field, offset) pair of ARGV from index ``first`` on in the hash
    ``key`` only where the offset is past the stored one (progress never moves back)."""
    return (f"for i = {first}, #ARGV, 2 do\n"
            f"  local cur = tonumber(redis.call('HGET', {key}, ARGV[i]) or '-1')\n"
            "  if tonumber(ARGV[i + 1]) > cur then\n"
            f"    redis.call('HSET', {key}, ARGV[i], ARGV[i + 1])\n"
            "  end\n"
            "end\n")


# The tenant's part of a batch in one call (ADR 0013). KEYS: session index, change feed,
# progress hash (one slot: all carry the tenant's hash tag). ARGV[1] the feed maxlen,
# ARGV[2] n, then per session: id, activity ms, change entry; then progress field/offset
# pairs. ZADD GT: a member's score never moves back; progress only moves forward.
WRITE_TENANT_LUA = lua("""
local n = tonumber(ARGV[2])
for i = 3, 2 + 3 * n, 3 do
  redis.call('ZADD', KEYS[1], 'GT', ARGV[i + 1], ARGV[i])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', $CHANGE, ARGV[i + 2])
end
""" + _progress_max("KEYS[3]", "3 + 3 * n") + "return 1\n")

# KEYS[1] progress hash; ARGV: field, offset, field, offset, ... (only ever moves forward)
PROGRESS_MAX_LUA = "\n" + _progress_max("KEYS[1]", "1") + "return 1\n"

# A live batch in one call (single Redis only: it names session and tenant keys; ADR
# 0014). KEYS: 1 the generation pointer, 2 the session index, 3 the change feed, 4 the
# progress hash, then per session its row and change stream. ARGV: 1 the generation the
# batch was folded for, 2 "1" when an absent pointer names it (the first generation),
# 3 the feed maxlen, 4 the change maxlen, then per session the arguments of
# WRITE_SESSION_LUA, then per session its id and activity ms, then progress
# field/offset pairs. When the pointer names another generation nothing is written and
# the reply is {-2}. Otherwise: status and stored offset per session (as
# WRITE_SESSION_LUA), an applied session's index score and feed entry (as
# WRITE_TENANT_LUA), and the progress only when no session conflicted (a conflict is
# refolded by the caller, which writes the progress after it); the last element is 1
# when the progress was written.
WRITE_BATCH_LUA = lua("""
local ptr = redis.call('GET', KEYS[1])
local moved
if ptr == false or ptr == '' then
  moved = ARGV[2] ~= '1'
else
  moved = tonumber(ptr) ~= tonumber(ARGV[1])
end
if moved then
  return {-2}
end
local out = {}
local entries = {}
local conflict = false
local a = 5
""" + _session_loop(5, "ARGV[4]", """  entries[#entries + 1] = status == 1 and entry or 0
  if status == -1 then
    conflict = true
  end
""") + """
local t = a
for i = 1, #entries do
  if entries[i] > 0 then
    redis.call('ZADD', KEYS[2], 'GT', ARGV[t + 1], ARGV[t])
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', $CHANGE, ARGV[entries[i]])
  end
  t = t + 2
end
if conflict then
  out[#out + 1] = 0
  return out
end
""" + _progress_max("KEYS[4]", "t") + """out[#out + 1] = 1
return out
""")
