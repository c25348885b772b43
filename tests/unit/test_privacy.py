"""Data classes, sealing and opening event content, the key hierarchy (file store)."""

from __future__ import annotations

import json
import random
import stat
from pathlib import Path

import pytest

from sessionstream.core.catalog import default_catalog
from sessionstream.core.errors import (
    ContentKeyShredded,
    LegalHold,
    MovedCiphertext,
    SealedContentError,
)
from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import (
    CLASSIFICATION,
    DELETED_TEXT,
    SEALED_TEXT,
    UNAVAILABLE_TEXT,
    DataClass,
    KeyState,
    SealedPart,
    associated_data,
    embedded,
    render,
    split,
)
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore, TenantKeyRing, TenantKeys
from tests.unit.logbuilder import LogBuilder

DOCS = Path(__file__).resolve().parents[2] / "docs"
CANARY = "canary-7f3a"


def _declared(spec_fields: dict, prefix: str = "") -> set[str]:
    names = set()
    for name, spec in spec_fields.items():
        full = prefix + name
        names.add(full)
        if spec.obj is not None:
            names |= _declared(spec.obj.fields, full + ".")
        if spec.items is not None and spec.items.obj is not None:
            names |= _declared(spec.items.obj.fields, full + "[].")
    return names


def test_every_field_the_catalog_declares_is_classified_and_nothing_else() -> None:
    catalog = default_catalog()
    assert set(CLASSIFICATION) == {t.name for t in catalog}
    for etype in catalog:
        assert set(CLASSIFICATION[etype.name]) == _declared(dict(etype.schema.fields)), etype.name


def test_operations_md_data_class_table_is_generated_from_the_classification() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    assert embedded(text) == render(), (
        "docs/operations.md's data-class table is stale: run python -m sessionstream.core.privacy")


def test_metadata_the_rules_need_is_never_content() -> None:
    for type_name, fields in CLASSIFICATION.items():
        for name in ("call_id", "tool_calls[].call_id", "tool_calls[].name", "status", "reason",
                     "shadowed_seqs", "compaction_id", "usage.input_tokens", "seed_length"):
            assert fields.get(name) is None, (type_name, name)


def _cipher(tmp_path: Path, tenant: str = "default") -> ContentCipher:
    return ContentCipher(FileKeyStore(tmp_path / "keys"), tenant)


def _canary_log() -> list[Event]:
    b = LogBuilder("s1")
    b.add("turn/start")
    b.add("step/start")
    b.user(f"{CANARY} user")
    b.add("assistant/chunk", {"text": f"{CANARY} chunk", "index": 0})
    b.assistant(f"{CANARY} said", calls=[("c1", "search")])
    b.add("tool/call", {"call_id": "c1", "name": "search", "arguments": {"q": CANARY}})
    b.result("c1", content=f"{CANARY} result", operation_id="op-1")
    b.add("step/end")
    b.add("turn/end", {"reason": "completed", "detail": f"{CANARY} detail"})
    b.add("context/snapshot", {"snapshot_id": "x1", "content": f"{CANARY} ctx"})
    b.add("goal/set", {"goal": f"{CANARY} goal"})
    b.add("business/filters", {"filters": {"region": CANARY}})
    return b.events


def test_sealed_events_hold_no_content_and_keep_every_metadata_field(tmp_path: Path) -> None:
    cipher = _cipher(tmp_path)
    for event in _canary_log():
        clear, sealed = cipher.seal(event)
        text = clear.data_json() + json.dumps([p.to_json() for p in sealed])
        assert CANARY not in text, event.type
        default_catalog().validate(clear.type, clear.data)  # still valid for the catalog
        table = CLASSIFICATION[event.type]
        for name, cls in table.items():
            container = any(n.startswith((name + ".", name + "[]")) for n in table)
            if cls is None and not container and "." not in name and name in event.data:
                assert clear.data[name] == event.data[name], (event.type, name)


def test_open_puts_back_exactly_what_was_sealed(tmp_path: Path) -> None:
    cipher = _cipher(tmp_path)
    events = simulate_session(random.Random(3), "s1", turns=4, compact_every=2)
    for event in events:
        clear, sealed = cipher.seal(event)
        opened = cipher.open(clear, sealed)
        assert opened.data == event.data and opened.unopened == ()


def test_placeholders_keep_the_kind_the_catalog_declares() -> None:
    data = {"content": "secret", "tool_calls": [
        {"call_id": "c1", "name": "f", "arguments": {"a": 1}}]}
    out = split("assistant/message", data)
    assert thaw(out.clear) == {"content": SEALED_TEXT, "tool_calls": [
        {"call_id": "c1", "name": "f", "arguments": {}}]}
    assert {p.data_class for p in out.parts} == {DataClass.SURFACE}
    assert out.parts[0].paths == ("/content", "/tool_calls/0/arguments")


def test_a_field_the_catalog_does_not_declare_is_sealed_in_the_types_default_class() -> None:
    out = split("user/message", {"content": "x", "mood": "secret"})
    assert "secret" not in json.dumps(out.clear)
    assert out.parts[0].paths == ("/content", "/mood")
    raw = split("tool/call", {"call_id": "c", "name": "n", "arguments": {}, "env": "secret"})
    assert raw.parts[0].data_class is DataClass.RAW and "/env" in raw.parts[0].paths


def _move(part: SealedPart, **changes: object) -> SealedPart:
    fields = {f: getattr(part, f) for f in part.__dataclass_fields__}
    fields.update(changes)
    return SealedPart(**fields)  # type: ignore[arg-type]


def test_ciphertext_moved_to_another_event_is_refused(tmp_path: Path) -> None:
    cipher = _cipher(tmp_path)
    events = _canary_log()
    a, b = events[3], events[5]  # user/message, assistant/message
    clear_a, sealed_a = cipher.seal(a)
    clear_b, _ = cipher.seal(b)
    # the whole sealed record pasted into another event
    with pytest.raises(MovedCiphertext):
        cipher.open(clear_b, sealed_a)
    # rewritten to claim the other event: authentication fails
    with pytest.raises(MovedCiphertext):
        cipher.open(clear_b, [_move(sealed_a[0], origin_event_id=b.event_id)])
    # same event, other seq / class / paths: authentication fails
    with pytest.raises(MovedCiphertext):
        cipher.open(clear_a.replace(seq=a.seq + 1), sealed_a)
    with pytest.raises(MovedCiphertext):
        cipher.open(clear_a, [_move(sealed_a[0], paths=("/steering",))])
    # tampered ciphertext
    flipped = bytes([sealed_a[0].ciphertext[0] ^ 1]) + sealed_a[0].ciphertext[1:]
    with pytest.raises(MovedCiphertext):
        cipher.open(clear_a, [_move(sealed_a[0], ciphertext=flipped)])
    # another tenant's reader (other key ring) cannot open it
    other = ContentCipher(FileKeyStore(tmp_path / "other"), "default")
    other.store.data_key("default", "s1", DataClass.SURFACE)
    with pytest.raises(MovedCiphertext):
        other.open(clear_a, sealed_a)


def test_associated_data_layout_is_length_prefixed_and_ends_with_the_seq() -> None:
    ad = associated_data("t", "s", 7, "e", "user/message", "surface", ["/content"])
    assert ad == (b"sessionstream-aead-v1" + b"\x00\x00\x00\x01t" + b"\x00\x00\x00\x01s"
                  + b"\x00\x00\x00\x01e" + b"\x00\x00\x00\x0cuser/message"
                  + b"\x00\x00\x00\x07surface" + b"\x00\x00\x00\x08/content"
                  + b"\x00\x00\x00\x00\x00\x00\x00\x07")


def test_a_shredded_class_reads_as_deleted_and_the_surface_stays_paired(tmp_path: Path) -> None:
    cipher = _cipher(tmp_path)
    sealed = [cipher.seal(e) for e in _canary_log()]
    shredded = cipher.store.shred("default", "s1", (DataClass.SURFACE,), principal="ops",
                                  reason="user request")
    assert [s.data_class for s in shredded] == [DataClass.SURFACE]
    opened = []
    for clear, parts in sealed:
        result = cipher.open(clear, parts)
        opened.append(clear.replace(data=result.data))
        for u in result.unopened:
            assert u.data_class is DataClass.SURFACE and u.state is KeyState.SHREDDED
    session = Session.from_events(opened)  # every write-time rule still holds
    messages = list(session.derive_messages())
    text = json.dumps([m.content for m in messages])
    assert CANARY not in text and DELETED_TEXT in text
    assistant = next(m for m in messages if m.role == "assistant")
    tool = next(m for m in messages if m.role == "tool")
    assert [c.call_id for c in assistant.tool_calls] == [tool.call_id]
    # raw and business content of the same session is still readable
    goal = next(e for e in opened if e.type == "goal/set")
    assert goal.data["goal"] == f"{CANARY} goal"
    with pytest.raises(ContentKeyShredded):
        cipher.seal(_canary_log()[3])


def test_a_missing_key_reads_as_unavailable(tmp_path: Path) -> None:
    clear, sealed = _cipher(tmp_path / "a").seal(_canary_log()[3])
    opened = _cipher(tmp_path / "b").open(clear, sealed)
    assert opened.data["content"] == UNAVAILABLE_TEXT
    assert opened.unopened[0].state is KeyState.MISSING


def test_tenant_key_rotation_rewraps_and_keeps_everything_readable(tmp_path: Path) -> None:
    cipher = _cipher(tmp_path)
    sealed = [cipher.seal(e) for e in _canary_log()]
    assert cipher.store.rotate("default") == 3  # raw, surface, business of s1
    fresh = _cipher(tmp_path)  # another process: no cached keys
    ring = fresh.store.tenant_keys.ring("default")
    assert ring is not None and ring.current == 2
    # retire version 1: the data keys no longer need it
    path = fresh.store.tenant_keys.path("default")
    assert path is not None
    path.write_text(json.dumps(TenantKeyRing(2, {2: ring.versions[2]}).to_json()))
    fresh = _cipher(tmp_path)
    for (clear, parts), original in zip(sealed, _canary_log(), strict=True):
        assert fresh.open(clear, parts).data == original.data


def test_key_files_are_private_and_a_race_creates_one_key(tmp_path: Path) -> None:
    one, two = FileKeyStore(tmp_path), FileKeyStore(tmp_path)
    k1 = one.data_key("default", "s1", DataClass.RAW)
    k2 = two.data_key("default", "s1", DataClass.RAW)
    assert k1 == k2
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    assert all(k1 not in p.read_bytes() for p in files)  # only wrapped keys at rest


def test_a_legal_hold_refuses_shredding_until_released(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path)
    store.data_key("default", "s1", DataClass.RAW)
    store.place_hold("default", None, reason="litigation 42", principal="legal")
    with pytest.raises(LegalHold, match="litigation 42"):
        store.shred("default", "s1", (DataClass.RAW,), principal="ops", reason="x")
    store.release_hold("default", None)
    store.place_hold("default", "s1", reason="audit", principal="legal")
    with pytest.raises(LegalHold, match="session 's1'"):
        store.shred("default", "s1", (DataClass.RAW,), principal="ops", reason="x")
    store.release_hold("default", "s1")
    assert [s.data_class for s in store.shred("default", "s1", (DataClass.RAW,),
                                              principal="ops", reason="x")] == [DataClass.RAW]
    assert store.lookup("default", "s1", DataClass.RAW).state is KeyState.SHREDDED


def test_tenant_keys_from_the_environment(tmp_path: Path) -> None:
    import base64

    value = "2:" + base64.b64encode(b"k" * 32).decode() + ",1:" + base64.b64encode(
        b"j" * 32).decode()
    keys = TenantKeys(None, env={"acme": value}, create=False)
    ring = keys.ring("acme")
    assert ring is not None and ring.current == 2 and set(ring.versions) == {1, 2}
    assert keys.ring("other") is None
    store = FileKeyStore(tmp_path, keys)
    assert store.lookup("other", "s", DataClass.RAW).state is KeyState.MISSING


def test_an_opted_out_tenant_writes_clear_content(tmp_path: Path) -> None:
    cipher = ContentCipher(FileKeyStore(tmp_path), "default", enabled=False)
    event = _canary_log()[3]
    assert cipher.seal(event) == (event, ())


def test_sealed_events_round_trip_through_jsonl_and_the_codec(tmp_path: Path) -> None:
    from sessionstream.core.codec import decode, encode
    from sessionstream.core.jsonl import dumps_line, parse_jsonl

    cipher = _cipher(tmp_path)
    sealed = []
    for event in _canary_log():
        clear, parts = cipher.seal(event)
        sealed.append(clear.replace(sealed=parts))
    text = "".join(dumps_line(e) + "\n" for e in sealed)
    assert CANARY not in text
    assert parse_jsonl(text) == sealed
    assert [decode(encode(e)) for e in sealed] == sealed
    with pytest.raises(Exception, match=":4: malformed sealed part"):
        parse_jsonl(text.replace('"data_class":"surface"', '"data_class":"secret"', 1))


def test_reconstructability_names_the_lost_sources_and_the_requests_they_break(
        tmp_path: Path) -> None:
    from sessionstream.core.privacy import reconstructability

    b = LogBuilder("s1")
    b.add("turn/start")
    b.add("step/start")
    b.user("private question")
    b.add("request/header", {"provider": "p", "model": "m"})
    b.assistant("answer")
    b.add("assistant/chunk", {"text": "raw chunk"})
    b.add("step/end")
    b.add("turn/end", {"reason": "completed"})
    before = reconstructability(b.events)
    assert before.fully_reconstructable and before.lost == ()
    cipher = _cipher(tmp_path)
    sealed = [cipher.seal_event(e) for e in b.events]
    cipher.store.shred("default", "s1", (DataClass.SURFACE,), principal="p", reason="r")
    opener_events, unopened = [], []
    for e in sealed:
        opened = cipher.open(e, e.sealed)
        opener_events.append(e.replace(data=opened.data, sealed=()))
        unopened += opened.unopened
    r = reconstructability(opener_events, unopened)
    assert not r.fully_reconstructable
    assert [(x.seq, x.data_class) for x in r.lost] == [(3, DataClass.SURFACE),
                                                        (5, DataClass.SURFACE)]
    assert r.requests == {4: False}  # the request after the lost user message
    # offline (a file with the audit event, no reader's knowledge): derived from it
    audit = b.session.append("session/shred", {"classes": ["raw"], "scope": "delete",
                                               "principal": "p", "reason": "r",
                                               "shredded_at": 5})
    offline = reconstructability([*b.events[:-1], audit])
    assert [(x.seq, x.data_class) for x in offline.lost] == [(6, DataClass.RAW)]
    assert offline.requests == {4: True}  # raw content never enters a request
    assert offline.shredded[0]["classes"] == ["raw"]


def test_a_part_long_enough_is_compressed_before_sealing_and_opens_back() -> None:
    """The plaintext of a sealed part: its JSON as is when short or incompressible, else
    0x00 0x01 + raw DEFLATE; both open to the same values, and a plaintext written before
    compression (plain JSON) still opens."""
    from sessionstream.core import privacy

    short = [["hi"]]
    long = [["the same words again " * 20, {"k": "the same words again " * 5}]]
    assert privacy.part_plaintext(short[0])[:1] == b"["
    framed = privacy.part_plaintext(long[0])
    assert framed[:2] == b"\x00\x01"
    assert len(framed) < len(privacy.canonical_dumps(long[0]).encode()) // 3
    for values in (*short, *long):
        assert privacy.part_values(privacy.part_plaintext(values), len(values)) == values
    old = privacy.canonical_dumps(long[0]).encode()  # sealed before compression existed
    assert privacy.part_values(old, 2) == long[0]
    under = ["x" * (privacy.COMPRESS_FROM - 5)]  # its JSON is one byte short
    assert len(privacy.canonical_dumps(under).encode()) == privacy.COMPRESS_FROM - 1
    assert privacy.part_plaintext(under)[:1] == b"["


@pytest.mark.parametrize("plaintext", [
    b"\x00\x02whatever",  # an unknown method
    b"\x00\x01not deflate at all",  # not a DEFLATE stream
    b"\x00",  # framing without a method
])
def test_a_framed_plaintext_that_does_not_inflate_is_a_sealed_content_error(
        plaintext: bytes) -> None:
    from sessionstream.core import privacy

    with pytest.raises(SealedContentError):
        privacy.part_values(plaintext, 1)


def test_a_plaintext_that_inflates_past_the_limit_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    from sessionstream.core import privacy

    monkeypatch.setattr(privacy, "PLAINTEXT_LIMIT", 10_000)
    bomb = privacy.DEFLATE + zlib.compress(b"[" + b"0," * 50_000 + b"0]", 9, -15)
    with pytest.raises(SealedContentError, match="within"):
        privacy.part_values(bomb, 1)
