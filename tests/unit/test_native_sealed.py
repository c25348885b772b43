"""Sealed content opened by the native fold (AES-256-GCM in the extension) == Python.

Differential, as tests/unit/test_native_fold.py: the same sealed records are folded by
the Python processor (its pipeline's content opener) and by the native path (the
extension opens them with the data keys the Python key store unwraps); every Redis
field, the feed, the index and the dead letters must be equal. Covered: forks whose
seed is sealed with the parent's keys, crypto-shredded classes (the deleted content
must not come back: placeholders only), missing keys, tampered and moved ciphertext
(the Python opener's quarantine, reason included), and generated logs with faults.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.codec import decode, encode
from sessionstream.core.events import Event
from sessionstream.core.fork import fork
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.privacy import DELETED_TEXT, UNAVAILABLE_TEXT, DataClass
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.streams import fold_native
from sessionstream.streams.memory import MemoryDeadLetters, MemorySink
from tests.unit.test_native_fold import _assert_same, _fold, _records, fleets
from tests.unit.test_streams_processor import processor

if not fold_native.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)


def _sealed(cipher: ContentCipher, events: list[Event],
            origins: dict[int, tuple[str, str]] | None = None) -> list[Event]:
    out = []
    for ev in events:
        origin = (origins or {}).get(ev.seq)
        clear, parts = cipher.seal(ev, origin=origin)
        out.append(clear.replace(sealed=parts) if parts else clear)
    return out


def _run(records: list[Record], sizes: list[int], flushes: set[int], store: FileKeyStore,
         chunk: int | None = None) -> tuple[tuple[MemorySink, MemorySink, Any, Any], Any]:
    """Fold with two pipelines (each its own opener) over the same key store."""
    def pipeline() -> ReaderPipeline:
        return ReaderPipeline.default(opener=SealedContentOpener(ContentCipher(store, "default")))
    py_sink, na_sink = MemorySink(), MemorySink()
    py_dlq, na_dlq = MemoryDeadLetters(), MemoryDeadLetters()
    py = processor(py_sink, pipeline(), dead_letters=py_dlq)
    na = processor(na_sink, pipeline(), dead_letters=na_dlq, fold="native")
    if chunk is not None:
        py.codec.chunk = na.codec.chunk = chunk
    asyncio.run(_fold(py, records, sizes, flushes))
    asyncio.run(_fold(na, records, sizes, flushes))
    return (py_sink, na_sink, py_dlq, na_dlq), na.folder


def _values(sink: MemorySink, sid: str) -> str:
    return "\n".join(v for (_, s), h in sink.hashes.items() if s == sid for v in h.values())


def _fleet(store: FileKeyStore) -> tuple[dict[str, list[Event]], list[tuple[Event, str]]]:
    cipher = ContentCipher(store, "default")
    rng = random.Random(11)
    clear = {f"e{i}": simulate_session(rng, f"e{i}", turns=3, compact_every=2, failures=0.2)
             for i in range(4)}
    logs = {sid: _sealed(cipher, evs) for sid, evs in clear.items()}
    parent = Session.from_events(clear["e0"]) if hasattr(Session, "from_events") else None
    if parent is not None:
        seed_at = next(i for i, e in enumerate(clear["e0"])
                       if i > 2 and e.type == "turn/end") + 1
        child = fork(parent, "e0-fork", at=seed_at, writer=clear["e0"][0].writer)
        origins = {e.seq: ("e0", clear["e0"][e.seq].event_id) for e in child.events[1:-1]}
        logs["e0-fork"] = _sealed(cipher, list(child.events), origins)
    merged = [(e, sid) for k in range(max(map(len, logs.values())))
              for sid, evs in logs.items() if k < len(evs) for e in [evs[k]]]
    return clear, merged


def test_sealed_sessions_are_opened_natively_and_fold_as_in_python(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    clear, merged = _fleet(store)
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(_records(merged, 3), [53], {2}, store)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert sum(bool(e.sealed) for e, _ in merged) > len(merged) // 3
    assert na._python == set()  # opened in the extension: nothing handed to Python
    message = next(e for e in clear["e1"] if e.type == "user/message")
    assert str(message.data["content"])[:40] in _values(na_sink, "e1")


def test_a_shredded_class_reads_as_deleted_and_its_content_stays_gone(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    clear, merged = _fleet(store)
    store.shred("default", "e1", (DataClass.SURFACE, DataClass.RAW), principal="t",
                reason="test")
    store.shred("default", "e0", (DataClass.SURFACE,), principal="t", reason="test")
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(_records(merged, 2), [29], {1, 4}, store)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert na._python == set()
    folded = _values(na_sink, "e1")
    assert DELETED_TEXT in folded
    for e in clear["e1"]:
        if e.type in ("user/message", "assistant/message") and e.data.get("content"):
            assert str(e.data["content"]) not in folded
    # the fork's inherited seed was sealed with e0's keys: deleting e0 reaches it
    if "e0-fork" in {s for _, s in merged}:
        assert DELETED_TEXT in _values(na_sink, "e0-fork")


def test_missing_keys_read_as_unavailable_as_in_python(tmp_path: Path) -> None:
    _, merged = _fleet(FileKeyStore(tmp_path / "keys"))
    elsewhere = FileKeyStore(tmp_path / "another-node")  # has none of these keys
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(_records(merged, 2), [40], set(), elsewhere)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert na._python == set()
    assert UNAVAILABLE_TEXT in _values(na_sink, "e2")


def _tamper(ev: Event, how: str, other: Event | None = None) -> Event:
    part = ev.sealed[0]
    if how == "flip":
        ct = bytes([part.ciphertext[0] ^ 1]) + part.ciphertext[1:]
        moved = type(part)(part.data_class, part.key_session, part.origin_event_id,
                           part.paths, part.nonce, ct)
        return ev.replace(sealed=(moved, *ev.sealed[1:]))
    assert other is not None  # a part sealed for another event of the session
    return ev.replace(sealed=other.sealed)


@pytest.mark.parametrize("how", ["flip", "moved"])
def test_tampered_or_moved_ciphertext_quarantines_as_the_python_opener(
        tmp_path: Path, how: str) -> None:
    store = FileKeyStore(tmp_path / "keys")
    _, merged = _fleet(store)
    sealed = [i for i, (e, s) in enumerate(merged) if s == "e2" and e.sealed
              and e.type == "user/message"]
    victim, donor = sealed[1], sealed[0]
    ev = merged[victim][0]
    merged[victim] = (_tamper(ev, how, merged[donor][0]), "e2")
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(_records(merged, 2), [31], {3}, store)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    meta = na_sink.hashes[(1, "e2")]["meta"]
    assert '"content_unavailable"' in meta
    assert na._python == {"e2"}  # handed to the Python opener, which gave the verdict


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.sets(st.sampled_from(list(DataClass))), st.booleans())
def test_native_open_equals_python_on_generated_sealed_logs(
        case: tuple[list[Record], list[int], set[int], int], shred: set[DataClass],
        tamper: bool) -> None:
    records, sizes, flushes, chunk = case
    with tempfile.TemporaryDirectory() as tmp:
        store = FileKeyStore(Path(tmp) / "keys")
        cipher = ContentCipher(store, "default")
        out = []
        for r in records:
            try:
                ev = decode(r.value or b"")
            except Exception:
                out.append(r)  # corrupt on purpose: stays a dead letter
                continue
            if ev.format_version > 1 or ev.type.startswith("alien/"):
                out.append(r)
                continue
            sealed = cipher.seal_event(ev)
            if tamper and sealed.sealed and sealed.session_id == "s0" and sealed.seq % 5 == 3:
                sealed = _tamper(sealed, "flip")
            out.append(Record(r.topic, r.partition, r.offset, r.key, encode(sealed)))
        if shred:
            store.shred("default", "s0", tuple(shred), principal="t", reason="test")
        (py_sink, na_sink, py_dlq, na_dlq), _ = _run(out, sizes, flushes, store, chunk)
        _assert_same(py_sink, na_sink, py_dlq, na_dlq)


class _Clock:
    """A monotonic clock the test moves (the key store's shred-feed interval and ages)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _kept_keys_case(tmp_path: Path) -> tuple[list[Event], list[Event], int, FileKeyStore,
                                              Path]:
    """One sealed session (keys made by a writer's store) and where to split it in two
    batches (at a turn's start: the second batch has content of its own)."""
    root = tmp_path / "keys"
    writer = FileKeyStore(root)
    clear = simulate_session(random.Random(5), "k1", turns=4)
    sealed = _sealed(ContentCipher(writer, "default"), clear)
    half = next(i for i, e in enumerate(clear) if i > len(clear) // 2 and e.type == "turn/start")
    return clear, sealed, half, writer, root


def _two_batches(sealed: list[Event], half: int, store: FileKeyStore, native: bool,
                 between: Any) -> tuple[MemorySink, Any]:
    sink = MemorySink()
    proc = processor(sink, ReaderPipeline.default(
        opener=SealedContentOpener(ContentCipher(store, "default"))),
        fold="native" if native else "python")
    records = _records([(e, "k1") for e in sealed], 1)

    async def go() -> None:
        await proc.fold(records[:half])
        await proc.flush()
        between()
        await proc.fold(records[half:])
        await proc.flush()
    asyncio.run(go())
    return sink, proc.folder


def _contents(events: list[Event]) -> list[str]:
    return [str(e.data["content"]) for e in events
            if e.type in ("user/message", "assistant/message") and e.data.get("content")]


@pytest.mark.parametrize("where", ["another process", "this process"])
def test_a_key_shredded_between_two_batches_is_not_used_from_the_kept_keys(
        tmp_path: Path, where: str) -> None:
    sinks = {}
    for native in (False, True):  # each with its own keys: the shred is for good
        clear, sealed, half, writer, root = _kept_keys_case(tmp_path / f"native-{native}")
        clock = _Clock()
        reader = FileKeyStore(root, monotonic=clock)
        asked: list[tuple[str, str]] = []
        plain = reader.lookup_until

        def counted(tenant: str, sid: str, cls: DataClass, plain: Any = plain,
                    asked: list[tuple[str, str]] = asked) -> Any:
            asked.append((sid, cls.value))
            return plain(tenant, sid, cls)
        reader.lookup_until = counted  # type: ignore[method-assign]
        shredder = writer if where == "another process" else reader

        def between(shredder: FileKeyStore = shredder, clock: _Clock = clock,
                    asked: list[tuple[str, str]] = asked) -> None:
            asked.clear()
            shredder.shred("default", "k1", (DataClass.SURFACE, DataClass.RAW),
                           principal="t", reason="test")
            clock.now += 2.5  # past the shred feed's interval: the reader follows it
        sinks[native], driver = _two_batches(sealed, half, reader, native, between)
        if native:
            assert driver._python == set()  # opened in the extension, both batches
            assert ("k1", "surface") in asked  # asked again: the kept key was dropped
    py_sink, na_sink = sinks[False], sinks[True]
    assert na_sink.hashes == py_sink.hashes  # the Python reference saw the shred there too
    folded = _values(na_sink, "k1")
    assert DELETED_TEXT in folded
    for text in _contents(clear[half:]):
        assert text not in folded  # the shredded content never comes back in clear


def test_kept_keys_are_reused_across_batches_until_the_store_would_ask_again(
        tmp_path: Path) -> None:
    clear, sealed, half, _, root = _kept_keys_case(tmp_path)
    for later, asks_again in ((1.0, False), (61.0, True)):  # max_age_s is 60
        clock = _Clock()
        reader = FileKeyStore(root, monotonic=clock)
        asked: list[str] = []
        plain = reader.lookup_until

        def counted(tenant: str, sid: str, cls: DataClass, plain: Any = plain,
                    asked: list[str] = asked) -> Any:
            asked.append(cls.value)
            return plain(tenant, sid, cls)
        reader.lookup_until = counted  # type: ignore[method-assign]

        def between(clock: _Clock = clock, later: float = later,
                    asked: list[str] = asked) -> None:
            asked.clear()
            clock.now += later
        sink, driver = _two_batches(sealed, half, reader, True, between)
        assert driver._python == set()
        assert bool(asked) is asks_again, (later, asked)
        assert _contents(clear[half:])[0][:40] in _values(sink, "k1")


def test_the_store_epoch_changes_on_shreds_followed_from_the_feed_and_on_rewrap(
        tmp_path: Path) -> None:
    clock = _Clock()
    a, b = FileKeyStore(tmp_path / "k", monotonic=clock), FileKeyStore(tmp_path / "k")
    a.data_key("default", "s", DataClass.SURFACE)
    e0, _ = a.cache_epoch("default")
    assert a.cache_epoch("default")[0] == e0  # nothing happened
    b.shred("default", "s", (DataClass.SURFACE,), principal="t", reason="x")
    assert a.cache_epoch("default")[0] == e0  # not followed yet (the feed interval)
    clock.now += 2.5
    e1, now = a.cache_epoch("default")
    assert e1 != e0 and now == clock.now
    found, until = a.lookup_until("default", "s", DataClass.SURFACE)
    assert found.key is None and until == clock.now + 60.0
    missing, until = a.lookup_until("default", "other", DataClass.RAW)
    assert missing.key is None and until == clock.now  # a missing key is not kept
    a.rewrap("default")
    assert a.cache_epoch("default")[0] != e1


def test_parts_compressed_before_sealing_are_inflated_natively_as_in_python(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Content is DEFLATE-framed before it is sealed once it gains (core/privacy.py);
    the extension opens framed and plain parts alike, and folds as Python does."""
    from sessionstream.core import privacy

    framed = []
    real = privacy.compress_plaintext

    def counting(text: bytes) -> bytes:
        out = real(text)
        framed.append(out[:1] == b"\x00")
        return out

    monkeypatch.setattr(privacy, "compress_plaintext", counting)
    store = FileKeyStore(tmp_path / "keys")
    _, merged = _fleet(store)
    assert any(framed) and not all(framed)  # both kinds of parts are in the logs
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(_records(merged, 3), [53], {2}, store)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert na._python == set()  # every part opened in the extension
