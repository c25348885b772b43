"""Inline views: projections a session's writers keep in Redis as they write (ADR 0024).

The worker folds every session into its row asynchronously; a framework backend serving
a stateless web tier needs more: the next request, on any node, must read what the last
one wrote, in one Redis call, without the log. So a writer that holds a session keeps
the session's *inline views* up to date itself, in the same script call that settles its
flush (the epoch check that proves the flush admitted): a view moves exactly when the
history does, never ahead of it.

A view is a list of entries, stored as chunks of :data:`INLINE_VIEW_CHUNK` (one list
element each, sealed as one text when the session's content is), plus named fields, in
two keys of the session's hash tag:

- ``<p>:{<t>/<s>}:fv:<name>`` — the head hash: ``seq``/``id`` (the last event the view
  folded), ``n`` (entries), ``f:<field>`` (the view's fields);
- ``<p>:{<t>/<s>}:fv:<name>:chunks`` — the chunk list;
- ``<p>:{<t>/<s>}:fv`` — the set of the session's view names (a deletion purges each).

A write names the ``(seq, id)`` the view must be at before it (compare-and-set). A view
that is not there (a writer that keeps no views wrote meanwhile: the compaction agent, a
harness) is reported stale, and the writer rebuilds it whole from its session in a
second call. A reader compares the view's ``(seq, id)`` with the lease's hand-off
(``next_seq``/``last_id``, written by the same settle); a view behind it is read from
the log instead, and installed again (:data:`INSTALL` checks the hand-off did not move).

A reader that needs some fields, found by following pointers in others (a LangGraph
checkpoint, its channel values, its parent's), runs a *gather* (:func:`gather_script`):
an adapter's Lua body that takes the fields it needs, in one call, when the view is at
the hand-off. The pointers it follows are in the fields a view declares clear (ids and
versions, never content); every value it returns is opened by the store.

The views are caches of pure folds of the log: the log stays the truth, a deletion
purges them (and shreds the keys their chunks are sealed with), and any reader or
writer can rebuild one from the events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.rows import INLINE_VIEW_CHUNK, InlineViewFields, KeySpace, lua

__all__ = ["INLINE_VIEW_CHUNK", "INSTALL", "READ", "VIEWS_BODY", "Gathered", "ViewRead",
           "ViewWrite", "gather_script", "view_args", "view_keys"]


@dataclass(frozen=True)
class ViewWrite:
    """One view's change in one write: keep the first ``keep`` chunks, append ``push``,
    set and delete fields, record ``count`` entries and the event ``to`` it folded.

    ``expect`` is the ``(seq, event id)`` the view must be at (None: replace it whole,
    whatever it holds). ``keep`` -1 keeps every chunk."""

    name: str
    expect: tuple[int, str] | None
    to: tuple[int, str]
    count: int
    keep: int = -1
    push: Sequence[str] = ()
    set_fields: Mapping[str, str] = field(default_factory=dict)
    del_fields: Sequence[str] = ()


def view_keys(space: KeySpace, session_id: str, writes: Sequence[ViewWrite]) -> list[str]:
    """The keys a view write touches: the registry, then head and chunks per view."""
    keys = [space.inline_views(session_id)]
    for w in writes:
        keys += [space.inline_view(session_id, w.name),
                 space.inline_view_chunks(session_id, w.name)]
    return keys


def view_args(writes: Sequence[ViewWrite]) -> list[str | int]:
    """The ARGV tail of :data:`VIEWS_BODY`: the count, then each view's tokens."""
    out: list[str | int] = [len(writes)]
    for w in writes:
        exp_seq, exp_id = ("*", "") if w.expect is None else w.expect
        out += [w.name, exp_seq, exp_id, w.to[0], w.to[1], w.count, w.keep,
                len(w.set_fields)]
        for k, v in w.set_fields.items():
            out += [InlineViewFields.FIELD + k, v]
        out.append(len(w.del_fields))
        out += [InlineViewFields.FIELD + k for k in w.del_fields]
        out.append(len(w.push))
        out += list(w.push)
    return out


#: Apply view writes (see the module docstring). Expects ``vk`` (the first of the view
#: keys in KEYS: the registry) and ``va`` (the first view token in ARGV); sets ``stale``,
#: a table of the 1-based indexes of the views not at their expected (seq, id).
VIEWS_BODY = """
local stale = {}
local nviews = tonumber(ARGV[va])
local a = va + 1
local k = vk + 1
for v = 1, nviews do
  local head, chunks = KEYS[k], KEYS[k + 1]
  local name, exp_seq, exp_id = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local to_seq, to_id, count, keep = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], tonumber(ARGV[a + 6])
  local nset = tonumber(ARGV[a + 7])
  local sets = a + 8
  local ndel = tonumber(ARGV[sets + 2 * nset])
  local dels = sets + 2 * nset + 1
  local npush = tonumber(ARGV[dels + ndel])
  local pushes = dels + ndel + 1
  local ok = true
  if exp_seq == '*' then
    redis.call('DEL', head, chunks)
  else
    local cur = redis.call('HMGET', head, $VSEQ, $VID)
    if cur[1] ~= exp_seq or (cur[2] or '') ~= exp_id then ok = false end
  end
  if ok then
    if keep == 0 then
      redis.call('DEL', chunks)
    elseif keep > 0 then
      redis.call('LTRIM', chunks, 0, keep - 1)
    end
    local i = 0
    while i < npush do
      local j = math.min(i + 500, npush)
      redis.call('RPUSH', chunks, unpack(ARGV, pushes + i, pushes + j - 1))
      i = j
    end
    for s = 0, nset - 1 do
      redis.call('HSET', head, ARGV[sets + 2 * s], ARGV[sets + 2 * s + 1])
    end
    for d = 0, ndel - 1 do redis.call('HDEL', head, ARGV[dels + d]) end
    redis.call('HSET', head, $VSEQ, to_seq, $VID, to_id, $VCOUNT, count)
    redis.call('SADD', KEYS[vk], name)
  else
    table.insert(stale, v)
  end
  a = pushes + npush
  k = k + 2
end
"""

# KEYS: lease, registry, head, chunks. ARGV: hand-off next_seq, hand-off last id, then
# one view write (view_args of one, whole: expect None). Installs a view a reader
# rebuilt from the log, only if the hand-off is still where the read found it.
# Returns 1 installed, 0 the session moved on meanwhile.
INSTALL = lua("""
local h = redis.call('HMGET', KEYS[1], $NEXT_SEQ, $LAST_ID)
if (h[1] or '-1') ~= ARGV[1] or (h[2] or '') ~= ARGV[2] then return 0 end
local vk, va = 2, 3
""" + VIEWS_BODY + """
return 1
""")

# KEYS: lease, head, chunks. ARGV: the last n entries (-1: all), then '0' for none of the
# view's own fields (only its seq, id and count; else all). Returns {hand-off next_seq,
# hand-off last id, head fields (flat), first chunk index, chunks...}.
READ = lua("""
local h = redis.call('HMGET', KEYS[1], $NEXT_SEQ, $LAST_ID)
local head
if ARGV[2] == '0' then
  local v = redis.call('HMGET', KEYS[2], $VSEQ, $VID, $VCOUNT)
  head = {}
  if v[1] then head = {$VSEQ, v[1], $VID, v[2] or '', $VCOUNT, v[3] or '0'} end
else
  head = redis.call('HGETALL', KEYS[2])
end
local n = tonumber(redis.call('HGET', KEYS[2], $VCOUNT) or '0')
local want = tonumber(ARGV[1])
local first = 0
if want >= 0 then first = math.floor(math.max(n - want, 0) / CHUNK) end
local chunks = {}
if want ~= 0 then chunks = redis.call('LRANGE', KEYS[3], first, -1) end
return {h[1] or '-1', h[2] or '', head, first, chunks}
""".replace("CHUNK", str(INLINE_VIEW_CHUNK)))


#: Wanted fields come back in the gather's own reply up to this many bytes in all; the
#: rest are read by a second call. A script hands a large value back at ~1.5 µs/KiB
#: (measured: 0.56 ms for 300 KiB against 0.12 ms for a plain HGET of it), a second
#: round trip costs ~0.1 ms on an idle loopback (several ms on a loaded one): they break
#: even near 100 KiB.
GATHER_INLINE_BYTES = 128 * 1024

#: The frame of a gather (``integrations.views.ViewGather``): KEYS lease, head; ARGV the
#: body's. The body runs only when the view is at the hand-off (fresh). It calls
#: ``take(name)`` for a field whose value it follows (returned here: the stored text, or
#: nil) and ``want(name)`` for one it only returns (true if the field exists): wanted
#: fields past :data:`GATHER_INLINE_BYTES` in all are named, not returned, and the
#: caller reads them next with :meth:`Gathered.fetch_wanted`. Returns {hand-off next_seq, hand-off
#: last id, the view's seq, id and count, {name, text, ...} taken, {name, ...} wanted}.
_GATHER_HEAD = lua("""
local h = redis.call('HMGET', KEYS[1], $NEXT_SEQ, $LAST_ID)
local v = redis.call('HMGET', KEYS[2], $VSEQ, $VID, $VCOUNT)
local out, wanted = {}, {}
if v[1] and tonumber(v[1]) + 1 == tonumber(h[1] or '-1') and v[2] == h[2] then
  local seen = {}
  local function take(name)
    local got = seen[name]
    if got == nil or got == true then
      got = redis.call('HGET', KEYS[2], $VFIELD .. name) or false
      seen[name] = got
      if got then
        out[#out + 1] = name
        out[#out + 1] = got
      end
    end
    return got or nil
  end
  local inline = INLINE
  local function want(name)
    local got = seen[name]
    if got == nil then
      local n = redis.call('HSTRLEN', KEYS[2], $VFIELD .. name)
      if n > 0 and n <= inline then
        inline = inline - n
        return take(name) and true or nil
      end
      got = n > 0
      seen[name] = got
      if got then wanted[#wanted + 1] = name end
    end
    return got and true or nil
  end
""".replace("INLINE", str(GATHER_INLINE_BYTES)))
_GATHER_TAIL = """
end
return {h[1] or '-1', h[2] or '', v[1] or '', v[2] or '', v[3] or '0', out, wanted}
"""


def gather_script(body: str) -> str:
    """The script of a gather whose Lua body is ``body`` (see :data:`_GATHER_HEAD`)."""
    return _GATHER_HEAD + body + _GATHER_TAIL


@dataclass(frozen=True)
class ViewHead:
    """Where a view stands against the session's hand-off, as a read found them."""

    handoff_next_seq: int
    handoff_last_id: str
    seq: int | None  # the view's last folded seq (None: no view)
    event_id: str
    count: int

    @property
    def fresh(self) -> bool:
        """The view has folded the whole history the last flush handed off."""
        return (self.seq is not None and self.seq + 1 == self.handoff_next_seq
                and self.event_id == self.handoff_last_id)


@dataclass(frozen=True)
class Gathered(ViewHead):
    """What a gather script returned (texts still sealed where they were); the body ran
    only when the view was :attr:`fresh`."""

    fields: dict[str, str]  # only when the view was fresh: the fields the body took
    wanted: list[str]  # and the fields it wants (read next, with fetch_wanted)

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> Gathered:
        flat = [_text(x) for x in raw[5]]
        seq = _text(raw[2])
        return cls(int(_text(raw[0])), _text(raw[1]), int(seq) if seq else None,
                   _text(raw[3]), int(_text(raw[4]) or "0"),
                   dict(zip(flat[::2], flat[1::2], strict=True)), [_text(x) for x in raw[6]])

    def fetch_wanted(self, client: Any, head: str) -> dict[str, str] | None:
        """The wanted fields (one HMGET), or None when the view moved since the gather
        (another write, a rebuild): its seq and id are read with them."""
        if not self.wanted:
            return {}
        got = client.hmget(head, [InlineViewFields.SEQ, InlineViewFields.ID,
                                  *(InlineViewFields.FIELD + n for n in self.wanted)])
        if (got[0] is None or int(_text(got[0])) != self.seq
                or _text(got[1]) != self.event_id or any(v is None for v in got[2:])):
            return None
        return {n: _text(v) for n, v in zip(self.wanted, got[2:], strict=True)}


def _text(v: object) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


@dataclass(frozen=True)
class ViewRead(ViewHead):
    """What :data:`READ` returned, decoded (texts still sealed where they were)."""

    fields: dict[str, str]
    first_chunk: int
    chunks: list[str]

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> ViewRead:
        head_flat = [_text(x) for x in raw[2]]
        head = dict(zip(head_flat[::2], head_flat[1::2], strict=True))
        seq = head.get(InlineViewFields.SEQ)
        fields = {k[len(InlineViewFields.FIELD):]: v for k, v in head.items()
                  if k.startswith(InlineViewFields.FIELD)}
        return cls(int(_text(raw[0])), _text(raw[1]),
                   int(seq) if seq is not None else None, head.get(InlineViewFields.ID, ""),
                   int(head.get(InlineViewFields.COUNT, "0")), fields, int(_text(raw[3])),
                   [_text(c) for c in raw[4]])
