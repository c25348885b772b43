"""The codec's framings: single-object and Schema Registry (Confluent), told apart by the
first byte; the registry lookup is a port (a dict here)."""

from __future__ import annotations

import json

import pytest

from sessionstream.core import codec
from sessionstream.core.errors import CorruptRecord
from sessionstream.core.events import Event, Writer, make_event

V1, V2 = (p.read_text() for p in codec.schema_files()[:2])


def _event(seq: int = 4) -> Event:
    return make_event(
        session_id="s-1", seq=seq, event_id="6f1c2d4e-0000-4000-8000-000000000004",
        time=1_767_225_600_123, type="tool/call",
        data={"call_id": "c1", "name": "search", "arguments": {"q": "ü 日本", "n": 2**62}},
        writer=Writer("node-1", 3), turn_id="t-1", step_id="st-1")


def _wire(lookup: dict[int, str], write_id: int | None = 7) -> codec.WireCodec:
    def find(schema_id: int) -> str:
        calls.append(schema_id)
        if schema_id not in lookup:
            raise CorruptRecord(f"schema id {schema_id} is unknown")
        return lookup[schema_id]
    calls: list[int] = []
    wire = codec.WireCodec(codec.default_codec(), find, write_id)
    wire.calls = calls  # type: ignore[attr-defined]
    return wire


def test_confluent_record_is_magic_zero_id_then_the_single_object_body() -> None:
    ev = _event()
    framed = _wire({7: V2}).encode(ev)
    single = codec.encode(ev)
    assert framed[:5] == b"\x00\x00\x00\x00\x07"
    assert framed[5:] == single[codec.HEADER_LEN:]


def test_either_framing_decodes_to_the_same_event_and_ids_are_looked_up_once() -> None:
    wire = _wire({7: V2})
    ev = _event()
    assert wire.decode(wire.encode(ev)) == ev == wire.decode(codec.encode(ev))
    wire.decode(wire.encode(ev))
    assert wire.calls == [7]  # type: ignore[attr-defined]


def test_a_v1_writer_schema_from_the_registry_resolves_to_the_newest() -> None:
    v1 = codec.AvroCodec([json.loads(V1)])
    ev = _event()
    payload = codec.confluent_header(3) + v1.encode(ev)[codec.HEADER_LEN:]
    got = _wire({3: V1}).decode(payload)
    assert (got.event_id, got.type, got.prev_event_id) == (ev.event_id, ev.type, None)


@pytest.mark.parametrize("payload,needle", [
    (codec.confluent_header(99) + b"\x02", "schema id 99 is unknown"),
    (b"\x00\x00\x01", "shorter than the 5-byte Confluent header"),
])
def test_unknown_id_or_short_header_is_a_corrupt_record(payload: bytes, needle: str) -> None:
    with pytest.raises(CorruptRecord, match=needle):
        _wire({}).decode(payload)


def test_confluent_record_without_a_registry_names_the_setting() -> None:
    wire = codec.WireCodec(codec.default_codec(), None)
    with pytest.raises(CorruptRecord, match="no schema registry is configured"):
        wire.decode(codec.confluent_header(1) + b"\x00")


def test_a_registry_schema_that_is_not_avro_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecord, match="is not an Avro schema"):
        _wire({5: '{"type": "nonsense"}'}).decode(codec.confluent_header(5) + b"\x00")


def test_schemas_readme_fingerprint_table_matches_the_shipped_files() -> None:
    text = (codec.SCHEMA_DIR / "README.md").read_text(encoding="utf-8")
    for path in codec.schema_files():
        fp = codec.load_schema(json.loads(path.read_text())).fingerprint.hex()
        assert f"| `{path.name}` | `{fp}` |" in text
