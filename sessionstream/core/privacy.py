"""Data classes of event data, sealing and opening content (seed §4.6.1, §4.13).

Every data field of every catalog type is either **metadata** (stays clear: ids, seqs,
status, usage counts, token estimates, compaction ranges…) or **content** of one data
class with its own retention:

* ``raw``: streamed assistant chunks, executed tool-call arguments, turn-end details,
  full tool results spilled to the attachment store;
* ``surface``: what a model saw: user and assistant messages, tool results as shown
  (with attachment head/tail), compaction summaries, dynamic-context snapshots;
* ``business``: structured business state values (todo text, plan steps, goal, metric,
  filters, time range, ambiguities);
* ``reasoning``: a model's own reasoning as its API returned it (Anthropic thinking
  blocks with their signatures, redacted thinking, OpenAI Responses reasoning items
  with their encrypted content and summaries): replayed only to the API that produced
  it, never shown to another provider, a summarizer or a fork that did not inherit it.

The table is :data:`CLASSIFICATION`; ``python -m sessionstream.core.privacy`` renders
it into docs/operations.md (sync-tested), and a unit test checks that every field the
catalog declares is classified, so a new field cannot slip through unclassified. A data
field the catalog does not declare (extra fields are allowed) is content of the type's
*default class* (:func:`default_class`): unknown means sealed, never clear.

Sealing (:func:`split`) takes an event's data apart: the clear data keeps every metadata
field and a *placeholder* in place of every content field (chosen from the field's
declared kind, never from its value, so the clear data stays valid for the catalog and
for providers); the content values go, per class, into a :class:`SealedPart` encrypted
with that session's data key for the class. Opening (:func:`open_data`) puts the values
back; a part whose key is shredded or missing keeps a placeholder that says so
(:data:`DELETED_TEXT`, :data:`UNAVAILABLE_TEXT`), never garbage and never an exception.

The AEAD itself (AES-256-GCM) is an edge (``sessionstream.governance``): the core
defines the :class:`Aead` and :class:`ContentKeys` ports and the exact bytes every
implementation must agree on — :func:`associated_data` and the plaintext layout
(:func:`part_plaintext`) — documented in docs/operations.md ("AEAD format").
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from sessionstream.core.catalog import Catalog, EventType, F, default_catalog
from sessionstream.core.errors import InvalidData, MovedCiphertext, SealedContentError
from sessionstream.core.jsonvalue import (
    FrozenList,
    FrozenMap,
    JsonValue,
    canonical_dumps,
    freeze,
    loads_frozen,
)
from sessionstream.core.sealed import DataClass, SealedPart

ALL_CLASSES: tuple[DataClass, ...] = (DataClass.RAW, DataClass.SURFACE, DataClass.BUSINESS,
                                     DataClass.REASONING)

#: Placeholder text of sealed content on the wire (what a reader that does not open
#: content, e.g. an older build, shows).
SEALED_TEXT = "[encrypted content]"
#: Placeholder text of content whose data key was destroyed (deletion or retention).
DELETED_TEXT = "[content deleted]"
#: Placeholder text of content whose key this reader does not have.
UNAVAILABLE_TEXT = "[content unavailable]"
#: Placeholder text of a parent's content a fork did not inherit (its class was not asked).
NOT_INHERITED_TEXT = "[content not inherited]"

_M = None  # metadata, in the table below
_R, _S, _B, _Z = DataClass.RAW, DataClass.SURFACE, DataClass.BUSINESS, DataClass.REASONING

#: Every data field the catalog declares, by type: ``None`` = metadata, else its class.
#: Nested fields are named ``parent.child`` (an object) and ``parent[].child`` (each item
#: of a list); a parent listed with nested entries is a container, classified by them.
CLASSIFICATION: Mapping[str, Mapping[str, DataClass | None]] = {
    "session/start": {
        "format_version": _M, "tenant": _M, "lineage": _M, "lineage.parent_session": _M,
        "lineage.seed_length": _M, "lineage.delegation_depth": _M,
        "lineage.inherited_classes": _M,
    },
    "session/end-seed": {"reason": _M, "seed_length": _M},
    "session/shred": {"classes": _M, "scope": _M, "principal": _M, "reason": _M,
                      "shredded_at": _M},
    "session/hold": {"action": _M, "principal": _M, "reason": _M},
    "turn/start": {},
    "turn/end": {"reason": _M, "detail": _R},
    "step/start": {},
    "step/end": {},
    "user/message": {"content": _S, "steering": _M, "provider_fields": _S},
    "request/header": {
        "provider": _M, "model": _M, "reasoning_effort": _M, "max_tokens": _M,
        "defaults_source": _M,
    },
    "assistant/chunk": {"text": _R, "index": _M},
    "assistant/message": {
        "content": _S, "tool_calls": _M, "tool_calls[].call_id": _M, "tool_calls[].name": _M,
        "tool_calls[].arguments": _S, "stop_reason": _M, "usage": _M, "usage.input_tokens": _M,
        "usage.output_tokens": _M, "provider": _M, "model": _M, "reasoning": _Z,
        "blocks": _M, "provider_fields": _S,
    },
    "tool/call": {"call_id": _M, "name": _M, "arguments": _R, "idempotency_key": _M},
    "tool/result": {
        "call_id": _M, "status": _M, "content": _S, "attachment": _M, "attachment.sha256": _M,
        "attachment.size": _M, "attachment.media_type": _M, "attachment.head": _S,
        "attachment.tail": _S, "operation_id": _M, "version": _M, "provider_fields": _S,
    },
    "context/snapshot": {"snapshot_id": _M, "content": _S, "sources": _M},
    # the content is the memory's, sealed under the memory version's own key (``key``)
    "memory/recall": {"recall_id": _M, "rank": _M, "namespace": _M, "query": _S,
                      "ref": _M, "kind": _M, "score": _M, "key": _M,
                      "content": DataClass.MEMORY},
    "compaction/start": {"compaction_id": _M, "trigger": _M},
    "compaction/summary": {
        "compaction_id": _M, "first_position": _M, "last_position": _M, "shadowed_seqs": _M,
        "tokens_before": _M, "tokens_after": _M, "summarizer": _M, "summarizer.provider": _M,
        "summarizer.model": _M, "summarizer.config": _M,
    },
    "compaction/end": {"compaction_id": _M, "outcome": _M, "reason": _M},
    "todo/add": {"id": _M, "text": _B, "status": _M},
    "todo/update": {"id": _M, "status": _M},
    "plan/set": {"steps": _B, "plan_hash": _M},
    "goal/set": {"goal": _B},
    "business/metric": {"id": _B, "definition_version": _M, "status": _M, "source_turn": _M},
    "business/filters": {"filters": _B},
    "business/time": {"time": _B},
    "business/ambiguities": {"ambiguities": _B},
    "business/plan": {"plan_hash": _M},
    "business/approval": {"approval": _M},
}

#: What losing each class means for reconstructability (docs/operations.md).
LOSS: Mapping[DataClass, str] = {
    DataClass.RAW: "the stream of chunks, executed tool arguments (`tool/call`), "
    "turn-end details and full spilled tool output are gone; every model request stays "
    "reconstructable (the surface does not use raw content), the audit of what a tool "
    "received is not. The arguments the model asked for stay: they are surface "
    "(`assistant/message` `tool_calls[].arguments`, most often the same values), so "
    "deleting a tool's arguments everywhere takes `raw` and `surface`",
    DataClass.SURFACE: "requests that contained the messages, tool results, summaries or "
    "snapshots are no longer reconstructable: the surface rebuilds with placeholders "
    "(tool calls stay paired), so a provider still accepts it, but the model would see "
    "different text",
    DataClass.BUSINESS: "business-state values (todo text, plan, goal, metric, filters, "
    "time range) read as placeholders; their status, versions and approval stay",
    DataClass.REASONING: "the model's recorded reasoning reads as an empty list: requests "
    "are rebuilt without it (an Anthropic thinking tool loop continues with thinking "
    "off for the open round, with a note); messages, calls and results stay",
}


#: The data class of each built-in projection unit's views and states: content a unit
#: folds is sealed in Redis with the session's key of that class; None: metadata only.
UNIT_CLASSES: Mapping[str, DataClass | None] = {
    "surface": DataClass.SURFACE, "turns": DataClass.RAW, "business": DataClass.BUSINESS,
    "todo": DataClass.BUSINESS, "plan": DataClass.BUSINESS, "goal": DataClass.BUSINESS,
    "tools": None, "usage": None, "compaction": None, "index": None, "rejections": None,
}


def unit_class(unit_key: str) -> DataClass | None:
    """The class a unit's rows are sealed with; a unit this table does not know (a
    plugin's) is treated as surface content: sealed, never clear."""
    return UNIT_CLASSES.get(unit_key, DataClass.SURFACE)


def default_class(event_type: EventType | None, name: str = "") -> DataClass:
    """The class of a data field the catalog does not declare (sealed, never clear)."""
    if event_type is None:
        return DataClass.RAW
    if event_type.model_visible:
        return DataClass.SURFACE
    if event_type.namespace in ("session", "turn", "step", "request", "assistant", "tool",
                                "context", "compaction", "user"):
        return DataClass.RAW
    return DataClass.BUSINESS


# ---------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class PlanLeaf:
    """A content field of one type: where it is and how its placeholder looks."""

    parts: tuple[str, ...]  # e.g. ("tool_calls", "[]", "arguments")
    data_class: DataClass
    kinds: tuple[str, ...]  # the catalog's declared kinds ("str", "obj", …)


@dataclass(frozen=True)
class SealingPlan:
    """Which fields of one event type are content, of which class: what :func:`split`
    follows (and the native append path, through :meth:`native_args`)."""

    leaves: tuple[PlanLeaf, ...]
    known_top: frozenset[str]  # top-level names the catalog declares
    extra_class: DataClass  # the class of any field the catalog does not declare

    def native_args(self) -> tuple[list[tuple[list[str], str, str]], list[str], str, str]:
        """The plan as plain values for the native append path (which seals exactly as
        :func:`split` + :func:`seal_parts` do): the content leaves (parts, class,
        canonical text of the placeholder), the top-level names the catalog knows, and
        the class and placeholder text of any other field."""
        leaves = [(list(leaf.parts), leaf.data_class.value,
                   canonical_dumps(placeholder(leaf.kinds))) for leaf in self.leaves]
        return (leaves, sorted(self.known_top), self.extra_class.value,
                canonical_dumps(placeholder(("any",))))


def _spec_at(schema_fields: Mapping[str, F], parts: Sequence[str]) -> F | None:
    fields: Mapping[str, F] = schema_fields
    spec: F | None = None
    for part in parts:
        if part == "[]":
            if spec is None or spec.items is None:
                return None
            spec = spec.items
            fields = spec.obj.fields if spec.obj is not None else {}
            continue
        spec = fields.get(part)
        if spec is None:
            return None
        fields = spec.obj.fields if spec.obj is not None else {}
    return spec


def _split_name(name: str) -> tuple[str, ...]:
    out: list[str] = []
    for piece in name.split("."):
        if piece.endswith("[]"):
            out += [piece[:-2], "[]"]
        else:
            out.append(piece)
    return tuple(out)


_PLANS: dict[tuple[int, str], SealingPlan] = {}


def sealing_plan(catalog: Catalog | None, type_name: str) -> SealingPlan:
    """The sealing plan of ``type_name`` in ``catalog`` (None: the default catalog),
    built once per catalog and type."""
    catalog = catalog if catalog is not None else _default()
    key = (id(catalog), type_name)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    etype = catalog.get(type_name)
    table = CLASSIFICATION.get(type_name, {})
    schema = etype.schema.fields if etype is not None else {}
    leaves = []
    for name, cls in table.items():
        if cls is None:
            continue
        parts = _split_name(name)
        spec = _spec_at(schema, parts)
        leaves.append(PlanLeaf(parts, cls, spec.kinds() if spec is not None else ("any",)))
    known = frozenset(schema) | frozenset(n.split(".")[0].removesuffix("[]") for n in table)
    plan = SealingPlan(tuple(leaves), known, default_class(etype))
    if len(_PLANS) > 1024:
        _PLANS.clear()
    _PLANS[key] = plan
    return plan


def placeholder(kinds: Sequence[str], text: str = SEALED_TEXT) -> JsonValue:
    """The clear stand-in for a content value of the declared kinds.

    Text where text is allowed (messages, tool results), else an empty object or list,
    else null: always a value the catalog accepts, never derived from the content.
    """
    if "str" in kinds or "any" in kinds:
        return text
    if "obj" in kinds:
        return {}
    if "list" in kinds:
        return []
    return None


# ---------------------------------------------------------------------- pointers


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer(*tokens: str | int) -> str:
    """An RFC 6901 JSON pointer (``/tool_calls/0/arguments``)."""
    return "".join("/" + _escape(str(t)) for t in tokens)


def pointer_tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise SealedContentError(f"sealed path {path!r} is not a JSON pointer")
    return [_unescape(t) for t in path[1:].split("/")]


def _walk(value: Any, parts: tuple[str, ...], prefix: tuple[str | int, ...]
          ) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if not parts:
        yield prefix, value
        return
    head, rest = parts[0], parts[1:]
    if head == "[]":
        if isinstance(value, list | FrozenList):
            for i, item in enumerate(value):
                yield from _walk(item, rest, (*prefix, i))
        return
    if isinstance(value, Mapping) and head in value:
        yield from _walk(value[head], rest, (*prefix, head))


# ------------------------------------------------------------------------ split


@dataclass(frozen=True)
class ContentPart:
    """The content of one class taken out of one event: JSON pointers and their values."""

    data_class: DataClass
    paths: tuple[str, ...]
    values: tuple[JsonValue, ...]


@dataclass(frozen=True)
class Split:
    """An event's data taken apart: clear data (placeholders in place) + content parts."""

    clear: JsonValue
    parts: tuple[ContentPart, ...]


def split(
    type_name: str, data: JsonValue, catalog: Catalog | None = None,
    classes: Iterable[DataClass] = ALL_CLASSES, *, text: str = SEALED_TEXT,
) -> Split:
    """Take the content of ``classes`` out of ``data`` (metadata and other classes stay).

    The clear data keeps the shape the catalog requires: each content value is replaced
    by :func:`placeholder` of its declared kinds. Null content stays null (nothing to hide).
    """
    cat = catalog if catalog is not None else _default()
    plan = sealing_plan(cat, type_name)
    wanted = frozenset(classes)
    if not isinstance(data, Mapping):
        return Split(data, ())
    found: dict[DataClass, tuple[list[str], list[JsonValue]]] = {}
    edits: list[tuple[tuple[str | int, ...], JsonValue]] = []
    for leaf in plan.leaves:
        if leaf.data_class not in wanted:
            continue
        for where, value in _walk(data, leaf.parts, ()):
            if value is None:
                continue
            paths, values = found.setdefault(leaf.data_class, ([], []))
            paths.append(pointer(*where))
            values.append(value)
            edits.append((where, placeholder(leaf.kinds, text)))
    if plan.extra_class in wanted:
        for name in data:
            if name not in plan.known_top and data[name] is not None:
                paths, values = found.setdefault(plan.extra_class, ([], []))
                paths.append(pointer(name))
                values.append(data[name])
                edits.append(((name,), placeholder(("any",), text)))
    if not edits:
        return Split(data, ())
    clear: JsonValue = data
    for where, value in edits:
        clear = _with(clear, where, _frozen(value))
    parts = tuple(
        ContentPart(cls, tuple(found[cls][0]), tuple(found[cls][1]))
        for cls in (*ALL_CLASSES, DataClass.MEMORY) if cls in found
    )
    return Split(clear, parts)


def _frozen(value: JsonValue) -> JsonValue:
    kind = type(value)
    return freeze(value) if kind is dict or kind is list else value


def _with(container: Any, where: Sequence[str | int], value: JsonValue) -> JsonValue:
    """A frozen copy of ``container`` with ``value`` at ``where``; only the containers on
    the path are copied (the rest is shared: frozen values never change)."""
    head = where[0]
    if isinstance(container, list | FrozenList):
        items = list(container)
        index = int(head)
        items[index] = value if len(where) == 1 else _with(items[index], where[1:], value)
        return FrozenList(items)
    if not isinstance(container, Mapping):
        raise TypeError(type(container).__name__)
    copy = dict(container)
    copy[head] = value if len(where) == 1 else _with(copy[head], where[1:], value)
    return FrozenMap(copy)


def merge(clear: JsonValue, replacements: Iterable[tuple[str, JsonValue]]) -> JsonValue:
    """``clear`` with each JSON pointer set to its value (a new, plain value)."""
    out = clear
    for path, value in replacements:
        try:
            out = _with(out, pointer_tokens(path), _frozen(value))
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise SealedContentError(
                f"sealed path {path!r} does not exist in the event's clear data ({exc})"
            ) from None
    return out


def placeholder_at(type_name: str, path: str, text: str,
                   catalog: Catalog | None = None) -> JsonValue:
    """The placeholder for the content at ``path`` of a ``type_name`` event."""
    cat = catalog if catalog is not None else _default()
    etype = cat.get(type_name)
    tokens = tuple("[]" if t.isdigit() else t for t in pointer_tokens(path))
    spec = _spec_at(etype.schema.fields, tokens) if etype is not None else None
    return placeholder(spec.kinds() if spec is not None else ("any",), text)


# ------------------------------------------------------------------ sealed parts


AD_MAGIC = b"sessionstream-aead-v1"
_LEN = struct.Struct(">I")
_SEQ = struct.Struct(">q")


def associated_data(
    tenant: str, key_session: str, seq: int, origin_event_id: str, event_type: str,
    data_class: str, paths: Sequence[str],
) -> bytes:
    """The AEAD associated data of one sealed part (byte layout in docs/operations.md).

    ``AD_MAGIC`` then, each as a 4-byte big-endian length + UTF-8 bytes: tenant,
    key_session, origin_event_id, event_type, data_class, the paths joined by ``\\n``;
    then seq as an 8-byte big-endian signed integer. Changing any of them (moving the
    ciphertext to another event, session, seq, class or field) fails authentication.
    """
    pieces = [AD_MAGIC]
    for text in (tenant, key_session, origin_event_id, event_type, data_class,
                 "\n".join(paths)):
        raw = text.encode("utf-8")
        pieces.append(_LEN.pack(len(raw)))
        pieces.append(raw)
    pieces.append(_SEQ.pack(seq))
    return b"".join(pieces)


#: A sealed part's plaintext is its values' canonical JSON array — or, once it is long
#: enough to gain, that text compressed: the framing byte 0x00 (no JSON text starts
#: with it), the method 0x01 (raw DEFLATE, RFC 1951, zlib level 6), then the stream.
#: Compressing before sealing is what keeps the topic's compression: AES-GCM output
#: looks random to the producer's lz4.
FRAMED = 0x00
DEFLATE = b"\x00\x01"
#: Below this many bytes of JSON a part is sealed as is.
COMPRESS_FROM = 64
#: An opened part inflates to at most this many bytes (a record is at most a few MiB).
PLAINTEXT_LIMIT = 64 * 1024 * 1024


def compress_plaintext(text: bytes) -> bytes:
    """The plaintext of a part's JSON ``text``: DEFLATE-framed when that is shorter. The
    one implementation: the native append path calls it too, so records are the same
    bytes whichever path sealed them."""
    if len(text) < COMPRESS_FROM:
        return text
    packed = zlib.compress(text, 6, -15)
    return DEFLATE + packed if len(packed) + len(DEFLATE) < len(text) else text


def plaintext_json(plaintext: bytes) -> bytes:
    """The JSON text of an opened part's plaintext (inflated when it is framed)."""
    if not plaintext or plaintext[0] != FRAMED:
        return plaintext
    if plaintext[:2] != DEFLATE:
        raise SealedContentError(f"opened content has an unknown framing "
                                 f"(method {plaintext[1:2].hex() or 'missing'})")
    inflater = zlib.decompressobj(-15)
    try:
        text = inflater.decompress(plaintext[2:], PLAINTEXT_LIMIT)
    except zlib.error as exc:
        raise SealedContentError(f"opened content does not inflate: {exc}") from None
    if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise SealedContentError("opened content is not one whole DEFLATE stream within "
                                 f"{PLAINTEXT_LIMIT} bytes")
    return text


def part_plaintext(values: Sequence[JsonValue]) -> bytes:
    """The plaintext of a sealed part: canonical JSON array of the values, path order
    (:func:`compress_plaintext`)."""
    return compress_plaintext(canonical_dumps(list(values)).encode("utf-8"))


def part_values(plaintext: bytes, count: int) -> list[JsonValue]:
    """The values of an opened part: lossless JSON (checked as the codec checks data)."""
    try:
        values = loads_frozen(plaintext_json(plaintext).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, InvalidData, RecursionError) as exc:
        raise SealedContentError(f"opened content is not lossless JSON: {exc}") from None
    if not isinstance(values, list | FrozenList) or len(values) != count:
        raise SealedContentError("opened content does not match its paths")
    return list(values)


class Aead(Protocol):
    """An authenticated cipher (the edge implements AES-256-GCM, 12-byte nonces)."""

    def seal(self, key: bytes, plaintext: bytes, ad: bytes) -> tuple[bytes, bytes]:
        """(nonce, ciphertext with tag)."""
        ...

    def open(self, key: bytes, nonce: bytes, ciphertext: bytes, ad: bytes) -> bytes:
        """The plaintext; raises :class:`~sessionstream.core.errors.MovedCiphertext`
        when authentication fails (wrong key, tampered or moved ciphertext)."""
        ...


class KeyState(StrEnum):
    ACTIVE = "active"
    SHREDDED = "shredded"  # destroyed on purpose (deletion, retention)
    MISSING = "missing"  # never created here, or this node lacks the tenant key


@dataclass(frozen=True)
class KeyLookup:
    """A data key, or why there is none (with when it was shredded)."""

    state: KeyState
    key: bytes | None = None
    shredded_at: int | None = None  # epoch ms


class ContentKeys(Protocol):
    """Data keys of sessions, per class (the key store's reading side)."""

    def lookup(self, tenant: str, session_id: str, data_class: DataClass) -> KeyLookup: ...

    def data_key(self, tenant: str, session_id: str, data_class: DataClass) -> bytes:
        """The active data key, created on first use; raises if it was shredded."""
        ...


# ---------------------------------------------------------------------- opening


@dataclass(frozen=True)
class Unopened:
    """A sealed part a reader could not open: its content reads as placeholders."""

    seq: int
    data_class: DataClass
    state: KeyState
    shredded_at: int | None
    paths: tuple[str, ...]
    key_session: str


@dataclass(frozen=True)
class Opened:
    data: JsonValue
    unopened: tuple[Unopened, ...]


def seal_parts(
    aead: Aead, keys: ContentKeys, *, tenant: str, session_id: str, seq: int, event_id: str,
    type_name: str, parts: Iterable[ContentPart], memory_key: str | None = None,
) -> tuple[SealedPart, ...]:
    """Encrypt each content part with the session's data key of its class (``memory``
    content: with the memory key ``memory_key``, :func:`memory_key_of`)."""
    out = []
    for part in parts:
        key_session = session_id
        if part.data_class is DataClass.MEMORY:
            if memory_key is None:
                raise SealedContentError(f"{type_name}: memory content needs the memory's "
                                         "key name (the event's 'key' field)")
            key_session = memory_key
        key = keys.data_key(tenant, key_session, part.data_class)
        ad = associated_data(tenant, key_session, seq, event_id, type_name,
                             part.data_class.value, part.paths)
        nonce, ct = aead.seal(key, part_plaintext(part.values), ad)
        out.append(SealedPart(part.data_class, key_session, event_id, part.paths, nonce, ct))
    return tuple(out)


def memory_key_of(type_name: str, data: Any) -> str | None:
    """The memory key a ``memory/recall`` event's content is sealed under (its ``key``)."""
    if type_name != "memory/recall" or not isinstance(data, Mapping):
        return None
    key = data.get("key")
    return key if isinstance(key, str) and key.startswith("mem/") else None


def open_data(
    aead: Aead, keys: ContentKeys, *, tenant: str, session_id: str, seq: int, event_id: str,
    type_name: str, clear: JsonValue, sealed: Sequence[SealedPart],
    seed_length: int | None = None, catalog: Catalog | None = None,
) -> Opened:
    """``clear`` with every sealed part put back, or replaced by a reason's placeholder.

    A part binds the event it was sealed for: ``key_session``/``origin_event_id`` are
    this event's, or (a fork's inherited seed) an ancestor's. When the session's
    ``seed_length`` is known (from its ``session/start`` lineage; 0 for a session that is
    no fork) an ancestor's part is accepted only for ``seq < seed_length``; when it is
    not known (``None``) the associated data alone binds it (ancestor session, seq and
    event). A part that is not this event's own otherwise, and any authentication
    failure, raises :class:`MovedCiphertext`: moved content is refused, never shown.
    A shredded or missing key is not an error: its paths read :data:`DELETED_TEXT` /
    :data:`UNAVAILABLE_TEXT`.
    """
    replacements: list[tuple[str, JsonValue]] = []
    unopened: list[Unopened] = []
    memory_key = memory_key_of(type_name, clear)
    for part in sealed:
        own = part.key_session == session_id and part.origin_event_id == event_id
        inherited = part.key_session != session_id and (
            seed_length is None or seq < seed_length)
        if part.data_class is DataClass.MEMORY:  # a copy of a memory: under its key only
            own = part.key_session == memory_key and part.origin_event_id == event_id
            inherited = False
        elif part.key_session == memory_key:
            own = inherited = False
        if not own and not inherited:
            raise MovedCiphertext(
                f"session {session_id!r} seq {seq}: sealed {part.data_class.value} content "
                f"was sealed for session {part.key_session!r} event {part.origin_event_id!r}"
            )
        found = keys.lookup(tenant, part.key_session, part.data_class)
        if found.state is not KeyState.ACTIVE or found.key is None:
            text = DELETED_TEXT if found.state is KeyState.SHREDDED else UNAVAILABLE_TEXT
            replacements += [(p, placeholder_at(type_name, p, text, catalog)) for p in part.paths]
            unopened.append(Unopened(seq, part.data_class, found.state, found.shredded_at,
                                     part.paths, part.key_session))
            continue
        ad = associated_data(tenant, part.key_session, seq, part.origin_event_id, type_name,
                             part.data_class.value, part.paths)
        plaintext = aead.open(found.key, part.nonce, part.ciphertext, ad)
        values = part_values(plaintext, len(part.paths))
        replacements += list(zip(part.paths, values, strict=True))
    if not replacements:
        return Opened(clear, ())
    return Opened(merge(clear, replacements), tuple(unopened))


# ------------------------------------------------------------ reconstructability


@dataclass(frozen=True)
class LostSource:
    """Content of one event that can no longer be read: which event, class, when."""

    seq: int
    type: str
    data_class: DataClass
    shredded_at: int | None  # epoch ms (None: the key is missing, not shredded)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "data_class": self.data_class.value,
                "shredded_at": self.shredded_at}


@dataclass(frozen=True)
class Reconstructability:
    """Seed §4.6.1: which model requests can still be rebuilt exactly, and why not.

    ``requests``: each ``request/header`` seq → whether the surface it was built from is
    still fully readable. Only ``surface`` content enters a request; ``raw`` and
    ``business`` losses are listed (audit and state), they do not make a request
    unreconstructable.
    """

    shredded: tuple[Mapping[str, Any], ...]  # the session/shred audit events
    lost: tuple[LostSource, ...]
    requests: Mapping[int, bool]

    @property
    def fully_reconstructable(self) -> bool:
        return all(self.requests.values()) and not any(
            s.data_class is DataClass.SURFACE for s in self.lost)

    def to_json(self) -> dict[str, Any]:
        return {"fully_reconstructable": self.fully_reconstructable,
                "shredded": [dict(s) for s in self.shredded],
                "lost": [s.to_json() for s in self.lost],
                "requests": {str(k): v for k, v in sorted(self.requests.items())},
                "not_reconstructable": sorted(k for k, v in self.requests.items() if not v)}


def reconstructability(events: Sequence[Any], unopened: Sequence[Unopened] = (),
                       catalog: Catalog | None = None) -> Reconstructability:
    """What a log still lets us rebuild, from its audit events and what a reader could
    not open (``unopened``, exact); without the latter (a file read elsewhere) every
    content field of a shredded class written before the shred counts as lost."""
    audits = [e for e in events if e.type == "session/shred"]
    shredded = tuple({"seq": e.seq, "classes": list(e.data.get("classes", ())),
                      "scope": e.data.get("scope"), "principal": e.data.get("principal"),
                      "reason": e.data.get("reason"), "shredded_at": e.data.get("shredded_at")}
                     for e in audits)
    types = {e.seq: e.type for e in events}
    lost: dict[tuple[int, DataClass], LostSource] = {}
    for u in unopened:
        lost[(u.seq, u.data_class)] = LostSource(u.seq, types.get(u.seq, "?"), u.data_class,
                                                 u.shredded_at)
    if not unopened:
        for audit in audits:
            classes = {DataClass(c) for c in audit.data.get("classes", ())}
            for e in events:
                if e.seq >= audit.seq:
                    break
                for part in split(e.type, e.data, catalog, classes).parts:
                    lost.setdefault((e.seq, part.data_class), LostSource(
                        e.seq, e.type, part.data_class, audit.data.get("shredded_at")))
    surface_lost = sorted(s.seq for s in lost.values() if s.data_class is DataClass.SURFACE)
    requests = {e.seq: not any(seq < e.seq for seq in surface_lost)
                for e in events if e.type == "request/header"}
    return Reconstructability(shredded, tuple(sorted(lost.values(),
                                                     key=lambda s: (s.seq, s.data_class))),
                              requests)


# ------------------------------------------------------------------------- docs


def rows(catalog: Catalog | None = None) -> list[tuple[str, list[str], dict[str, list[str]]]]:
    """(type, metadata fields, {class: content fields}) for every catalog type."""
    cat = catalog if catalog is not None else _default()
    out = []
    for etype in cat:
        table = CLASSIFICATION.get(etype.name, {})
        meta = [n for n, c in table.items() if c is None]
        content: dict[str, list[str]] = {}
        for name, cls in table.items():
            if cls is not None:
                content.setdefault(cls.value, []).append(name)
        out.append((etype.name, meta, content))
    return out


BEGIN = "<!-- data-classes:begin -->"
END = "<!-- data-classes:end -->"


def render(catalog: Catalog | None = None) -> str:
    """The data-class table embedded in docs/operations.md."""
    out = [
        BEGIN,
        "<!-- generated from sessionstream.core.privacy.CLASSIFICATION by "
        "`python -m sessionstream.core.privacy`; do not edit by hand -->",
        "",
        "| type | metadata (clear) | raw | surface | business | extra fields |",
        "|---|---|---|---|---|---|",
    ]
    cat = catalog if catalog is not None else _default()
    for name, meta, content in rows(cat):
        cells = [", ".join(f"`{n}`" for n in meta) or "—"]
        cells += [", ".join(f"`{n}`" for n in content.get(c.value, [])) or "—"
                  for c in ALL_CLASSES]
        cells.append(default_class(cat.get(name)).value)
        out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    out += ["", "| class | what its loss means |", "|---|---|"]
    out += [f"| `{c.value}` | {LOSS[c]} |" for c in ALL_CLASSES]
    out.append(END)
    return "\n".join(out) + "\n"


def embedded(text: str) -> str:
    """The generated block inside ``text`` (for the sync test)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0:
        return ""
    return text[start:end + len(END)] + "\n"


def update(text: str) -> str:
    """``text`` with its generated block replaced by the current one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0:
        raise ValueError("no data-classes block markers in the text")
    return text[:start] + render().rstrip("\n") + text[end + len(END):]


_DEFAULT: list[Catalog] = []


def _default() -> Catalog:
    if not _DEFAULT:
        _DEFAULT.append(default_catalog())
    return _DEFAULT[0]


if __name__ == "__main__":  # pragma: no cover - a docs helper
    import sys
    from pathlib import Path

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/operations.md")
    target.write_text(update(target.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated the data-class table in {target}")
