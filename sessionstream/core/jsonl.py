"""Portable JSONL session files (seed §4.8.2): one event envelope per line.

A file holds one session, seq 0..n-1 in order, each line ``Event.to_json()``.
Reading validates every line — JSON syntax, envelope fields and types, lossless
data, the catalog, contiguous seqs, one session — and then the session rules, and
stops at the first problem with ``LogFileError(file, line, reason)``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NoReturn

from sessionstream.core.catalog import Catalog, default_catalog
from sessionstream.core.errors import (
    CatalogError,
    InvalidData,
    LogFileError,
    SessionStreamError,
)
from sessionstream.core.events import FORMAT_VERSION, Event, SurfaceOp, Writer, make_event
from sessionstream.core.jsonvalue import INT_MAX, INT_MIN
from sessionstream.core.sealed import MalformedSealedPart, SealedPart

REQUIRED = ("session_id", "seq", "event_id", "time", "type", "data")
OPTIONAL = (
    "surface_op", "source_event_seqs", "writer", "format_version", "ignorable",
    "turn_id", "step_id", "prev_event_id", "sealed",
)
_KNOWN = frozenset(REQUIRED + OPTIONAL)
_SURFACE_OPS = tuple(op.value for op in SurfaceOp)


def dumps_line(event: Event) -> str:
    """One JSONL line (without newline): the envelope, keys in envelope order."""
    return json.dumps(event.to_json(), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))


def write_jsonl(events: Iterable[Event], dest: str | os.PathLike[str] | IO[str]) -> None:
    """Write events one per line; a path is written atomically (temp file + rename)."""
    if hasattr(dest, "write"):
        for event in events:
            dest.write(dumps_line(event) + "\n")
        return
    lines = [dumps_line(e) + "\n" for e in events]  # fail before touching the file
    with atomic_write(Path(os.fspath(dest))) as out:
        out.writelines(lines)


@contextmanager
def atomic_write(path: Path) -> Iterator[IO[str]]:
    """A text file that appears at ``path`` complete, or not at all."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_jsonl(
    source: str | os.PathLike[str],
    *,
    catalog: Catalog | None = None,
    check_rules: bool = True,
) -> list[Event]:
    """The events of a JSONL session file, validated; raises LogFileError at the first problem.

    With ``check_rules`` the events are also rebuilt into a Session, so a broken
    session rule (orphan tool result, step outside a turn…) is reported at its line.
    """
    cat = catalog if catalog is not None else default_catalog()
    name = os.fspath(source)
    try:
        with open(source, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise LogFileError(name, _line_at(exc.object, exc.start),
                           f"not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise LogFileError(name, 0, f"cannot read the file: {exc.strerror or exc}") from exc
    return parse_jsonl(text, name=name, catalog=cat, check_rules=check_rules)


def _line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def parse_jsonl(
    text: str, *, name: str = "<input>", catalog: Catalog | None = None,
    check_rules: bool = True,
) -> list[Event]:
    """Like :func:`read_jsonl`, over text already read; ``name`` labels the errors."""
    cat = catalog if catalog is not None else default_catalog()
    lines = text.split("\n")
    while lines and lines[-1].strip() == "":  # trailing newline(s) at the end of the file
        lines.pop()
    if not lines:
        raise LogFileError(name, 1, "empty file: a session log starts with session/start")
    events: list[Event] = []
    for number, line in enumerate(lines, start=1):
        event = _parse_line(line, name, number, cat)
        if events and event.session_id != events[0].session_id:
            _fail(name, number, f"session_id {event.session_id!r} differs from "
                  f"{events[0].session_id!r} on line 1: a file holds one session")
        if event.seq != len(events):
            expected = len(events)
            _fail(name, number, f"seq {event.seq} where seq {expected} was expected "
                  "(seqs run 0, 1, 2… with no gap, one line each, in order)")
        events.append(event)
    if check_rules:
        _check_rules(events, name, cat)
    return events


def _check_rules(events: list[Event], name: str, catalog: Catalog) -> None:
    from sessionstream.core.session import Session  # the session rules, rebuilt in order

    try:
        Session.from_events(events, catalog=catalog)
    except SessionStreamError as exc:
        # Every refusal that names a seq (a broken rule, a newer format_version in
        # session/start's data, an unknown required type) is reported at that seq's line.
        seq = getattr(exc, "seq", None)
        line = seq + 1 if isinstance(seq, int) and 0 <= seq < len(events) else len(events)
        raise LogFileError(name, line, str(exc)) from exc


def _parse_line(line: str, name: str, number: int, catalog: Catalog) -> Event:
    if not line.strip():
        _fail(name, number, "blank line: the file holds one event envelope per line")
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except _Constant as exc:
        _fail(name, number, f"{exc} is not JSON (NaN and Infinity have no lossless form)")
    except json.JSONDecodeError as exc:
        _fail(name, number, f"not valid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        _fail(name, number, "not valid JSON: nested too deeply")
    if not isinstance(obj, dict):
        _fail(name, number, f"expected an event envelope object, got {_kind(obj)}")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        _fail(name, number, f"envelope field(s) missing: {', '.join(missing)}")
    unknown = sorted(set(obj) - _KNOWN)
    if unknown:
        _fail(name, number, f"unknown envelope field(s): {', '.join(unknown)} "
              f"(known: {', '.join(REQUIRED + OPTIONAL)})")
    version = obj.get("format_version", FORMAT_VERSION)
    _expect_int(name, number, "format_version", version, 1)
    if version > FORMAT_VERSION:
        _fail(name, number, f"format_version {version} is newer than {FORMAT_VERSION}, the "
              "newest this build reads: upgrade sessionstream to read this file")
    for key in ("session_id", "event_id", "type"):
        if not isinstance(obj[key], str) or not obj[key]:
            _fail(name, number, f"{key} must be a non-empty string, got {_kind(obj[key])}")
    _expect_int(name, number, "seq", obj["seq"], 0)
    _expect_int(name, number, "time", obj["time"], INT_MIN)
    op = obj.get("surface_op", "none")
    if op not in _SURFACE_OPS:
        _fail(name, number, f"surface_op {op!r} is not one of {', '.join(_SURFACE_OPS)}")
    sources = obj.get("source_event_seqs", [])
    if not isinstance(sources, list):
        _fail(name, number, f"source_event_seqs must be a list of seqs, got {_kind(sources)}")
    for s in sources:
        _expect_int(name, number, "source_event_seqs item", s, 0)
    writer = obj.get("writer", {"id": "unknown", "epoch": 0})
    if (not isinstance(writer, dict) or set(writer) != {"id", "epoch"}
            or not isinstance(writer["id"], str)):
        _fail(name, number, 'writer must be {"id": string, "epoch": integer}')
    _expect_int(name, number, "writer.epoch", writer["epoch"], INT_MIN)
    ignorable = obj.get("ignorable", False)
    if not isinstance(ignorable, bool):
        _fail(name, number, f"ignorable must be true or false, got {_kind(ignorable)}")
    for key in ("turn_id", "step_id", "prev_event_id"):
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            _fail(name, number, f"{key} must be a string or null, got {_kind(value)}")
    sealed_items = obj.get("sealed", [])
    if not isinstance(sealed_items, list):
        _fail(name, number, f"sealed must be a list of sealed parts, got {_kind(sealed_items)}")
    try:
        sealed = tuple(SealedPart.from_json(item) for item in sealed_items)
    except MalformedSealedPart as exc:
        _fail(name, number, f"{exc} (sealed parts are written by sessionstream, not by hand)")
    try:
        event = make_event(
            session_id=obj["session_id"], seq=obj["seq"], event_id=obj["event_id"],
            time=obj["time"], type=obj["type"], data=obj["data"], surface_op=op,
            source_event_seqs=sources, writer=Writer(writer["id"], writer["epoch"]),
            format_version=version, ignorable=ignorable, turn_id=obj.get("turn_id"),
            step_id=obj.get("step_id"), prev_event_id=obj.get("prev_event_id"),
            sealed=sealed,
        )
    except InvalidData as exc:
        _fail(name, number, f"data at {exc.path.replace('$', 'data', 1)} is not lossless "
              f"JSON: {exc.reason}")
    etype = catalog.get(event.type)
    if etype is None:
        if not event.ignorable:
            _fail(name, number, f"unknown event type {event.type!r} is not ignorable: "
                  "upgrade sessionstream or register the type's plugin")
        return event
    try:
        etype.schema.check(event.type, event.data)
    except CatalogError as exc:
        _fail(name, number, str(exc))
    return event


def _expect_int(name: str, number: int, key: str, value: Any, low: int) -> None:
    if type(value) is not int:
        _fail(name, number, f"{key} must be an integer, got {_kind(value)}")
    if not low <= value <= INT_MAX:
        _fail(name, number, f"{key} {value} is outside [{low}, 2**63-1]")


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return f"{type(value).__name__} {json.dumps(value)[:40]}"


class _Constant(ValueError):
    pass


def _no_constant(name: str) -> NoReturn:
    raise _Constant(name)


def _fail(name: str, number: int, reason: str) -> NoReturn:
    raise LogFileError(name, number, reason)
