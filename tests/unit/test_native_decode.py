"""The read-back's native decoder (``producers.readback.NativeDecoder``) against the codec.

Record by record, ``NativeDecoder`` must give what ``decode_record`` gives with the
Python codec (and its opener): the same event for every readable record — generated
sessions, odd data values, v1 records, forks — and, for what the extension does not
take (sealed parts, a newer format, corrupt or foreign bytes, data that is not
lossless JSON, a mis-keyed or empty record), the codec's own verdict. The writer's
read-back with and without it (``WriterConfig.native_decode``) is covered by the
integration tests of resume.
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_writer

from sessionstream.core import codec
from sessionstream.core.codec import MAGIC, load_schema
from sessionstream.core.events import FORMAT_VERSION, Event, Writer, make_event
from sessionstream.core.pipeline import Record, Undecodable, decode_record
from sessionstream.core.simulate import simulate_session
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.producers.readback import NativeDecoder

if not NativeDecoder.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)


def _schema(version: int) -> dict[str, Any]:
    path = next(p for p in codec.schema_files() if p.name == f"session_event.v{version}.avsc")
    loaded: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return loaded


def _raw(version: int, record: dict[str, Any]) -> bytes:
    """A record written straight with fastavro (bypassing encode's checks)."""
    sv = load_schema(_schema(version))
    out = io.BytesIO()
    out.write(MAGIC + sv.fingerprint)
    schemaless_writer(out, sv.parsed, record)
    return out.getvalue()


def _record_of(e: Event, version: int = 2, **over: Any) -> dict[str, Any]:
    r = e.to_json()
    r["data"] = e.data_json()
    if version == 1:
        r.pop("prev_event_id", None)
        r.pop("sealed", None)
    r.update(over)
    return r


def _records(values: list[tuple[bytes | None, bytes | None]]) -> list[Record]:
    return [Record("t", 0, i, key, value) for i, (key, value) in enumerate(values)]


def _same(records: list[Record], decoder: NativeDecoder, decode: Any) -> None:
    want = [decode_record(decode, r.key, r.value) for r in records]
    got = decoder(records)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert type(g) is type(w), (i, g, w)
        if isinstance(w, Event):
            assert isinstance(g, Event)
            assert g == w and g.data_json() == w.data_json(), i
            if isinstance(w.data, dict):
                assert list(g.data) == list(w.data), i  # key order as written
        else:
            assert str(g) == str(w) and getattr(g, "reason", None) == getattr(w, "reason", None)


def test_generated_sessions_decode_to_the_events_the_codec_gives() -> None:
    rng = random.Random(5)
    values = []
    for i in range(6):
        for e in simulate_session(rng, f"s{i}", turns=4, compact_every=2, failures=0.2):
            values.append((e.session_id.encode(), codec.encode(e)))
    records = _records(values)
    assert len(records) > 100
    _same(records, NativeDecoder(codec.decode), codec.decode)


def _ev(data: Any, **over: Any) -> Event:
    base: dict[str, Any] = dict(session_id="s-1", seq=3, event_id="e-3", time=1_767_225_600_123,
                                type="x/odd", data=data, writer=Writer("w", 2), ignorable=True)
    base.update(over)
    return make_event(**base)


ODD_DATA = [
    {"n": 2**63 - 1, "m": -(2**63), "f": 1.5e308, "g": -0.0, "h": 1.0, "b": True, "z": None},
    {"list": [1, [2, [3, {"k": "v"}]], {}], "empty": [], "s": "ü 日本 \U0001f600"},
    {"b": 2, "a": 1, "c": {"z": 1, "y": 2}},  # key order is kept
    {"esc": "quote \" backslash \\ tab \t nl \n ctrl \x01"},
    ["top", "level", 1],
    "a string",
    12345678901234567,
    None,
]


@pytest.mark.parametrize("data", ODD_DATA, ids=range(len(ODD_DATA)))
def test_odd_data_values_come_out_as_the_codec_parses_them(data: Any) -> None:
    e = _ev(data)
    records = _records([(b"s-1", codec.encode(e)), (b"s-1", _raw(1, _record_of(e, 1)))])
    _same(records, NativeDecoder(codec.decode), codec.decode)


BAD_DATA_TEXTS = ['{"a": NaN}', '{"a": 1e999}', '{"a": "\\ud800"}', '{"a": 99999999999999999999}',
                  '{"a": 1', "", '{"a": Infinity}', "[" * 200 + "]" * 200]


@pytest.mark.parametrize("text", BAD_DATA_TEXTS, ids=range(len(BAD_DATA_TEXTS)))
def test_data_that_is_not_lossless_json_gets_the_codecs_verdict(text: str) -> None:
    records = _records([(b"s-1", _raw(2, _record_of(_ev({"a": 1}), data=text)))])
    assert isinstance(decode_record(codec.decode, b"s-1", records[0].value), Undecodable)
    _same(records, NativeDecoder(codec.decode), codec.decode)


def test_what_the_extension_does_not_take_gets_the_codecs_verdict() -> None:
    e = _ev({"a": 1})
    good = codec.encode(e)
    records = _records([
        (b"s-1", good[:-3]),  # truncated
        (b"s-1", good + b"\x00"),  # trailing bytes
        (b"s-1", b"\x00\x00\x00\x00\x01" + good[10:]),  # Confluent-framed: no registry here
        (b"s-1", b"\xc3\x01" + b"\x00" * 8 + good[10:]),  # unknown fingerprint
        (b"s-1", b""),
        (b"s-1", None),  # no value
        (b"other", good),  # key mismatch
        (None, good),  # no key: nothing to compare
        (b"s-1", _raw(2, _record_of(e, format_version=FORMAT_VERSION + 1))),  # newer format
        (b"s-1", _raw(2, _record_of(e, format_version=0))),
    ])
    _same(records, NativeDecoder(codec.decode), codec.decode)


def test_sealed_records_are_opened_by_the_codecs_opener_in_log_order(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    cipher = ContentCipher(store, "default")
    events = simulate_session(random.Random(3), "sealed-1", turns=3, compact_every=2)
    values = []
    for ev in events:
        clear, parts = cipher.seal(ev)
        sealed = clear.replace(sealed=parts) if parts else clear
        values.append((b"sealed-1", codec.encode(sealed)))
    records = _records(values)
    assert any(codec.decode(r.value or b"").sealed for r in records)
    py = SealedContentOpener(ContentCipher(store, "default"))
    na = SealedContentOpener(ContentCipher(store, "default"))
    _same(records, NativeDecoder(na.decoder(codec.decode), na.open), py.decoder(codec.decode))
    assert na.seed_length("sealed-1") == py.seed_length("sealed-1")
