"""The native append path (native/src/append.rs) against the Python reference.

Differential: for generated data the native walk returns what ``check_and_freeze`` +
``canonical_dumps`` return (and declines exactly what they refuse); for generated
appends (valid session walks, with bad drafts mixed in) the writer's two append paths
as they ship (``producers.append_path``: ``NativePath`` and ``ReferencePath``, what
``SessionWriter`` calls) raise the same error class and message, stamp the same events
and produce the same record bytes, clear and sealed (the nonce injected, so sealed
records compare byte for byte; a record sealed with random nonces is opened by the
Python opener).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core import codec
from sessionstream.core.events import CountingClock, Draft, Event, SequentialIds, SurfaceOp
from sessionstream.core.jsonvalue import (
    FrozenList,
    FrozenMap,
    canonical_dumps,
    check_and_freeze,
    thaw,
)
from sessionstream.core.session import Session
from sessionstream.governance import ContentCipher
from sessionstream.governance.crypto import AesGcm
from sessionstream.governance.keys import FileKeyStore, TenantKeys
from sessionstream.producers import native_append as na
from sessionstream.producers.append_path import NativePath, ReferencePath
from tests.unit.strategies import random_log

pytestmark = pytest.mark.skipif(na.why_not(codec.encode) is not None,
                                reason="the native extension is not built")

NONCE = bytes(range(12))


class FixedNonceAesGcm(AesGcm):
    """The reference AEAD with the nonce the native path is handed (tests only)."""

    def seal(self, key: bytes, plaintext: bytes, ad: bytes) -> tuple[bytes, bytes]:
        return NONCE, self._cipher(key).encrypt(NONCE, plaintext, ad)


def fixed_nonces(n: int) -> bytes:
    return NONCE * (n // len(NONCE))


_KEYS = Path(tempfile.mkdtemp(prefix="native-append-keys-"))


def cipher(aead: AesGcm | None = None) -> ContentCipher:
    return ContentCipher(FileKeyStore(_KEYS, TenantKeys(_KEYS / "tenants", create=True)),
                         "default", aead=aead)


def native(c: ContentCipher | None, sid: str, nonces: Any = fixed_nonces) -> na.NativeAppend:
    return na.NativeAppend(codec.encode, c, na.writer_header(), sid, nonces=nonces)


#: The topic's record limit the paths are bound to (bytes).
LIMIT = 1 << 20


class Sender:
    """The writer's Kafka sender as the append paths use it: what they produce, in order."""

    def __init__(self) -> None:
        self.produced: list[tuple[bytes, bytes, str]] = []
        self.log: Any = None

    def produce(self, key: bytes, value: bytes, event_id: str) -> None:
        self.produced.append((key, value, event_id))

    def use_log(self, log: Any) -> bool:
        self.log = log
        return True

    @property
    def last(self) -> bytes:
        return self.produced[-1][1]


def new_session(sid: str) -> Session:
    return Session.create(sid, clock=CountingClock(), ids=SequentialIds(sid))


def reference_path(sid: str, c: ContentCipher | None = None) -> ReferencePath:
    """The Python path as ``append_path`` builds it for ``append="python"``."""
    stamper = na.PythonAppend(codec.encode, c)
    stamper.bind(LIMIT)
    return ReferencePath(stamper, new_session(sid), Sender(), LIMIT, {}, None, 1 << 30)


def native_path(sid: str, c: ContentCipher | None = None, nonces: Any = fixed_nonces
                ) -> NativePath:
    """The native path as ``append_path`` builds it for ``append="native"`` (the nonces
    injected: sealed records compare byte for byte)."""
    stamper = native(c, sid, nonces)
    stamper.bind(LIMIT)
    return NativePath(stamper, new_session(sid), Sender(), LIMIT, {}, None, 1 << 30)


# ------------------------------------------------------------------ data


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udfffb", "\x00\x1f\x7f\"\\/\u2028", "é😀"]),
)
bad_leaves = st.sampled_from([(1, 2), b"x", {1, 2}, frozenset(), object(), 1j])
json_like = st.recursive(
    st.one_of(scalars, bad_leaves),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(["\ud800", "z"])),
                        inner, max_size=4),
        st.dictionaries(st.one_of(st.integers(0, 3), st.none()), inner, max_size=2),
    ),
    max_leaves=12,
)


def same_shape(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)  # insertion order kept
        for k in a:
            same_shape(a[k], b[k])
    elif isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same_shape(x, y)
    elif isinstance(a, float) and math.isnan(a):
        raise AssertionError("NaN accepted")
    else:
        assert a == b


@settings(max_examples=400, deadline=None)
@given(json_like)
def test_native_freeze_matches_check_and_freeze_and_canonical_dumps(value: Any) -> None:
    path = native(None, "s")
    got = path.freeze(value)
    try:
        want = check_and_freeze(value)
    except Exception:
        assert got is None  # declined: the Python path names the problem
        return
    assert got is not None
    frozen, text, size = got
    same_shape(frozen, want)
    assert text == canonical_dumps(want)
    assert size == len(text.encode())


def test_native_freeze_declines_deep_nesting_and_copies_frozen_input() -> None:
    path = native(None, "s")
    ok: Any = []
    for _ in range(63):
        ok = [ok]
    assert path.freeze({"a": ok}) is None  # 65 levels with the dict
    assert path.freeze(ok) is not None  # 64 levels
    src = FrozenMap({"k": FrozenList([1, {"x": 2}])})
    frozen, text, _ = path.freeze(src)
    assert frozen == src and frozen is not src and text == '{"k":[1,{"x":2}]}'


# --------------------------------------------------------------- appends


def bad_drafts(draft: Draft) -> st.SearchStrategy[Draft]:
    data = thaw(draft.data) if isinstance(draft.data, dict) else {}
    return st.one_of(
        st.builds(lambda v: Draft(draft.type, {**data, "bad": v}, draft.surface_op,
                                  draft.source_event_seqs, draft.turn_id, draft.step_id),
                  bad_leaves | st.sampled_from([float("nan"), 2**63, "\ud800"])),
        st.just(Draft("nope/unknown", data)),
        st.just(Draft(draft.type, {}, draft.surface_op, (), draft.turn_id, draft.step_id)),
        st.just(Draft(draft.type, data, draft.surface_op, draft.source_event_seqs,
                      "no-such-turn", draft.step_id)),
        st.just(Draft("turn/start", {})),
        st.just(Draft("tool/result", {"call_id": "never", "status": "ok", "content": "x"})),
        st.just(Draft(draft.type, {**data, "extra_field": {"x": [1, None, "y"]}},
                      draft.surface_op, draft.source_event_seqs, draft.turn_id,
                      draft.step_id)),
        # The rules the extension holds for stateless types: each one broken.
        st.sampled_from(list(SurfaceOp)).map(
            lambda op: Draft(draft.type, data, op, (), draft.turn_id, draft.step_id)),
        st.just(Draft(draft.type, data, draft.surface_op, (0,), draft.turn_id,
                      draft.step_id)),
        st.just(Draft(draft.type, data, draft.surface_op, (), draft.turn_id,
                      "no-such-step")),
        st.just(Draft(draft.type, data, "sideways", (), draft.turn_id, draft.step_id)),
        st.sampled_from([True, 7, 1.5, "s", None, [1], {"a": 1}, "bogus", "done"]).map(
            lambda v: Draft(draft.type, {k: v for k in data}, draft.surface_op,
                            draft.source_event_seqs, draft.turn_id, draft.step_id)),
        st.just(Draft(draft.type, [data], draft.surface_op, draft.source_event_seqs,
                      draft.turn_id, draft.step_id)),
    )


def outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # the comparison is of class and message
        return "error", (type(exc), str(exc))


def run_both(seed: int, mix: Any, encrypted: bool) -> int:
    """Replay a generated log's drafts (bad ones mixed in) through both paths."""
    log = random_log(seed, steps=60)
    sid = log[0].session_id
    ref = reference_path(sid, cipher(FixedNonceAesGcm()) if encrypted else None)
    nat = native_path(sid, cipher() if encrypted else None)
    checked = 0
    for e in log[1:]:
        if e.ignorable:
            continue  # a plugin type: admitted by readers, never appended
        good = Draft(e.type, thaw(e.data), e.surface_op, e.source_event_seqs, e.turn_id,
                     e.step_id)
        drafts = [mix(bad_drafts(good)), good] if mix(st.booleans()) else [good]
        for draft in drafts:
            a = outcome(lambda d=draft: ref.append(d))
            b = outcome(lambda d=draft: nat.append(d))
            assert a[0] == b[0], (draft, a, b)
            if a[0] == "error":
                assert a[1] == b[1]
                continue
            ev_a, ev_b = a[1], b[1]
            assert ev_a == ev_b
            assert ev_b.data_json() == canonical_dumps(ev_b.data)
            assert nat.sender.last == ref.sender.last, draft
            assert nat.sender.produced[-1][2] == ev_b.event_id
            checked += 1
    assert ref.session.events == nat.session.events
    assert ref.sender.produced == nat.sender.produced
    assert [e.event_id for e in nat.mine] == nat.waiting == list(nat.records)
    return checked


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.booleans(), st.data())
def test_native_appends_match_python_bytes_and_errors(seed: int, encrypted: bool,
                                                      data: st.DataObject) -> None:
    assert run_both(seed, data.draw, encrypted) > 0


def test_native_rules_cover_the_stateless_types_and_stamp_them_whole() -> None:
    """The chunk (and plugin types) take the one-call path: the session's log grows,
    the event is the reference's, the record is the codec's; stateful types do not."""
    sid = "whole"
    ref = Session.create(sid, clock=CountingClock(), ids=SequentialIds(sid))
    nat = Session.create(sid, clock=CountingClock(), ids=SequentialIds(sid))
    path = native(None, sid)
    assert path.stamp is not None
    assert path._app.fills_in_place  # Event's slot layout checked out
    assert path.stamp(nat, "turn/start", {}, None, (), None, None, True) is None
    assert len(nat.events) == 1  # declined: nothing changed
    for d in (Draft("turn/start", {}), Draft("step/start", {}),
              Draft("request/header", {"provider": "p", "model": "m"})):
        ref.append(d)
        nat.append(d)
    for i, d in enumerate([Draft("assistant/chunk", {"text": "héllo", "index": 3}),
                           Draft("todo/add", {"id": "t1", "text": "x"}),
                           Draft("todo/update", {"id": "t1", "status": "done"})]):
        want = ref.append(d)
        done = path.stamp(nat, d.type, d.data, None, [], None, None, True)
        assert done is not None, d
        got, record = done
        assert got == want and got.lossless_checked and got.data_json() == want.data_json()
        assert record == codec.encode(want)
        assert nat.events[-1] is got and len(nat.events) == len(ref.events)
        assert got.prev_event_id == ref.events[-2].event_id, i
    assert path.stamp(nat, "todo/update", {"id": "t1", "status": "nope"}, None, (), None,
                      None, True) is None  # the enum: left to the core, which names it
    assert ref.events == nat.events
    assert na.rules_for(nat, "assistant/chunk") is not None
    assert all(na.rules_for(nat, t) is None for t in na.STATEFUL_TYPES)


def test_a_stamped_event_keeps_no_second_copy_of_its_content_once_its_record_is_written(
) -> None:
    """The record carries the data's text, so the event the session keeps for its life
    holds the value only; data_json renders the same canonical text on demand. Without
    a record (Python encodes it next) the event keeps the text the walk rendered."""
    session = Session.create("text")
    path = native(None, "text")
    for d in (Draft("turn/start", {}), Draft("step/start", {})):
        session.append(d)
    data = {"text": "héllo " * 50, "index": 7}
    done = path.stamp(session, "assistant/chunk", data, None, (), None, None, True)
    assert done is not None and done[1] is not None
    ev, record = done
    assert ev._text is None  # no copy of the content beside the value
    carried = codec.decode(record).data_json()  # the text the record carries
    assert ev.data_json() == carried == canonical_dumps(check_and_freeze(data))
    no_record = path.stamp(session, "assistant/chunk", data, None, (), None, None, False)
    assert no_record is not None and no_record[1] is None
    assert no_record[0]._text == carried  # rendered once, for the encode that follows


def test_native_stamp_uses_its_own_ids_and_clock_for_the_defaults() -> None:
    import re
    import time

    session = Session.create("ids")
    path = native(None, "ids")
    for d in (Draft("turn/start", {}), Draft("step/start", {})):
        session.append(d)
    before = time.time_ns() // 1_000_000
    done = path.stamp(session, "assistant/chunk", {"text": "x"}, None, (), None, None, True)
    assert done is not None
    ev, record = done
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                        ev.event_id)
    assert before <= ev.time <= time.time_ns() // 1_000_000
    assert codec.decode(record) == ev
    ids = {path.stamp(session, "assistant/chunk", {"text": "x"}, None, (), None, None,
                      False)[0].event_id for _ in range(600)}  # type: ignore[index]
    assert len(ids) == 600


def test_native_sealed_record_opens_with_the_python_opener() -> None:
    c = cipher()
    nat = native_path("open-me", c, nonces=os.urandom)
    nat.append(Draft("turn/start", {}))
    nat.append(Draft("step/start", {}))
    nat.append(Draft("request/header", {"provider": "p", "model": "m"}))
    ev = nat.append(Draft("assistant/message", {
        "content": "secret ✓", "stop_reason": "tool_use", "surprise": [1, 2],
        "reasoning": [{"api": "anthropic", "type": "thinking", "thinking": "hidden",
                       "signature": "sig"}],
        "tool_calls": [{"call_id": "c1", "name": "t", "arguments": {"q": "x/y~z"}}]}))
    record = nat.sender.last
    wire = codec.decode(record)
    assert wire.sealed and "secret" not in wire.data_json() and "hidden" not in wire.data_json()
    assert [p.data_class.value for p in wire.sealed] == ["surface", "reasoning"]
    reference = c.seal_event(ev)
    assert [(p.data_class, p.paths) for p in wire.sealed] == [
        (p.data_class, p.paths) for p in reference.sealed]
    assert wire.data == reference.data
    opened = c.open(wire, wire.sealed)
    assert not opened.unopened
    assert opened.data == ev.data


def test_native_setting_refuses_another_codec_and_python_setting_is_the_reference() -> None:
    def other(e: Event) -> bytes:
        return b""

    with pytest.raises(na.NativeAppendUnavailable, match="another codec"):
        na.select("native", other, None, "s")
    assert not na.select("auto", other, None, "s").native
    assert not na.select("python", codec.encode, None, "s").native
    assert na.select("auto", codec.encode, None, "s").native
    with pytest.raises(na.NativeAppendUnavailable, match="not an append path"):
        na.select("fast", codec.encode, None, "s")


def test_event_ids_of_a_forked_child_never_repeat_the_parents() -> None:
    from sessionstream.core.events import uuid4_ids

    uuid4_ids()  # the parent now holds unused random pieces
    from sessionstream._native import Appender  # and so does the extension's id buffer

    Appender.uuid4()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(w, ",".join([uuid4_ids() for _ in range(40)]
                             + [Appender.uuid4() for _ in range(40)]).encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 1 << 16).decode().split(",")
    os.close(r)
    os.waitpid(pid, 0)
    parent = [uuid4_ids() for _ in range(40)] + [Appender.uuid4() for _ in range(40)]
    assert len(child) == 80 and not set(child) & set(parent)
    assert len(set(parent)) == 80


def test_native_sealing_keeps_the_key_only_while_the_store_would_and_sees_a_shred() -> None:
    """The writer keeps a data key while its store would answer the same; a shred in
    this process ends that at once: the next sealed append raises as Python's does."""
    from sessionstream.core.errors import ContentKeyShredded
    from sessionstream.core.sealed import DataClass

    c = cipher()
    sid = "shred-live"
    nat = native_path(sid, c)
    for d in (Draft("turn/start", {}), Draft("step/start", {})):
        nat.append(d)
    for text in ("one", "one more"):  # the first creates the key (a new generation)
        nat.append(Draft("assistant/chunk", {"text": text}))
        assert codec.decode(nat.sender.last).sealed  # sealed in the stamp call itself
    keys = nat._native._keys
    assert "raw" in keys  # kept...
    _key, until, generation = keys["raw"]
    assert generation == c.store.generation and until > c.store.monotonic()
    c.store.shred("default", sid, (DataClass.RAW,), principal="t", reason="test")
    assert c.store.generation != generation  # ...until this process shreds it
    with pytest.raises(ContentKeyShredded):
        nat.append(Draft("assistant/chunk", {"text": "two"}))
    ref = Session.create(sid, clock=CountingClock(), ids=SequentialIds(sid))
    for d in (Draft("turn/start", {}), Draft("step/start", {})):
        ref.append(d)
    ref.append(Draft("assistant/chunk", {"text": "one"}))
    with pytest.raises(ContentKeyShredded):
        c.seal_event(ref.append(Draft("assistant/chunk", {"text": "two"})))
