"""Avro codec for the event envelope — the only module of the core importing fastavro.

Wire form: Avro single-object encoding, ``C3 01`` + the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema + the schemaless Avro body
(docs/adr/0002-avro-single-object-encoding.md). Every schema version in
``schemas/`` is known by its fingerprint; a record is resolved from its writer
schema to the newest one. Every failure leaves this module as a
:class:`~sessionstream.core.errors.CodecError`, never as a fastavro/struct exception.

Trust boundary for ``data``: the bytes are not trusted (any producer can write a
record with our fingerprint), so ``decode`` parses the text in full and checks it is
lossless JSON *before* returning an Event; a bad one is a ``CorruptRecord`` here, at
decode, where readers send it to the dead-letter topic — never later, in a projection.
What decode skips: freezing arrays (done on first access of ``Event.data``, from the
already-checked private value) and re-rendering the text (the Event keeps the record's
text: re-encoding a decoded event is byte-identical, even for valid JSON that is not
canonical). Equality compares values, never texts.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from sessionstream.core.catalog import Catalog
from sessionstream.core.errors import (
    CodecError,
    CorruptRecord,
    InvalidData,
    UnknownRequiredEvent,
    UnsupportedFormat,
)
from sessionstream.core.events import FORMAT_VERSION, Event, SurfaceOp, Writer, decoded_event
from sessionstream.core.jsonvalue import canonical_dumps, loads_checked
from sessionstream.core.sealed import MalformedSealedPart, SealedPart

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8  # magic + CRC-64-AVRO fingerprint
#: Schema Registry ("Confluent") framing: magic byte 0 + 4-byte big-endian schema id.
CONFLUENT_MAGIC = 0
CONFLUENT_HEADER_LEN = 5
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
_FILE_RE = re.compile(r"session_event\.v(\d+)\.avsc")

# What a malformed body can make fastavro (C or pure-Python reader) raise. Anything
# else is a bug in this module and should surface as one.
_READ_ERRORS = (
    EOFError,
    ValueError,  # includes UnicodeDecodeError and fastavro's SchemaResolutionError
    IndexError,  # enum or union index out of range
    KeyError,
    TypeError,
    OverflowError,
    MemoryError,  # a garbage length prefix asking for an absurd allocation
    AttributeError,
)
_WRITE_ERRORS = (ValueError, TypeError, OverflowError, KeyError, AttributeError)


@dataclass(frozen=True)
class SchemaVersion:
    """One known envelope schema: its fingerprint and the parsed form used on the wire."""

    fingerprint: bytes
    canonical: str
    parsed: Any  # fastavro parsed schema, logical types stripped (see _strip_logical)


def _strip_logical(schema: Any) -> Any:
    """Drop ``logicalType`` annotations so ``time`` stays the int the Event holds.

    The parsing canonical form (hence the fingerprint) excludes logical types, and
    the bytes are identical; skipping the datetime round trip is exact and faster.
    """
    if isinstance(schema, dict):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical(v) for v in schema]
    return schema


def load_schema(schema: Mapping[str, Any]) -> SchemaVersion:
    """Parse an envelope schema (the JSON of an ``.avsc``) and fingerprint it."""
    raw = copy.deepcopy(dict(schema))
    canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(raw), _write_hint=False))
    fp = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
    parsed = parse_schema(_strip_logical(raw))
    return SchemaVersion(fingerprint=fp, canonical=canonical, parsed=parsed)


def schema_files(directory: Path = SCHEMA_DIR) -> list[Path]:
    """The ``session_event.vN.avsc`` files, oldest first."""
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _FILE_RE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


class _NotCompiled(Exception):
    """The schema uses a construct the compiled writer does not handle (use fastavro)."""


_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
#: Zigzag-varint bytes of the non-negative zigzag values below 2**14 (1 or 2 bytes).
_VARINT = [bytes([n]) if n < 128 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(1 << 14)]
#: Fields whose string values repeat across records (their encodings are cached).
_REPEATING = frozenset({"session_id", "type", "id", "turn_id", "step_id", "data_class",
                        "key_session"})
_CACHE_MAX = 4096

#: A compiled writer: (record value, header) -> the framed record.
RecordWriter = Callable[[Mapping[str, Any], bytes], bytes]


def _zigzag(v: int, lo: int = _LONG_MIN, hi: int = _LONG_MAX) -> bytes:
    if not isinstance(v, int):
        raise TypeError(f"{v!r} is not an integer")
    if not lo <= v <= hi:
        raise OverflowError(f"{v} does not fit the Avro type")
    n = (v << 1) ^ (v >> 63)
    if n < 16384:
        return _VARINT[n]
    out = bytearray()
    while n > 127:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag_int(v: int) -> bytes:
    return _zigzag(v, _INT_MIN, _INT_MAX)


def _cached(cache: dict[str, bytes], v: str) -> bytes:
    if not isinstance(v, str):
        raise TypeError(f"{type(v).__name__} is not a string")
    b = v.encode()
    enc = _zigzag(len(b)) + b
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[v] = enc
    return enc


def _not_bool(v: Any) -> None:
    raise TypeError(f"{v!r} is not a boolean")


def _not_bytes(v: Any) -> None:
    raise TypeError(f"{type(v).__name__} is not bytes")


class _Gen:
    """Generates the source of one function writing a value of a parsed schema exactly as
    fastavro's ``schemaless_writer`` does, for the constructs the envelope uses."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {"_V": _VARINT, "_zz": _zigzag, "_zzi": _zigzag_int,
                                    "_cached": _cached, "_not_bool": _not_bool,
                                    "_not_bytes": _not_bytes, "_MISSING": _MISSING}
        self.n = 0
        #: record name -> field -> expression on the object ("{}" is the object), for
        #: writing from objects rather than record dicts (see _compile_event).
        self.access: dict[str, dict[str, str]] = {}

    def var(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def long(self, x: str, d: int, *, known_int: bool = False) -> None:
        # Small non-negative values (seq, lengths, counts) from the table, inline.
        if not x.isidentifier():
            n = self.var("n")
            self.emit(d, f"{n} = {x}")
            x = n
        check = "" if known_int else f"type({x}) is int and "
        self.emit(d, f"ap(_V[{x} << 1] if {check}0 <= {x} < 8192 else _zz({x}))")

    def value(self, schema: Any, x: str, d: int, name: str) -> None:
        if isinstance(schema, str):
            if schema == "long":
                self.long(x, d)
            elif schema == "int":
                self.emit(d, f"ap(_V[{x} << 1] if type({x}) is int and 0 <= {x} < 8192 "
                             f"else _zzi({x}))")
            elif schema == "boolean":
                self.emit(d, f"if type({x}) is not bool: _not_bool({x})")
                self.emit(d, f'ap(b"\\x01" if {x} else b"\\x00")')
            elif schema == "string" and name in _REPEATING:
                cache = self.var("_c")
                self.env[cache] = {}
                self.emit(d, f"ap({cache}.get({x}) or _cached({cache}, {x}))")
            elif schema == "string":
                b = self.var("b")
                self.emit(d, f"{b} = {x}.encode()")
                self.long(f"len({b})", d, known_int=True)
                self.emit(d, f"ap({b})")
            elif schema == "bytes":
                self.emit(d, f"if not isinstance({x}, bytes | bytearray | memoryview): "
                             f"_not_bytes({x})")
                self.long(f"len({x})", d, known_int=True)
                self.emit(d, f"ap(bytes({x}))")
            else:
                raise _NotCompiled(schema)
            return
        if isinstance(schema, list):
            if len(schema) == 2 and schema[0] == "null" and isinstance(schema[1], str):
                self.emit(d, f"if {x} is None:")
                self.emit(d + 1, 'ap(b"\\x00")')
                self.emit(d, "else:")
                self.emit(d + 1, 'ap(b"\\x02")')
                self.value(schema[1], x, d + 1, name)
                return
            raise _NotCompiled(schema)
        if not isinstance(schema, dict):
            raise _NotCompiled(schema)
        kind = schema.get("type")
        if kind == "enum":
            table = self.var("_e")
            self.env[table] = {s: _zigzag(i) for i, s in enumerate(schema["symbols"])}
            self.emit(d, f"ap({table}[{x}])")
        elif kind == "array":
            y = self.var("y")
            self.emit(d, f"if {x}:")
            self.long(f"len({x})", d + 1, known_int=True)
            self.emit(d + 1, f"for {y} in {x}:")
            self.value(schema["items"], y, d + 2, name)
            self.emit(d, 'ap(b"\\x00")')
        elif kind == "record":
            access = self.access.get(str(schema.get("name", "")).rsplit(".", 1)[-1])
            for f in schema["fields"]:
                fx = self.var("f")
                if access is not None:
                    # Read the field straight from the object (an Event, its Writer, a
                    # SealedPart): no record dict is built. A field the object does not
                    # have takes its default (a newer schema's optional field).
                    expr = access.get(f["name"])
                    if expr is None and "default" not in f:
                        raise _NotCompiled(f["name"])
                    if expr is None:
                        default = self.var("_d")
                        self.env[default] = f["default"]
                        self.emit(d, f"{fx} = {default}")
                    else:
                        self.emit(d, f"{fx} = {expr.format(x)}")
                elif "default" in f:
                    default = self.var("_d")
                    self.env[default] = f["default"]
                    self.emit(d, f"{fx} = {x}.get({f['name']!r}, {default})")
                else:
                    self.emit(d, f"{fx} = {x}.get({f['name']!r}, _MISSING)")
                    self.emit(d, f"if {fx} is _MISSING: raise KeyError({f['name']!r})")
                self.value(f["type"], fx, d, f["name"])
        elif isinstance(kind, str | list) and set(schema) <= {"type", "__fastavro_parsed",
                                                               "__named_schemas"}:
            self.value(kind, x, d, name)
        else:
            raise _NotCompiled(schema)


_MISSING = object()

#: How the envelope's records read their fields from an Event, its Writer and its
#: SealedParts (the writer schema's fields absent here take their defaults).
_EVENT_ACCESS: dict[str, dict[str, str]] = {
    "SessionEvent": {
        **{n: "{}." + n for n in ("format_version", "session_id", "seq", "event_id", "time",
                                  "type", "source_event_seqs", "writer", "ignorable",
                                  "turn_id", "step_id", "prev_event_id", "sealed")},
        "data": "{}.data_json()",
        "surface_op": "{}.surface_op.value",
    },
    "Writer": {"id": "{}.id", "epoch": "{}.epoch"},
    "SealedPart": {
        **{n: "{}." + n for n in ("key_session", "origin_event_id", "paths", "nonce",
                                  "ciphertext")},
        "data_class": "{}.data_class.value",
    },
}


def _compile_event(schema: Any) -> Callable[[Event, bytes], bytes]:
    """Like :func:`_compile`, but the function reads an :class:`Event` itself (no record
    dict per event); _NotCompiled when the schema has a field the Event cannot fill."""
    gen = _Gen()
    gen.access = _EVENT_ACCESS
    if str(schema.get("name", "")).rsplit(".", 1)[-1] != "SessionEvent":
        raise _NotCompiled(schema.get("name"))
    writer: Callable[[Event, bytes], bytes] = _generate(gen, schema, "event writer")
    return writer


def _compile(schema: Any) -> RecordWriter:
    """A writer of records of ``schema`` (fastavro's parsed form), byte-identical to
    ``schemaless_writer`` for the constructs the envelope uses (_NotCompiled otherwise):
    one generated function, no call per field (about 2.5x faster than fastavro's
    generic writer on this envelope, see tests/unit/test_codec.py for the equality)."""
    gen = _Gen()
    return _generate(gen, schema, "envelope writer")


def _generate(gen: _Gen, schema: Any, name: str) -> Any:
    """Compile ``gen``'s one function writing ``schema`` after a header (both writers)."""
    gen.emit(0, "def write(v, header):")
    gen.emit(1, "parts = [header]")
    gen.emit(1, "ap = parts.append")
    gen.value(schema, "v", 1, "")
    gen.emit(1, 'return b"".join(parts)')
    namespace = dict(gen.env)
    exec(compile("\n".join(gen.lines), f"<sessionstream {name}>", "exec"), namespace)
    return namespace["write"]


class AvroCodec:
    """Encodes events with one schema version and decodes any known version.

    ``schemas`` are oldest first. ``read`` (default: the newest) is the schema
    records are resolved to; ``write`` (default: the newest) the one written, so
    that during a rolling upgrade writers keep the old schema until every reader
    knows the new one (schemas/README.md).
    """

    def __init__(
        self, schemas: Iterable[Mapping[str, Any]], *, read: int = -1, write: int = -1
    ) -> None:
        versions = [load_schema(s) for s in schemas]
        if not versions:
            raise CodecError("no envelope schema given")
        self._by_fp: dict[bytes, SchemaVersion] = {v.fingerprint: v for v in versions}
        if len(self._by_fp) != len(versions):
            raise CodecError("two envelope schema versions have the same fingerprint")
        self.reader = versions[read]
        self.writer = versions[write]
        self._header = MAGIC + self.writer.fingerprint
        # The writer schema compiled to plain Python (about twice as fast as fastavro's
        # generic writer on this envelope; byte-identical, tests/unit/test_codec.py);
        # None: a construct it does not handle, fastavro writes.
        try:
            self._compiled: RecordWriter | None = _compile(self.writer.parsed)
        except _NotCompiled:
            self._compiled = None
        try:
            self._from_event: Callable[[Event, bytes], bytes] | None = _compile_event(
                self.writer.parsed)
        except _NotCompiled:
            self._from_event = None

    @property
    def fingerprints(self) -> tuple[bytes, ...]:
        return tuple(self._by_fp)

    def encode(self, event: Event, header: bytes | None = None) -> bytes:
        """The event as one single-object-encoded Avro record (``header``: another framing's
        header before the same body, e.g. :func:`confluent_header`)."""
        from_event = self._from_event
        if from_event is not None:
            try:
                return from_event(event, self._header if header is None else header)
            except _WRITE_ERRORS as exc:
                raise CodecError(
                    f"cannot encode {event.type} seq {event.seq} of session "
                    f"{event.session_id!r}: {type(exc).__name__}: {exc} (build events with "
                    "make_event/Session)"
                ) from exc
        w = event.writer
        record = {
            "format_version": event.format_version,
            "session_id": event.session_id,
            "seq": event.seq,
            "event_id": event.event_id,
            "time": event.time,
            "type": event.type,
            "data": event.data_json(),
            "surface_op": event.surface_op.value,
            "source_event_seqs": event.source_event_seqs,
            "writer": {"id": w.id, "epoch": w.epoch},
            "ignorable": event.ignorable,
            "turn_id": event.turn_id,
            "step_id": event.step_id,
            "prev_event_id": event.prev_event_id,
            "sealed": [p.to_record() for p in event.sealed] if event.sealed else (),
        }
        compiled = self._compiled
        try:
            if compiled is not None:
                return compiled(record, self._header if header is None else header)
            out = io.BytesIO()
            out.write(self._header if header is None else header)
            schemaless_writer(out, self.writer.parsed, record)
        except _WRITE_ERRORS as exc:
            raise CodecError(
                f"cannot encode {event.type} seq {event.seq} of session {event.session_id!r}: "
                f"{type(exc).__name__}: {exc} (build events with make_event/Session)"
            ) from exc
        return out.getvalue()

    def decode(self, payload: bytes | bytearray | memoryview) -> Event:
        """The event in ``payload``; raises CorruptRecord or UnsupportedFormat."""
        record = self._read(payload if type(payload) is bytes else bytes(payload))
        return _to_event(record)

    def _read(self, payload: bytes) -> dict[str, Any]:
        if len(payload) < HEADER_LEN:
            raise CorruptRecord(
                f"{len(payload)} bytes is shorter than the {HEADER_LEN}-byte header "
                "(magic C3 01 + schema fingerprint)"
            )
        if payload[:2] != MAGIC:
            raise CorruptRecord(
                f"bad magic {payload[:2].hex(' ')}, expected c3 01: not an Avro single-object "
                "record (a Confluent-framed or foreign message on this topic?)"
            )
        fp = payload[2:HEADER_LEN]
        writer = self._by_fp.get(fp)
        if writer is None:
            raise CorruptRecord(
                f"unknown schema fingerprint {fp.hex()}: written with an envelope schema "
                "this build does not know (upgrade sessionstream) or not a sessionstream record"
            )
        return self.read_body(payload, HEADER_LEN, writer)

    def known(self, schema: SchemaVersion) -> SchemaVersion:
        """The shipped version with this schema's fingerprint, else ``schema`` itself."""
        return self._by_fp.get(schema.fingerprint, schema)

    def read_body(self, payload: bytes, start: int, writer: SchemaVersion) -> dict[str, Any]:
        """The Avro body at ``payload[start:]`` written with ``writer``, resolved to the reader."""
        reader = None if writer is self.reader else self.reader.parsed
        body = io.BytesIO(payload)
        body.seek(start)
        try:
            record: Any = schemaless_reader(body, writer.parsed, reader)
        except _READ_ERRORS as exc:
            raise CorruptRecord(
                f"undecodable Avro body ({type(exc).__name__}: {exc})"[:300]
            ) from exc
        if body.tell() != len(payload):
            raise CorruptRecord(
                f"{len(payload) - body.tell()} trailing bytes after the record"
            )
        return record


def confluent_header(schema_id: int) -> bytes:
    """The Schema Registry framing's 5-byte header for ``schema_id``."""
    if not 0 <= schema_id < 2**32:
        raise CodecError(f"schema id {schema_id} does not fit the 4-byte Confluent header")
    return bytes([CONFLUENT_MAGIC]) + schema_id.to_bytes(4, "big")


class WireCodec:
    """Either framing on read (by the first byte), one framing on write.

    ``lookup`` (a port: the registry client implements it outside the core) gives the
    writer schema (the JSON text) of a Confluent schema id; it raises CorruptRecord for
    an id the registry does not know. Results are cached per id. ``write_id``: the
    registered id writers frame with (None: single-object records).
    """

    def __init__(self, base: AvroCodec, lookup: Callable[[int], str] | None,
                 write_id: int | None = None) -> None:
        self.base = base
        self._lookup = lookup
        self._by_id: dict[int, SchemaVersion] = {}
        self._header = None if write_id is None else confluent_header(write_id)

    def encode(self, event: Event) -> bytes:
        return self.base.encode(event, self._header)

    def decode(self, payload: bytes | bytearray | memoryview) -> Event:
        data = payload if type(payload) is bytes else bytes(payload)
        if not data or data[0] != CONFLUENT_MAGIC:
            return self.base.decode(data)
        if len(data) < CONFLUENT_HEADER_LEN:
            raise CorruptRecord(f"{len(data)} bytes is shorter than the 5-byte Confluent "
                                "header (magic 00 + schema id)")
        schema_id = int.from_bytes(data[1:CONFLUENT_HEADER_LEN], "big")
        writer = self._by_id.get(schema_id)
        if writer is None:
            writer = self._by_id[schema_id] = self._resolve(schema_id)
        return _to_event(self.base.read_body(data, CONFLUENT_HEADER_LEN, writer))

    def _resolve(self, schema_id: int) -> SchemaVersion:
        if self._lookup is None:
            raise CorruptRecord(
                f"Confluent-framed record (schema id {schema_id}) but no schema registry is "
                "configured (the schema registry URL setting)")
        text = self._lookup(schema_id)
        try:
            schema = load_schema(json.loads(text))
        except Exception as exc:  # fastavro's parse errors share no base class but Exception
            raise CorruptRecord(
                f"schema id {schema_id} from the registry is not an Avro schema: "
                f"{type(exc).__name__}: {exc}"[:300]) from exc
        return self.base.known(schema)


_SURFACE_OPS = {op.value: op for op in SurfaceOp}
# Writers are frozen values and a log holds few distinct ones: share them between
# decoded events (less memory, no dataclass construction per record). Bounded.
_WRITERS: dict[tuple[str, int], Writer] = {}
_WRITERS_MAX = 4096


def _writer(wid: str, epoch: int) -> Writer:
    w = _WRITERS.get((wid, epoch))
    if w is None:
        if len(_WRITERS) >= _WRITERS_MAX:
            _WRITERS.clear()
        w = _WRITERS[(wid, epoch)] = Writer(wid, epoch)
    return w


def _to_event(record: dict[str, Any]) -> Event:
    version = record["format_version"]
    session_id = record["session_id"]
    seq = record["seq"]
    if version > FORMAT_VERSION:
        raise UnsupportedFormat(session_id, seq, version, FORMAT_VERSION)
    if version < 1:
        raise CorruptRecord(f"session {session_id!r} seq {seq}: format_version {version} < 1")
    text = record["data"]
    try:
        value, frozen = loads_checked(text)  # the trust boundary: see the module docstring
    except (InvalidData, ValueError, RecursionError) as exc:
        raise CorruptRecord(
            f"session {session_id!r} seq {seq}: data is not lossless JSON text: {exc}"
        ) from exc
    w = record["writer"]
    op = _SURFACE_OPS.get(record["surface_op"])
    if op is None:  # the Avro enum only holds known symbols; kept for a newer reader schema
        op = SurfaceOp(record["surface_op"])
    return decoded_event(
        session_id, seq, record["event_id"], record["time"], record["type"], text, value,
        frozen, op, tuple(record["source_event_seqs"]), _writer(w["id"], w["epoch"]),
        version, record["ignorable"], record["turn_id"], record["step_id"],
        record.get("prev_event_id"),  # absent when read with the v1 schema as reader
        _sealed(session_id, seq, record.get("sealed")),
    )


#: SurfaceOp by its index in the envelope schemas' enum (the native decoder's number).
ENUM_OPS = (SurfaceOp.NONE, SurfaceOp.APPEND, SurfaceOp.REPLACE)


def event_from_envelope(t: tuple[Any, ...]) -> Event:
    """The event of an envelope tuple decoded natively (``sessionstream._native``:
    ``Decoder.decode``, ``Folder.fold``): (session_id, seq, event_id, time, type, data
    text, surface op index, source_event_seqs, writer id, writer epoch, format_version,
    ignorable, turn_id, step_id, prev_event_id), unsealed. The data text is parsed here
    with the codec's lossless rules (InvalidData / ValueError when it is not lossless).
    """
    (sid, seq, eid, time, typ, text, op, seqs, wid, epoch, version, ignorable, turn, step,
     prev) = t
    value, frozen = loads_checked(text)
    return decoded_event(sid, seq, eid, time, typ, text, value, frozen, ENUM_OPS[op], seqs,
                         _writer(wid, epoch), version, ignorable, turn, step, prev, ())


def schema_fingerprints(directory: Path = SCHEMA_DIR) -> list[tuple[bytes, int]]:
    """(fingerprint, N) of every shipped ``session_event.vN.avsc`` (the native decoder's
    table). Computed once per process and directory: every writer's read-back decoder
    asks for it (~3 ms of parsing and fingerprinting each time)."""
    return list(_fingerprints(directory))


@cache
def _fingerprints(directory: Path) -> tuple[tuple[bytes, int], ...]:
    out = []
    for path in schema_files(directory):
        version = int(path.name.split(".v")[1].split(".")[0])
        out.append((load_schema(json.loads(path.read_text("utf-8"))).fingerprint, version))
    return tuple(out)


def _sealed(session_id: str, seq: int, items: Any) -> tuple[SealedPart, ...]:
    if not items:
        return ()
    try:
        return tuple(SealedPart.from_record(item) for item in items)
    except MalformedSealedPart as exc:
        raise CorruptRecord(f"session {session_id!r} seq {seq}: {exc}") from exc


@cache
def default_codec() -> AvroCodec:
    """The codec over the schema versions shipped in ``schemas/``."""
    schemas = [json.loads(p.read_text(encoding="utf-8")) for p in schema_files()]
    return AvroCodec(schemas)


def encode(event: Event) -> bytes:
    """The event as bytes for the events topic (single-object Avro)."""
    return default_codec().encode(event)


def decode(payload: bytes | bytearray | memoryview) -> Event:
    """The event in a record of the events topic; raises CorruptRecord / UnsupportedFormat."""
    return default_codec().decode(payload)


def check_readable(event: Event, catalog: Catalog) -> bool:
    """Whether this build can interpret the event (seed §4.8.3).

    True: known type. False: unknown but ignorable — skip it. Raises
    UnknownRequiredEvent for an unknown type that is not ignorable, and
    UnsupportedFormat for a newer envelope format.
    """
    if event.format_version > FORMAT_VERSION:
        raise UnsupportedFormat(event.session_id, event.seq, event.format_version, FORMAT_VERSION)
    if event.type in catalog:
        return True
    if event.ignorable:
        return False
    raise UnknownRequiredEvent(event.session_id, event.seq, event.type)


# ------------------------------------------------------------------ memory operations
#
# The memory topic's records (docs/adr/0030-long-term-memory.md): the same single-object
# framing, their own schema (``memory_op.vN.avsc``), the operation's fields as canonical
# JSON text in ``data`` and sealed content beside it, as the session envelope does. The
# operation itself is validated by ``sessionstream.core.memory.model.op_from_json`` once
# its sealed content is opened (the edge opens it); a record this codec cannot read is a
# CorruptRecord, for the dead-letter topic.

_MEMORY_FILE_RE = re.compile(r"memory_op\.v(\d+)\.avsc")


def memory_schema_files(directory: Path = SCHEMA_DIR) -> list[Path]:
    """The ``memory_op.vN.avsc`` files, oldest first."""
    found = [(int(m.group(1)), p) for p in directory.iterdir()
             if (m := _MEMORY_FILE_RE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


class MemoryCodec:
    """Encodes memory operations with the newest memory schema, decodes any known one."""

    def __init__(self, schemas: Iterable[Mapping[str, Any]]) -> None:
        versions = [load_schema(s) for s in schemas]
        if not versions:
            raise CodecError("no memory operation schema given")
        self._by_fp = {v.fingerprint: v for v in versions}
        self.reader = self.writer = versions[-1]
        self._header = MAGIC + self.writer.fingerprint

    def encode(self, record: Mapping[str, Any], sealed: Iterable[SealedPart] = ()) -> bytes:
        """``record`` (``Op.to_json()``'s shape, content possibly replaced by placeholders)
        and its sealed parts as one single-object-encoded Avro record."""
        try:
            body = {"format_version": record["format_version"], "op_id": record["op_id"],
                    "namespace": record["namespace"], "time": record["time"],
                    "op": record["op"], "actor": dict(record["actor"]),
                    "data": canonical_dumps(record["data"]),
                    "sealed": [p.to_record() for p in sealed]}
            out = io.BytesIO()
            out.write(self._header)
            schemaless_writer(out, self.writer.parsed, body)
        except (*_WRITE_ERRORS, InvalidData) as exc:
            raise CodecError(f"cannot encode memory operation {record.get('op_id')!r}: "
                             f"{type(exc).__name__}: {exc}") from exc
        return out.getvalue()

    def decode(self, payload: bytes | bytearray | memoryview
               ) -> tuple[dict[str, Any], tuple[SealedPart, ...]]:
        """The record's fields (``data`` parsed, lossless) and its sealed parts."""
        data = payload if type(payload) is bytes else bytes(payload)
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise CorruptRecord("not a single-object Avro record (magic c3 01 + fingerprint)")
        writer = self._by_fp.get(data[2:HEADER_LEN])
        if writer is None:
            raise CorruptRecord(f"unknown memory schema fingerprint {data[2:HEADER_LEN].hex()}: "
                                "not a memory operation this build knows (upgrade sessionstream)")
        body = io.BytesIO(data)
        body.seek(HEADER_LEN)
        try:
            record: Any = schemaless_reader(
                body, writer.parsed, None if writer is self.reader else self.reader.parsed)
        except _READ_ERRORS as exc:
            raise CorruptRecord(f"undecodable memory operation ({type(exc).__name__}: "
                                f"{exc})"[:300]) from exc
        if body.tell() != len(data):
            raise CorruptRecord(f"{len(data) - body.tell()} trailing bytes after the record")
        try:
            record["data"], _ = loads_checked(record["data"])
            sealed = tuple(SealedPart.from_record(p) for p in record.pop("sealed", ()))
        except (InvalidData, ValueError, RecursionError) as exc:
            raise CorruptRecord(f"memory operation {record.get('op_id')!r}: {exc}"[:300]
                                ) from exc
        return record, sealed


@cache
def memory_codec() -> MemoryCodec:
    """The codec over the memory schema versions shipped in ``schemas/``."""
    return MemoryCodec([json.loads(p.read_text(encoding="utf-8"))
                        for p in memory_schema_files()])
