"""The Avro envelope codec: exact round trip, single-object framing, schema
evolution, and every corruption mapped to a CodecError."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import pickle
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from fastavro import schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.catalog import default_catalog
from sessionstream.core.codec import (
    HEADER_LEN,
    MAGIC,
    AvroCodec,
    check_readable,
    decode,
    default_codec,
    encode,
    load_schema,
    schema_files,
)
from sessionstream.core.errors import (
    CodecError,
    CorruptRecord,
    UnknownRequiredEvent,
    UnsupportedFormat,
)
from sessionstream.core.events import FORMAT_VERSION, Event, SurfaceOp, Writer, make_event
from sessionstream.core.jsonvalue import (
    INT_MAX,
    INT_MIN,
    FrozenList,
    FrozenMap,
    canonical_dumps,
    thaw,
)
from sessionstream.core.sealed import DataClass, SealedPart

SHIPPED = [json.loads(p.read_text(encoding="utf-8")) for p in schema_files()]
V1 = SHIPPED[0]  # the first released envelope (no prev_event_id)
CURRENT = SHIPPED[-1]  # the newest shipped: what this build writes


def _next() -> dict[str, Any]:
    """A plausible next version: one optional field added, one enum symbol appended."""
    nxt = copy.deepcopy(CURRENT)
    nxt["fields"].append({"name": "trace_id", "type": ["null", "string"], "default": None})
    for f in nxt["fields"]:
        if f["name"] == "surface_op":
            f["type"]["symbols"].append("fold")
    return nxt


V2 = _next()  # the test's "next version" (not a shipped file)


def event(**over: Any) -> Event:
    base: dict[str, Any] = dict(
        session_id="s-1", seq=4, event_id="6f1c2d4e-0000-4000-8000-000000000004",
        time=1_767_225_600_123, type="tool/call",
        data={"call_id": "c1", "name": "search", "arguments": {"q": "ü 日本", "n": 2**62}},
        writer=Writer("node-1", 3), turn_id="t-1", step_id="st-1",
    )
    base.update(over)
    return make_event(**base)


def raw(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """A record written straight with fastavro, bypassing encode() (for bad records)."""
    sv = load_schema(schema)
    out = io.BytesIO()
    out.write(MAGIC + sv.fingerprint)
    schemaless_writer(out, sv.parsed, record)
    return out.getvalue()


def record_of(e: Event, **over: Any) -> dict[str, Any]:
    r = e.to_json()
    r["data"] = e.data_json()
    r.update(over)
    return r


# -- round trip -----------------------------------------------------------------------

def test_round_trip_is_exact_for_every_envelope_field() -> None:
    e = event(surface_op="append", type="user/message", data={"content": "hi"},
              source_event_seqs=[1, 2], ignorable=True, step_id=None)
    assert decode(encode(e)) == e


def test_time_stays_epoch_milliseconds_not_a_datetime() -> None:
    assert decode(encode(event(time=0))).time == 0
    assert decode(encode(event(time=-5))).time == -5


def test_decoded_data_is_frozen() -> None:
    d = decode(encode(event())).data
    with pytest.raises(TypeError):
        d["x"] = 1  # type: ignore[index]


json_leaf = (
    st.none() | st.booleans() | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_value = st.recursive(
    json_leaf,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4),
    max_leaves=20,
)
maybe_id = st.none() | st.text(min_size=1, max_size=12)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    session_id=st.text(min_size=1, max_size=20), seq=st.integers(0, INT_MAX),
    time=st.integers(INT_MIN, INT_MAX), data=json_value, op=st.sampled_from(list(SurfaceOp)),
    sources=st.lists(st.integers(0, INT_MAX), max_size=5), epoch=st.integers(INT_MIN, INT_MAX),
    ignorable=st.booleans(), turn_id=maybe_id, step_id=maybe_id, typ=st.text(max_size=20),
)
def test_avro_round_trip_is_exact_for_random_valid_events(
    session_id: str, seq: int, time: int, data: Any, op: SurfaceOp, sources: list[int],
    epoch: int, ignorable: bool, turn_id: str | None, step_id: str | None, typ: str,
) -> None:
    e = make_event(session_id=session_id, seq=seq, event_id="e", time=time, type=typ,
                   data=data, surface_op=op, source_event_seqs=sources,
                   writer=Writer("w", epoch), ignorable=ignorable, turn_id=turn_id,
                   step_id=step_id)
    payload = encode(e)
    back = decode(payload)
    assert back == e and hash(back) == hash(e)
    assert back.data_json() == e.data_json()  # same canonical text: big ints, floats exact
    assert canonical_dumps(back.data) == e.data_json()  # the value itself came back exact
    assert encode(back) == payload  # re-encoding a decoded event is byte-identical


# -- data kept as text and value (docs/adr/0002: the trust boundary) ------------------

WITH_ARRAYS = {"call_id": "c1", "name": "search", "arguments": {"ids": [1, [2, {"x": [3]}]]}}


@pytest.mark.parametrize("data", [{}, {"content": "hi", "n": 2**62}, WITH_ARRAYS])
def test_a_decoded_event_equals_and_hashes_like_the_event_built_in_memory(data: Any) -> None:
    built = event(data=data)
    decoded = decode(encode(built))
    assert decoded == built and built == decoded
    assert hash(decoded) == hash(built)
    assert repr(decoded).startswith("Event(session_id='s-1', seq=4, ")
    assert "data=" in repr(decoded) and "lossless_checked" not in repr(decoded)
    assert {built, decoded} == {built}
    assert decoded.lossless_checked
    # equal to an event that never rendered its text, built without make_event
    plain = Event(**{**_fields(built), "data": built.data})
    assert plain == decoded and hash(plain) == hash(decoded)
    assert decoded != built.replace(data=FrozenMap({**built.data, "extra": 1}))


def _fields(e: Event) -> dict[str, Any]:
    return {name: getattr(e, name) for name in Event.__match_args__}


def test_decoded_arrays_are_frozen_on_first_access_and_stay_the_same_object() -> None:
    decoded = decode(encode(event(data=WITH_ARRAYS)))
    ids = decoded.data["arguments"]["ids"]
    assert type(ids) is FrozenList and type(ids[1][1]) is FrozenMap
    assert decoded.data is decoded.data
    with pytest.raises(TypeError):
        decoded.data["arguments"]["x"] = 1


def test_a_foreign_but_valid_data_text_is_kept_byte_for_byte() -> None:
    """A relay re-encodes what it read unchanged, even JSON our encoder would not write."""
    payload = raw(CURRENT, record_of(event(), data='{"b": [1, 2.0], "a": "é"}'))
    back = decode(payload)
    assert thaw(back.data) == {"a": "é", "b": [1, 2.0]}
    assert back.data_json() == '{"b": [1, 2.0], "a": "é"}'
    assert encode(back) == payload
    assert back == event(data={"a": "é", "b": [1, 2.0]})  # equal by value, not by text


@pytest.mark.parametrize("text", [
    '{"a": [1, NaN]}', '{"a": [', '[18446744073709551616]', '{"a": [1e400]}',
    '{"a": ["\\udc00"]}', "not json",
])
def test_corrupt_data_text_is_refused_at_decode_not_on_first_access(text: str) -> None:
    with pytest.raises(CorruptRecord, match="data is not lossless JSON"):
        decode(raw(V1, record_of(event(), data=text)))


def test_replace_copies_with_changes_and_keeps_data_and_its_check() -> None:
    e = decode(encode(event(data=WITH_ARRAYS)))
    moved = e.replace(seq=9, writer=Writer("w2", 4))
    assert (moved.seq, moved.writer, e.seq) == (9, Writer("w2", 4), 4)
    assert moved.data == e.data and moved.data_json() == e.data_json()
    assert moved.lossless_checked  # data unchanged: still verified
    assert moved == Event(**{**_fields(e), "seq": 9, "writer": Writer("w2", 4)})
    new_data = e.replace(data=FrozenMap({"content": "x"}))
    assert new_data.data == {"content": "x"} and new_data.data_json() == '{"content":"x"}'
    assert not new_data.lossless_checked  # new data is checked again by its reader
    with pytest.raises(TypeError, match="unknown field"):
        e.replace(sequence=1)


def test_events_are_immutable_and_pickle_by_value() -> None:
    e = decode(encode(event(data=WITH_ARRAYS)))
    with pytest.raises(FrozenInstanceError):
        e.seq = 5  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del e.data  # type: ignore[misc]
    assert type(e) is Event
    assert pickle.loads(pickle.dumps(e)) == e


# -- framing --------------------------------------------------------------------------

def test_single_object_framing_magic_then_fingerprint_of_the_schema() -> None:
    payload = encode(event())
    assert payload[:2] == b"\xc3\x01"
    assert payload[2:HEADER_LEN] == load_schema(CURRENT).fingerprint
    assert default_codec().fingerprints == tuple(load_schema(s).fingerprint for s in SHIPPED)


def test_the_newest_schema_carries_every_envelope_field() -> None:
    names = {f["name"] for f in CURRENT["fields"]}
    assert names == set(event(sealed=(SEALED,)).to_json())


# -- v1 -> v2: prev_event_id (the history an event continues) -------------------------

def _v2_schema() -> dict[str, Any]:
    return next(s for s in SHIPPED if any(f["name"] == "prev_event_id" for f in s["fields"]))


def test_v2_is_v1_plus_an_optional_prev_event_id() -> None:
    v2 = _v2_schema()
    added = [f for f in v2["fields"] if f["name"] not in {g["name"] for g in V1["fields"]}]
    assert "prev_event_id" in [f["name"] for f in added]
    prev = next(f for f in added if f["name"] == "prev_event_id")
    assert prev["type"] == ["null", "string"] and prev["default"] is None
    assert all("default" in f for f in added)  # rule 1: every added field has a default


def test_the_default_codec_writes_v2_and_round_trips_prev_event_id() -> None:
    e = event(prev_event_id="6f1c2d4e-0000-4000-8000-000000000003")
    payload = encode(e)
    assert payload[2:HEADER_LEN] == load_schema(CURRENT).fingerprint
    assert decode(payload) == e and decode(payload).prev_event_id == e.prev_event_id


def test_a_v1_record_decodes_with_prev_event_id_none() -> None:
    """The upgrade rule: records written before v2 carry no history link."""
    e = event(prev_event_id="p")
    old = AvroCodec([V1]).encode(e)  # a writer of the v1 era
    assert old[2:HEADER_LEN] == load_schema(V1).fingerprint
    back = decode(old)  # v2 reader over a v1 record (writer-schema resolution)
    assert back.prev_event_id is None
    assert back == e.replace(prev_event_id=None)


def test_a_v1_reader_reads_a_v2_record_by_writer_schema_resolution() -> None:
    v2 = _v2_schema()
    v1_reader = AvroCodec([V1, v2], read=0)  # a v1 build that was shipped v2's schema
    payload = AvroCodec([V1, v2]).encode(event(prev_event_id="p"))
    assert payload[2:HEADER_LEN] == load_schema(v2).fingerprint
    assert v1_reader.decode(payload) == event()  # the field is skipped, the rest exact


# -- evolution (schemas/README.md) ----------------------------------------------------

def test_new_reader_reads_old_records_filling_defaults() -> None:
    old_writer = AvroCodec([V1])
    new_reader = AvroCodec([V1, V2])
    e = event()
    assert new_reader.decode(old_writer.encode(e)) == e


def test_old_reader_reads_new_records_ignoring_the_added_field() -> None:
    new_writer = AvroCodec([V1, V2])
    old_reader = AvroCodec([V1, V2], read=0)  # a build on v1 that was shipped v2's schema
    payload = new_writer.encode(event())
    assert payload[2:HEADER_LEN] == load_schema(V2).fingerprint
    assert old_reader.decode(payload) == event()
    rec = record_of(event(), trace_id="abc")
    assert old_reader.decode(raw(V2, rec)) == event()


def test_rolling_upgrade_writes_the_old_schema_until_readers_know_the_new_one() -> None:
    holding = AvroCodec([V1, V2], write=0)
    assert holding.encode(event())[2:HEADER_LEN] == load_schema(V1).fingerprint
    assert AvroCodec([V1]).decode(holding.encode(event())) == event()


def test_a_new_enum_symbol_comes_with_a_format_bump_so_old_readers_refuse_clearly() -> None:
    old_reader = AvroCodec([V1, V2], read=0)
    rec = record_of(event(), surface_op="fold", format_version=FORMAT_VERSION + 1)
    with pytest.raises(UnsupportedFormat) as info:
        old_reader.decode(raw(V2, rec))
    assert (info.value.session_id, info.value.seq, info.value.version) == ("s-1", 4, 2)


def test_a_record_of_an_unknown_schema_version_is_refused_with_its_fingerprint() -> None:
    payload = AvroCodec([V1, V2]).encode(event())
    with pytest.raises(CorruptRecord, match=load_schema(V2).fingerprint.hex()):
        AvroCodec([V1]).decode(payload)


# -- format version and unknown types (seed §4.8.3) -----------------------------------

def test_newer_format_version_is_refused_naming_session_seq_and_version() -> None:
    payload = encode(event(format_version=FORMAT_VERSION + 1))
    with pytest.raises(UnsupportedFormat) as info:
        decode(payload)
    err = info.value
    assert (err.session_id, err.seq, err.version, err.supported) == ("s-1", 4, 2, 1)
    assert "s-1" in str(err) and "seq 4" in str(err) and "upgrade" in str(err)


def test_check_readable_known_type() -> None:
    assert check_readable(event(), default_catalog()) is True


def test_check_readable_skips_unknown_ignorable_type() -> None:
    assert check_readable(event(type="memo/add", ignorable=True), default_catalog()) is False


def test_check_readable_refuses_unknown_required_type() -> None:
    with pytest.raises(UnknownRequiredEvent) as info:
        check_readable(event(type="memo/add"), default_catalog())
    assert (info.value.session_id, info.value.seq, info.value.event_type) == (
        "s-1", 4, "memo/add")


def test_check_readable_refuses_newer_format() -> None:
    with pytest.raises(UnsupportedFormat):
        check_readable(event(format_version=9), default_catalog())


# -- corruption: always CorruptRecord with a reason -----------------------------------

GOOD = encode(event())


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "shorter than the 10-byte header"),
        (b"\xc3\x01abc", "shorter than the 10-byte header"),
        (b"\x00" + GOOD[1:], "bad magic"),
        (b"\x00\x00\x00\x00\x01" + GOOD[5:], "bad magic"),  # a Confluent-framed record
        (GOOD[:2] + b"\xff" * 8 + GOOD[10:], "unknown schema fingerprint"),
        (GOOD[:HEADER_LEN], "undecodable Avro body"),
        (GOOD + b"\x00", "trailing bytes"),
    ],
)
def test_corrupt_records_name_what_is_wrong(payload: bytes, reason: str) -> None:
    with pytest.raises(CorruptRecord, match=reason):
        decode(payload)


def test_every_truncation_is_a_corrupt_record() -> None:
    for n in range(len(GOOD)):
        with pytest.raises(CorruptRecord):
            decode(GOOD[:n])


def test_every_single_byte_flip_decodes_or_is_a_codec_error() -> None:
    for i in range(len(GOOD)):
        for bit in (0x01, 0x80, 0xFF):
            bad = bytearray(GOOD)
            bad[i] ^= bit
            with contextlib.suppress(CodecError):
                decode(bytes(bad))


def test_data_that_is_not_lossless_json_is_a_corrupt_record() -> None:
    for text in ("NaN", "[1e999]", str(2**64), '"\\ud800"', "{", "[" * 70 + "]" * 70):
        with pytest.raises(CorruptRecord, match="data is not lossless JSON"):
            decode(raw(V1, record_of(event(), data=text)))


@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_codec_errors(payload: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode(payload)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bodies_behind_a_valid_header_never_raise_anything_but_codec_errors(
    body: bytes,
) -> None:
    with contextlib.suppress(CodecError):
        decode(GOOD[:HEADER_LEN] + body)


def test_an_event_that_cannot_be_encoded_is_a_codec_error() -> None:
    bad = Event(session_id="s", seq=2**64, event_id="e", time=0, type="turn/start", data={})
    with pytest.raises(CodecError, match="cannot encode turn/start"):
        encode(bad)


# -- v2: sealed content (issue #10, the same unreleased version as prev_event_id) ------

SEALED = SealedPart(DataClass.SURFACE, "s1", "e1", ("/content",), b"\x00" * 12, b"ct" * 10)


def test_sealed_parts_round_trip_through_the_codec() -> None:
    e = event(sealed=(SEALED, SealedPart(DataClass.RAW, "parent", "e0", ("/a", "/b/0"),
                                         b"\x01" * 12, b"\xff" * 17)))
    back = decode(encode(e))
    assert back == e and back.sealed == e.sealed
    assert decode(encode(event())).sealed == ()


def test_a_v1_record_decodes_with_no_sealed_content() -> None:
    old = AvroCodec(SHIPPED, write=0).encode(event(sealed=(SEALED,)))  # v1 drops the field
    assert decode(old).sealed == ()


def test_a_v1_reader_reads_a_sealed_v2_record_skipping_the_parts() -> None:
    v1_reader = AvroCodec(SHIPPED, read=0)
    back = v1_reader.decode(encode(event(sealed=(SEALED,))))
    assert back.sealed == () and back.data == event().data  # the placeholders, in clear


def test_a_malformed_sealed_part_is_a_corrupt_record() -> None:
    record = {**event().to_json(), "writer": {"id": "w", "epoch": 1}, "sealed": [
        {**SEALED.to_record(), "data_class": "secret-class"}]}
    record["data"] = json.dumps(record["data"])
    with pytest.raises(CorruptRecord, match="sealed part"):
        decode(raw(CURRENT, record))


# -- the compiled writer (plain Python, byte-identical to fastavro) --------------------

sealed_part = st.builds(
    SealedPart, st.sampled_from(list(DataClass)), st.text(min_size=1, max_size=10),
    st.text(min_size=1, max_size=10), st.lists(st.text(max_size=8), max_size=3).map(tuple),
    st.binary(min_size=12, max_size=12), st.binary(max_size=40))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    session_id=st.text(min_size=1, max_size=20), seq=st.integers(0, 2**63 - 1),
    time=st.integers(-(2**63), 2**63 - 1), data=json_value,
    op=st.sampled_from(list(SurfaceOp)), sources=st.lists(st.integers(0, 2**63 - 1), max_size=5),
    epoch=st.integers(-(2**63), 2**63 - 1), ignorable=st.booleans(), turn_id=maybe_id,
    step_id=maybe_id, prev=maybe_id, typ=st.text(max_size=20),
    sealed=st.lists(sealed_part, max_size=3), version=st.sampled_from(["v1", "current", "next"]),
)
def test_the_compiled_writer_writes_exactly_the_bytes_fastavro_writes(
    session_id: str, seq: int, time: int, data: Any, op: SurfaceOp, sources: list[int],
    epoch: int, ignorable: bool, turn_id: str | None, step_id: str | None, prev: str | None,
    typ: str, sealed: list[SealedPart], version: str,
) -> None:
    schema = {"v1": V1, "current": CURRENT, "next": _next()}[version]
    codec = AvroCodec([schema])
    # every shipped layout is compiled, from record dicts and straight from events
    assert codec._compiled is not None and codec._from_event is not None
    e = make_event(session_id=session_id, seq=seq, event_id="e", time=time, type=typ,
                   data=data, surface_op=op, source_event_seqs=sources,
                   writer=Writer("w", epoch), ignorable=ignorable, turn_id=turn_id,
                   step_id=step_id, prev_event_id=prev)
    if version != "v1":
        e = e.replace(sealed=tuple(sealed))
    rec = record_of(e, surface_op=op.value, writer={"id": "w", "epoch": epoch},
                    sealed=[p.to_record() for p in e.sealed])
    if version == "next":
        rec["trace_id"] = None
    fields = {f["name"] for f in schema["fields"]}
    expected = raw(schema, {k: v for k, v in rec.items() if k in fields})
    assert codec.encode(e) == expected
    assert codec._compiled(rec, MAGIC + codec.writer.fingerprint) == expected


def test_a_value_the_compiled_writer_cannot_write_is_a_codec_error_naming_the_event() -> None:
    codec = AvroCodec([CURRENT])
    for bad in (event(seq=2**63), event().replace(turn_id=7)):
        with pytest.raises(CodecError, match="cannot encode tool/call seq"):
            codec.encode(bad)


def test_a_schema_construct_the_compiled_writer_does_not_know_falls_back_to_fastavro() -> None:
    odd = copy.deepcopy(CURRENT)
    odd["fields"].append({"name": "extra", "type": ["null", "long", "string"], "default": None})
    codec = AvroCodec([odd])
    assert codec._compiled is None and codec._from_event is None
    e = event()
    assert codec.decode(codec.encode(e)) == e
