"""The Redis row layout, in one place: every key shape and every hash field name.

Nothing else spells a key or a field. The sink, the readers, replay, diagnose, the
writer's leases and offset index, the compaction trigger and the dashboard ask this
module; the Lua scripts get their field names from :func:`lua` (the script text
names fields as ``$FIELD`` and is rendered once, at import of the adapter).

Redis-Cluster ready: every key about one session shares the hash tag
``{<tenant>/<session_id>}``, so one script call that writes all of a session's views,
states and watermark never crosses slots. Keys about a whole tenant (the session
list, the change feed) use the tag ``{<tenant>}`` and are written in a separate call.

Keys (``<p>`` the key prefix, ``<t>`` the tenant, ``g<N>`` the generation, see
``streams.replay``):

=================================== ========== =========================================
key                                 type       what
=================================== ========== =========================================
``<p>:{<t>/<s>}:g<N>``              hash       the session row (:class:`SessionRow` fields)
``<p>:{<t>/<s>}:changes:g<N>``      stream     the session's change record (capped)
``<p>:{<t>/<s>}:lease``             hash       the writer lease (:class:`LeaseFields`)
``<p>:{<t>/<s>}:epoch``             integer    the fencing token, INCR per acquire
``<p>:{<t>/<s>}:log``               hash       the writer's offset index (:class:`LogIndexFields`)
``<p>:{<t>}:sessions:g<N>``         zset       session ids by last activity (ms)
``<p>:{<t>}:changes:g<N>``          stream     the tenant's change feed (capped)
``<p>:{<t>}:progress:<group>``      hash       ``<topic>:<partition>`` → last processed offset
``<p>:{<t>}:generation``            string     the generation readers use (absent: 1)
``<p>:{<t>}:generation:last``       integer    the last generation replay allocated
``<p>:{<t>}:compaction-watch:<n>``  hash       a watcher's feed cursor (:class:`WatchCursorFields`)
``<p>:{<t>/<s>}:dkeys``             hash       wrapped data keys + shred tombstones (governance)
``<p>:{<t>}:dkeys``                 set        sessions with data keys (rotation, retention)
``<p>:{<t>}:dkeys:shreds``          list       the shred feed: ``[session, class]`` per shred
``<p>:{<t>}:holds``                 hash       legal holds: ``tenant`` / ``session:<s>`` → JSON
=================================== ========== =========================================

A change entry (in both streams) has one field, :data:`CHANGE_FIELD`, holding
:func:`change_entry` JSON: ``session``, ``as_of_seq``, ``offset``, ``changed``.

Chunked units (ADR 0013): a unit whose view or state grows with the session (the
surface's messages, closed turns, tool results, todo items, compaction attempts)
declares *collections*. Its row then holds, instead of two whole texts:

- ``view:<u>`` / ``state:<u>``: the *head*, the view / state object without the
  collections' keys (canonical JSON);
- ``parts:<u>``: the manifest (:func:`manifest`), clear JSON, counts only:
  ``{"v":1,"chunk":C,"lists":{<name>:{"kind":"list"|"object","items":N,"chunks":K}},
  "view":{<key>:<name>},"state":{<key>:<name>}}``;
- ``part:<u>:<name>:<i>``: chunk ``i`` of collection ``name``: the canonical JSON texts of
  items ``i*C .. i*C+C-1`` joined by ``,`` (no brackets; an item may be empty text,
  e.g. a tool result without an operation id, and is then left out).

A reader gets every field in one HGETALL (one script call wrote them, so they are at
one ``as_of_seq``) and :func:`assemble` splices each collection back into its object:
``[`` / ``{`` + the non-empty chunks joined by ``,`` + ``]`` / ``}``. A row written
before chunking (no ``parts:<u>``) reads as it is. A write touches only the chunks
from the first changed item on, and deletes the chunks past the new count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from string import Template
from typing import Any

from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.privacy import UNAVAILABLE_TEXT

DEFAULT_PREFIX = "ss"
#: The generation readers use while the pointer is absent (nothing was ever replayed).
FIRST_GENERATION = 1


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Where one tenant's keys live: the key prefix and the tenant, travelling together."""

    tenant: str
    prefix: str = DEFAULT_PREFIX

    # -- shapes ------------------------------------------------------------------------
    def session_tag(self, session_id: str) -> str:
        return "{" + self.tenant + "/" + session_id + "}"

    def session_key(self, session_id: str, what: str) -> str:
        """``<prefix>:{<tenant>/<session>}:<what>``."""
        return f"{self.prefix}:{self.session_tag(session_id)}:{what}"

    def tenant_key(self, what: str) -> str:
        """``<prefix>:{<tenant>}:<what>``."""
        return f"{self.prefix}:{{{self.tenant}}}:{what}"

    # -- per session -------------------------------------------------------------------
    def session_row(self, session_id: str, gen: int) -> str:
        """The hash of every view, state and watermark of a session in generation ``gen``."""
        return self.session_key(session_id, f"g{gen}")

    def session_changes(self, session_id: str, gen: int) -> str:
        return self.session_key(session_id, f"changes:g{gen}")

    def lease(self, session_id: str) -> str:
        return self.session_key(session_id, "lease")

    def epoch(self, session_id: str) -> str:
        return self.session_key(session_id, "epoch")

    def log_index(self, session_id: str) -> str:
        return self.session_key(session_id, "log")

    def inline_views(self, session_id: str) -> str:
        """The set of the session's inline view names (a deletion purges each by name)."""
        return self.session_key(session_id, "fv")

    def inline_view(self, session_id: str, name: str) -> str:
        """An inline view's head hash (:class:`InlineViewFields` and the view's fields)."""
        return self.session_key(session_id, f"fv:{name}")

    def inline_view_chunks(self, session_id: str, name: str) -> str:
        """An inline view's entries, as a list of chunks of ``INLINE_VIEW_CHUNK`` each."""
        return self.session_key(session_id, f"fv:{name}:chunks")

    # -- per tenant --------------------------------------------------------------------
    def sessions_index(self, gen: int) -> str:
        return self.tenant_key(f"sessions:g{gen}")

    def tenant_changes(self, gen: int) -> str:
        return self.tenant_key(f"changes:g{gen}")

    def progress(self, group: str) -> str:
        return self.tenant_key(f"progress:{group}")

    def generation(self) -> str:
        return self.tenant_key("generation")

    def generation_counter(self) -> str:
        return self.tenant_key("generation:last")

    def compaction_watch(self, name: str) -> str:
        return self.tenant_key(f"compaction-watch:{name}")

    # -- every generation (a deletion purges them all, naming each: no SCAN) -----------------
    @staticmethod
    def generations(counter: str | bytes | int | None,
                    pointer: str | bytes | int | None) -> range:
        """Every generation a key of this tenant can be in: 0 up to the highest of the
        generation counter (``generation_counter()``, which replay INCRs before it writes a
        generation), the pointer (``generation()``) and :data:`FIRST_GENERATION`."""
        top = max(int(counter or 0), int(pointer or 0), FIRST_GENERATION)
        return range(0, top + 1)

    def session_key_role(self, session_id: str, key: str) -> str | None:
        """Which of the session's keys ``key`` is: ``row``, ``changes`` (any generation),
        ``lease``, ``epoch`` or ``log``; None for a key of another shape."""
        head = self.session_key(session_id, "")
        if not key.startswith(head):
            return None
        what = key[len(head):]
        if what.startswith("changes:g") and what[len("changes:g"):].isdigit():
            return "changes"
        if what.startswith("g") and what[1:].isdigit():
            return "row"
        return what if what in ("lease", "epoch", "log") else None

    # -- governance (never purged by a deletion: the tombstones are its proof) ----------
    def data_keys(self, session_id: str) -> str:
        return self.session_key(session_id, "dkeys")

    def data_key_sessions(self) -> str:
        return self.tenant_key("dkeys")

    def data_key_shreds(self) -> str:
        """The tenant's shred feed: a list of ``[session, class]`` JSON, one per shred
        (readers drop those cached keys)."""
        return self.tenant_key("dkeys:shreds")

    def data_key_mark(self) -> str:
        """The tenant's shred mark: a sorted set whose one member's score is the highest
        tenant key version that wrapped a destroyed data key (``keys retire``)."""
        return self.tenant_key("dkeys:mark")

    def holds(self) -> str:
        return self.tenant_key("holds")


def generation_of(raw: str | bytes | None) -> int:
    """The generation a stored pointer names (absent or empty: the first)."""
    return int(raw) if raw else FIRST_GENERATION


# -- hash fields --------------------------------------------------------------------------

#: How a sealed row value starts (sessionstream.governance.rows seals and opens them).
SEALED_PREFIX = "ss-aead1:"


class SessionRow:
    """Fields of the session row ``<p>:{<t>/<s>}:g<N>``."""

    VIEW = "view:"  # + unit key: the view JSON readers get
    STATE = "state:"  # + unit key: the unit's internal state (dump)
    STATE_VERSION = "sv:"  # + unit key: the state_version the state was folded with
    PARTS = "parts:"  # + unit key: the manifest of a chunked unit (ADR 0013)
    PART = "part:"  # + unit key + ":" + collection + ":" + chunk index: one chunk
    ADMISSION = "admission"  # AdmissionState JSON
    META = "meta"  # session facts: partition, offsets, last_time, quarantine, counts
    AS_OF_SEQ = "as_of_seq"
    AS_OF_OFFSET = "as_of_offset"

    SCALARS = (ADMISSION, META, AS_OF_SEQ, AS_OF_OFFSET)

    @staticmethod
    def view(unit: str) -> str:
        return SessionRow.VIEW + unit

    @staticmethod
    def state(unit: str) -> str:
        return SessionRow.STATE + unit

    @staticmethod
    def state_version(unit: str) -> str:
        return SessionRow.STATE_VERSION + unit

    @staticmethod
    def parts(unit: str) -> str:
        return SessionRow.PARTS + unit

    @staticmethod
    def part(unit: str, collection: str, index: int) -> str:
        return f"{SessionRow.PART}{unit}:{collection}:{index}"

    @staticmethod
    def part_unit(name: str) -> str:
        """The unit key of a ``part:`` field name."""
        return name[len(SessionRow.PART):].split(":", 1)[0]

    @staticmethod
    def views(row: Mapping[str, str]) -> dict[str, Any]:
        """The decoded views of a row (chunked units reassembled), by unit key, in key order."""
        n = len(SessionRow.VIEW)
        whole = assemble(row, unavailable=canonical_dumps({"unavailable": UNAVAILABLE_TEXT}),
                         sides=("view",))
        return {k[n:]: json.loads(v) for k, v in sorted(whole.items())
                if k.startswith(SessionRow.VIEW)}

    @staticmethod
    def state_versions(row: Mapping[str, str]) -> dict[str, int]:
        n = len(SessionRow.STATE_VERSION)
        return {k[n:]: int(v) for k, v in row.items() if k.startswith(SessionRow.STATE_VERSION)}

    @staticmethod
    def meta(row: Mapping[str, str]) -> dict[str, Any]:
        raw = row.get(SessionRow.META)
        return json.loads(raw) if raw else {}

    @staticmethod
    def as_of_seq(row: Mapping[str, str]) -> int:
        return int(row.get(SessionRow.AS_OF_SEQ, -1))

    @staticmethod
    def as_of_offset(row: Mapping[str, str]) -> int:
        return int(row.get(SessionRow.AS_OF_OFFSET, -1))

    @staticmethod
    def is_field(name: str) -> bool:
        return name in SessionRow.SCALARS or name.startswith(
            (SessionRow.VIEW, SessionRow.STATE, SessionRow.STATE_VERSION, SessionRow.PARTS,
             SessionRow.PART))

    #: Prefixes of every field that holds a view or a state (or part of one): what a
    #: deletion purges (governance).
    CONTENT_PREFIXES = (VIEW, STATE, STATE_VERSION, PARTS, PART)


# -- chunked units (ADR 0013) ----------------------------------------------------------

#: Items per chunk. A stored format: chunk ``i`` of a manifest holds items ``i*C..``;
#: readers use the manifest's ``chunk``, so a change only affects rows written after it.
CHUNK_ITEMS = 16
MANIFEST_VERSION = 1
_OPEN = {"list": ("[", "]"), "object": ("{", "}")}


def chunk_count(items: int, chunk: int = CHUNK_ITEMS) -> int:
    return -(-items // chunk)


def manifest(lists: Mapping[str, tuple[str, int]], view: Mapping[str, str],
             state: Mapping[str, str], chunk: int = CHUNK_ITEMS) -> str:
    """The ``parts:<u>`` JSON: ``lists`` name -> (kind, items); ``view`` / ``state`` map an
    object key to the collection spliced in under it."""
    return canonical_dumps({
        "v": MANIFEST_VERSION, "chunk": chunk,
        "lists": {name: {"kind": kind, "items": n, "chunks": chunk_count(n, chunk)}
                  for name, (kind, n) in lists.items()},
        "view": dict(view), "state": dict(state),
    })


#: What a row's manifest says is stored for a unit: (items per chunk, collection -> chunks).
Stored = tuple[int, dict[str, int]]


def stored_chunks(row: Mapping[str, str]) -> dict[str, Stored]:
    """Unit key -> (chunk size, {collection: chunks stored}), from the row's manifests:
    the writer deletes the chunks past a collection's new count, and rewrites every chunk
    when the size differs from its own."""
    out: dict[str, Stored] = {}
    n = len(SessionRow.PARTS)
    for name, raw in row.items():
        if name.startswith(SessionRow.PARTS):
            try:
                spec = json.loads(raw)
                out[name[n:]] = (int(spec["chunk"]),
                                 {c: int(v["chunks"]) for c, v in spec["lists"].items()})
            except (ValueError, KeyError, TypeError):
                out[name[n:]] = (0, {})
    return out


class BrokenRow(ValueError):
    """A chunked unit's row misses a chunk its manifest names (never written so)."""


def assemble(row: Mapping[str, str], unavailable: str | None = None,
             sides: tuple[str, ...] = ("view", "state")) -> dict[str, str]:
    """``row`` with every chunked unit made whole: ``view:<u>`` / ``state:<u>`` hold the
    full JSON text again, the ``parts:`` / ``part:`` fields are gone. Rows and units
    written whole pass through unchanged.

    A unit whose chunks are missing (a sealed chunk that did not open) reads as
    ``unavailable`` (a JSON text) for its view, and without its state; with
    ``unavailable`` None that raises :class:`BrokenRow` naming the field. ``sides``:
    which of ``view`` / ``state`` to make whole (the other keeps its head).
    """
    if not any(k.startswith(SessionRow.PARTS) for k in row):
        return dict(row)
    out = {k: v for k, v in row.items()
           if not k.startswith((SessionRow.PART, SessionRow.PARTS))}
    n = len(SessionRow.PARTS)
    for name, raw in row.items():
        if not name.startswith(SessionRow.PARTS):
            continue
        unit = name[n:]
        try:
            spec = json.loads(raw)
            used = {c for side in sides for c in (spec.get(side) or {}).values()}
            texts = {c: _collection_text(row, unit, c, v, int(spec["chunk"]))
                     for c, v in spec["lists"].items() if c in used}
        except BrokenRow:
            if unavailable is None:
                raise
            out.pop(SessionRow.state(unit), None)
            if SessionRow.view(unit) in out:
                out[SessionRow.view(unit)] = unavailable
            continue
        except (ValueError, KeyError, TypeError) as exc:
            raise BrokenRow(f"row field {name!r} is not a chunk manifest ({exc})") from exc
        for side, field in (("view", SessionRow.view(unit)), ("state", SessionRow.state(unit))):
            head = out.get(field)
            if head is None or side not in sides or not spec.get(side):
                continue
            spliced = ",".join(f"{canonical_dumps(key)}:{texts[c]}"
                               for key, c in spec[side].items())
            body = head.strip()
            out[field] = "{" + spliced + ("," + body[1:] if body[1:].strip() != "}"
                                          else "}")
    return out


def _collection_text(row: Mapping[str, str], unit: str, name: str, spec: Mapping[str, Any],
                     chunk: int) -> str:
    opener, closer = _OPEN[spec["kind"]]
    chunks = []
    for i in range(int(spec["chunks"])):
        text = row.get(SessionRow.part(unit, name, i))
        if text is None:
            raise BrokenRow(f"row field {SessionRow.part(unit, name, i)!r} is missing "
                            f"(manifest {SessionRow.parts(unit)!r} names {spec['chunks']} "
                            "chunks)")
        if text:
            chunks.append(text)
    return opener + ",".join(chunks) + closer


class MetaFields:
    """Keys of the session row's ``meta`` JSON (written by ``streams.session_row``)."""

    SESSION_ID = "session_id"
    PARTITION = "partition"
    AS_OF_SEQ = "as_of_seq"
    AS_OF_OFFSET = "as_of_offset"
    FIRST_OFFSET = "first_offset"  # offset of the session's seq 0
    LAST_TIME = "last_time"  # time of the last admitted event (ms)
    QUARANTINE = "quarantine"  # null, or {kind, reason, seq, offset}
    COUNTS = "counts"  # records by admission verdict, plus ignored / held


class LeaseFields:
    """Fields of the writer lease hash ``<p>:{<t>/<s>}:lease``."""

    OWNER = "owner"
    EPOCH = "epoch"
    EXPIRES_AT = "expires_at"  # Redis server time, ms
    NEXT_SEQ = "next_seq"  # the hand-off hint written on flush/release
    LAST_ID = "last_id"  # the event id at next_seq - 1, written with next_seq


class LogIndexFields:
    """Fields of the writer's offset index ``<p>:{<t>/<s>}:log``."""

    PARTITION = "partition"
    FIRST_OFFSET = "first_offset"
    LAST_OFFSET = "last_offset"
    CLEAN = "clean"  # "1": closed with every record confirmed admitted
    EPOCH = "epoch"  # the epoch that marked it clean
    #: Where the session's admitted records lie: closed runs ``"lo:hi "`` (offsets,
    #: inclusive) and the open run (``run_lo``/``run_hi``), which grows while flushes land
    #: near it. Absent in an index written before runs: one run, first..last.
    RUNS = "runs"
    RUN_LO = "run_lo"
    RUN_HI = "run_hi"


class InlineViewFields:
    """The reserved fields of an inline view's head hash (``KeySpace.inline_view``);
    a view's own fields are ``f:<name>``."""

    SEQ = "seq"  # the last seq the view has folded (-1: none)
    ID = "id"  # that event's id
    COUNT = "n"  # entries in the chunk list
    FIELD = "f:"


#: Entries per chunk of an inline view's chunk list.
INLINE_VIEW_CHUNK = 32


class WatchCursorFields:
    """Fields of a compaction watcher's cursor hash."""

    GENERATION = "generation"
    ENTRY_ID = "entry_id"


#: The one field of a change-stream entry.
CHANGE_FIELD = "change"


#: The encoder of change entries: canonical JSON (``jsonvalue.canonical_dumps``) of the
#: entry's plain fields, built once (an entry is made per session write).
_ENTRY = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)


def change_entry(session_id: str, as_of_seq: int, offset: int, changed: Iterable[str]) -> str:
    """The JSON of one change-stream entry (canonical, so a repeat is byte-identical)."""
    return _ENTRY.encode({"session": session_id, "as_of_seq": as_of_seq, "offset": offset,
                          "changed": list(changed)})


def read_change_entry(fields: Mapping[str, str]) -> dict[str, Any] | None:
    """The change a stream entry's fields carry; None if it is missing or not an object."""
    try:
        value = json.loads(fields.get(CHANGE_FIELD, "{}"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- Lua -----------------------------------------------------------------------------------

#: Every field name a script may use, as ``$NAME`` in the script text.
LUA_FIELDS: dict[str, str] = {
    "AS_OF_SEQ": SessionRow.AS_OF_SEQ,
    "AS_OF_OFFSET": SessionRow.AS_OF_OFFSET,
    "OWNER": LeaseFields.OWNER,
    "EPOCH": LeaseFields.EPOCH,
    "EXPIRES_AT": LeaseFields.EXPIRES_AT,
    "NEXT_SEQ": LeaseFields.NEXT_SEQ,
    "LAST_ID": LeaseFields.LAST_ID,
    "VSEQ": InlineViewFields.SEQ,
    "VID": InlineViewFields.ID,
    "VCOUNT": InlineViewFields.COUNT,
    "VFIELD": InlineViewFields.FIELD,
    "PARTITION": LogIndexFields.PARTITION,
    "FIRST_OFFSET": LogIndexFields.FIRST_OFFSET,
    "LAST_OFFSET": LogIndexFields.LAST_OFFSET,
    "CLEAN": LogIndexFields.CLEAN,
    "RUNS": LogIndexFields.RUNS,
    "RUN_LO": LogIndexFields.RUN_LO,
    "RUN_HI": LogIndexFields.RUN_HI,
    "CHANGE": CHANGE_FIELD,
}

_QUOTED = re.compile(r"'[^']*'")


def lua(source: str) -> str:
    """Render a script whose field names are written ``$NAME`` (see :data:`LUA_FIELDS`).

    Each becomes a quoted Lua string; an unknown ``$NAME`` raises ``KeyError`` at import
    time of the adapter. ``tests/unit/test_rows.py`` checks that every quoted literal of
    every rendered script is a Redis command, a flag, or a field named here.
    """
    return Template(source).substitute({k: f"'{v}'" for k, v in LUA_FIELDS.items()})


def lua_literals(source: str) -> set[str]:
    """The quoted string literals of a script (commands, flags and field names)."""
    return {m[1:-1] for m in _QUOTED.findall(source)}
