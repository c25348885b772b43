"""The live worker's batch through the native folder against the Python reference.

Differential, over the in-memory sink (the integration tests run the same over Kafka
and Redis): generated logs with faults (tests/unit/test_native_fold.py's strategy)
are processed batch by batch by the Python processor and by the native fold, with
worker restarts (the native fold continues each session from its stored row),
rebalances (partitions forgotten) and a second worker that processes some batches
first (redeliveries, and a stale cache whose writes the compare-and-set refuses);
every Redis field, the feed, the index, the progress and the dead letters must be
equal. With encryption, the sealed rows must open to the same texts.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.projections.base import ProjectionUnit
from sessionstream.core.rows import CHUNK_ITEMS, SessionRow, Stored, chunk_count, manifest
from sessionstream.core.simulate import simulate_session
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.governance.rows import RowCipher, is_sealed
from sessionstream.streams import fold_native
from sessionstream.streams.cycle import PreviousBatch
from sessionstream.streams.fold import MessageBatch
from sessionstream.streams.fold_native import NativeFolder
from sessionstream.streams.memory import MemoryDeadLetters, MemorySink
from sessionstream.streams.native_seal import unit_of
from sessionstream.streams.ports import BatchReport
from sessionstream.streams.processor import Processor
from tests.unit.test_native_fold import _assert_same, _records, fleets
from tests.unit.test_native_sealed import _sealed
from tests.unit.test_streams_processor import processor

if not fold_native.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)


def _batches(records: list[Record], sizes: list[int]) -> list[list[Record]]:
    out, i, b = [], 0, 0
    while i < len(records):
        size = sizes[b % len(sizes)]
        out.append(records[i:i + size])
        i += size
        b += 1
    return out


class _Message:
    """A consumed message as confluent-kafka gives it (accessor methods, no attributes)."""

    def __init__(self, r: Record | None, error: Any = None) -> None:
        self._r, self._error = r, error

    def error(self) -> Any:
        return self._error

    def topic(self) -> str | None:
        return self._r.topic if self._r else None

    def partition(self) -> int | None:
        return self._r.partition if self._r else None

    def offset(self) -> int | None:
        return self._r.offset if self._r else None

    def key(self) -> bytes | None:
        return self._r.key if self._r else None

    def value(self) -> bytes | None:
        return self._r.value if self._r else None

    def timestamp(self) -> tuple[int, int]:
        ts = self._r.timestamp_ms if self._r else None
        return (0, -1) if ts is None else (1, ts)


def message_batch(batch: list[Record], errors: int = 0) -> MessageBatch:
    """``batch`` as the kafka engine hands it on: its messages, read by the extension
    (with ``errors`` error messages in front, which the scan leaves out)."""
    from sessionstream import _native as sessionstream_native

    msgs = [_Message(None, error="eof")] * errors + [_Message(r) for r in batch]
    good, bad, high, first = sessionstream_native.scan_messages(msgs)
    assert len(bad) == errors
    return MessageBatch([msgs[i] for i in good], high, first)


async def _live(records: list[Record], sizes: list[int], restarts: set[int],
                others: set[int], forgets: set[int], fold: str, sink: MemorySink,
                dlq: MemoryDeadLetters, missed: frozenset[int] = frozenset(),
                messages: bool = False, pipelined: bool = False) -> Processor:
    """With ``pipelined`` (the kafka engine's overlap, ADR 0014) each batch is folded
    while the previous one's write is in flight: the in-memory sink applies that write
    only when the next batch awaits it, after its fold, so another worker's pass in
    between makes the in-flight write stale or a conflict. A restart or a rebalance
    (forget) first finishes the batch in flight, as the engine does."""
    driver = processor_for(sink, dlq, fold)
    flight = None
    for b, raw in enumerate(_batches(records, sizes)):
        batch: Any = message_batch(raw, b % 2) if messages else raw
        if flight is not None and (b in restarts or b in forgets):
            await driver.complete(flight)
            flight = None
        if b in restarts:
            driver = processor_for(sink, dlq, fold)  # a restarted worker: empty caches
        if b in others or b in missed:
            # another worker (after a rebalance this one missed) folds the batch first;
            # while this one's write is in flight it starts from the progress in the
            # sink, so it folds that batch's records too
            again = list(flight.records) if flight is not None else []
            await processor_for(sink, dlq).process([*again, *batch])
        if b in missed:
            continue  # and this one never sees it: its next write is based on an old row
        if b in forgets:
            driver.forget([(batch[0].topic, batch[0].partition)])
        if pipelined:
            _, current = await driver.pipelined(batch, flight)
            flight = None if isinstance(current, BatchReport) else current
        else:
            await driver.process(batch)
    if flight is not None:
        await driver.complete(flight)
    return driver


_PIPELINE: dict[str, Any] = {}


def processor_for(sink: MemorySink, dlq: MemoryDeadLetters, fold: str = "python"
                  ) -> Processor:
    make = _PIPELINE.get("make")
    if make is None:
        proc = processor(sink, dead_letters=dlq, fold=fold)
    else:
        pipeline, rows = make()
        proc = Processor(pipeline=pipeline, sink=sink, group="g", dead_letters=dlq, rows=rows,
                         fold=fold)
    if "chunk" in _PIPELINE:  # items per row chunk (ADR 0013): small ones cross chunks
        proc.codec.chunk = _PIPELINE["chunk"]
    return proc


def _run(records: list[Record], sizes: list[int], restarts: set[int], others: set[int],
         forgets: set[int], missed: frozenset[int] = frozenset(), messages: bool = False,
         pipelined: bool = False, fold: str = "native"
         ) -> tuple[tuple[MemorySink, MemorySink, Any, Any], Any]:
    py_sink, na_sink = MemorySink(), MemorySink()
    py_dlq, na_dlq = MemoryDeadLetters(), MemoryDeadLetters()
    asyncio.run(_live(records, sizes, restarts, others, forgets, "python", py_sink, py_dlq,
                      missed))
    na = asyncio.run(_live(records, sizes, restarts, others, forgets, fold, na_sink,
                           na_dlq, missed, messages, pipelined))
    return (py_sink, na_sink, py_dlq, na_dlq), na.folder


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.sets(st.integers(1, 10), max_size=2), st.sets(st.integers(1, 10), max_size=2),
       st.sets(st.integers(1, 10), max_size=2), st.frozensets(st.integers(1, 10), max_size=2))
def test_the_live_native_batch_equals_the_python_batch_with_restarts_and_rebalances(
        case: tuple[list[Record], list[int], set[int], int], restarts: set[int],
        others: set[int], forgets: set[int], missed: frozenset[int]) -> None:
    records, sizes, _, chunk = case
    _PIPELINE.clear()
    _PIPELINE["chunk"] = chunk
    (py_sink, na_sink, py_dlq, na_dlq), _ = _run(records, sizes, restarts, others, forgets,
                                                 missed)
    # The feed as readers use it: de-duplicated by entry (after a missed rebalance the
    # worker that took over and this one may each emit an applied write's entry);
    # rows, index, change records, progress and dead letters are exact. A write the
    # compare-and-set finds stale emits no entry on either path: its as_of_seq came from
    # a cache that missed the other worker's pass (this case once gave Python an entry
    # at as_of_seq 18 for a row stored at 20).
    for gen in py_sink.feed:
        assert set(py_sink.feed[gen]) == set(na_sink.feed.get(gen, []))
    py_sink.feed = na_sink.feed = {}
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.sets(st.integers(1, 10), max_size=2), st.sets(st.integers(1, 10), max_size=2),
       st.sets(st.integers(1, 10), max_size=2), st.frozensets(st.integers(1, 10), max_size=2))
def test_folding_a_batch_while_the_previous_write_is_in_flight_equals_the_python_batch(
        case: tuple[list[Record], list[int], set[int], int], restarts: set[int],
        others: set[int], forgets: set[int], missed: frozenset[int]) -> None:
    """The overlap (ADR 0014): batch N+1 is folded and its writes built before N's
    write is applied; another worker's pass in between refuses N's write (stale or a
    conflict), so N+1's fold of those sessions is dropped and the Python processor
    folds them from the stored row. Rows, index, changes, progress, dead letters: as
    the Python batch one at a time (the feed as readers de-duplicate it)."""
    records, sizes, _, chunk = case
    _PIPELINE.clear()
    _PIPELINE["chunk"] = chunk
    _assert_same_pipelined(*_run(records, sizes, restarts, others, forgets, missed,
                                 messages=True, pipelined=True)[0])


def _assert_same_pipelined(py_sink: MemorySink, na_sink: MemorySink, py_dlq: Any,
                           na_dlq: Any) -> None:
    """Rows, index and progress exact; each session's last feed entry the same; dead
    letters the same set. Another worker that took over while a write was in flight
    re-reads that batch (the progress did not include it): it may write it together
    with its own records in one call (one feed and change entry where the reference
    has two) and send its dead letters again (at least once)."""
    assert na_sink.hashes == py_sink.hashes
    assert na_sink.index == py_sink.index
    assert na_sink.progress == py_sink.progress

    def last(sink: MemorySink) -> dict[tuple[int, str], tuple[int, int]]:
        out: dict[tuple[int, str], tuple[int, int]] = {}
        for gen, entries in sink.feed.items():
            for e in entries:
                ch = json.loads(e)
                key = (gen, ch["session"])
                out[key] = max(out.get(key, (-2, -2)), (ch["offset"], ch["as_of_seq"]))
        return out
    assert last(na_sink) == last(py_sink)
    assert {(d.reason, d.detail) for d in na_dlq.letters} == \
        {(d.reason, d.detail) for d in py_dlq.letters}


def test_a_write_refused_while_the_next_batch_was_folded_is_refolded_in_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-flight case the differential test must meet: another worker's pass lands
    between N's fold and its write, so N's write is refused after N+1 folded the same
    sessions on top of it; N+1's records of them are refolded from the stored row."""
    refolded: list[str] = []
    last: list[tuple[Any, set[str]]] = []  # the batch settled last, its refused sessions
    settle, fold_later = PreviousBatch.settle, NativeFolder.fold_later

    async def noting_settle(self: PreviousBatch, cycle: Any) -> Any:
        flight = self.flight
        refused = await settle(self, cycle)
        if flight is not None and isinstance(refused, set):
            last[:] = [(flight.batch, refused)]
        return refused

    async def noting_fold_later(self: NativeFolder, batch: Any, sessions: Any) -> Any:
        # the next batch's records of sessions the previous batch could not write
        refolded.extend(s for b, refused in last if b is not batch for s in sessions
                        if s in refused)
        return await fold_later(self, batch, sessions)
    monkeypatch.setattr(PreviousBatch, "settle", noting_settle)
    monkeypatch.setattr(NativeFolder, "fold_later", noting_fold_later)
    _PIPELINE.clear()
    records = _fleet_records()
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(records, [37], set(), {3, 6}, set(),
                                                  pipelined=True)
    _assert_same_pipelined(py_sink, na_sink, py_dlq, na_dlq)
    assert refolded  # the case was met
    assert na._python == set()  # native again after the refolds


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.sets(st.integers(1, 10), max_size=2), st.sets(st.integers(1, 10), max_size=2))
def test_a_batch_of_consumed_messages_folds_as_its_records(
        case: tuple[list[Record], list[int], set[int], int], restarts: set[int],
        forgets: set[int]) -> None:
    """The kafka engine hands the native fold its messages (streams.fold): no Record
    per message, the same rows, progress and dead letters as the Python batch."""
    records, sizes, _, chunk = case
    _PIPELINE.clear()
    _PIPELINE["chunk"] = chunk
    (py_sink, na_sink, py_dlq, na_dlq), _ = _run(records, sizes, restarts, set(), forgets,
                                                 messages=True)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)


def test_a_message_batch_reads_as_its_records() -> None:
    records = _fleet_records()[:40]
    batch = message_batch(records, errors=2)
    assert list(batch) == records and batch[-1] == records[-1] and batch[1:3] == records[1:3]
    assert batch.high == {p: max(r.offset for r in records if r.partition == p)
                          for p in {r.partition for r in records}}
    assert {(r.topic, r.partition) for r in batch.heads()} == {
        (r.topic, r.partition) for r in records}


def _fleet_records() -> list[Record]:
    rng = random.Random(21)
    logs = {f"w{i}": simulate_session(rng, f"w{i}", turns=4, compact_every=2, failures=0.2)
            for i in range(6)}
    merged = [(e, sid) for k in range(max(map(len, logs.values())))
              for sid, evs in logs.items() if k < len(evs) for e in [evs[k]]]
    return _records(merged, 3)


def test_a_restarted_native_worker_continues_stored_sessions_natively() -> None:
    _PIPELINE.clear()
    records = _fleet_records()
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(records, [41], {4}, set(), set())
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert na._python == set()  # loaded from their rows, not handed to Python
    assert na.extension.sessions == 6


def test_a_stale_cache_is_refused_and_refolded_as_in_python() -> None:
    _PIPELINE.clear()
    records = _fleet_records()
    (py_sink, na_sink, py_dlq, na_dlq), na = _run(records, [37], set(), {3}, set(),
                                                  frozenset({6, 9}))
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert na._python == set()  # native again after the Python refold


async def _conflicts() -> int:
    sink, dlq = MemorySink(), MemoryDeadLetters()
    na = processor_for(sink, dlq, "native")
    conflicts = 0
    for b, batch in enumerate(_batches(_fleet_records(), [37])):
        if b == 6:
            await processor_for(sink, dlq).process(batch)
            continue
        conflicts += (await na.process(batch)).conflicts
    return conflicts


def test_the_stale_cache_case_does_meet_refused_writes() -> None:
    _PIPELINE.clear()
    assert asyncio.run(_conflicts()) > 0


def test_live_sealed_content_and_sealed_rows_fold_as_in_python(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    cipher = ContentCipher(store, "default")
    rng = random.Random(5)
    logs = {f"x{i}": _sealed(cipher, simulate_session(rng, f"x{i}", turns=3)) for i in range(4)}
    merged = [(e, sid) for k in range(max(map(len, logs.values())))
              for sid, evs in logs.items() if k < len(evs) for e in [evs[k]]]
    rows = RowCipher(cipher)
    _PIPELINE["make"] = lambda: (ReaderPipeline.default(
        opener=SealedContentOpener(ContentCipher(store, "default"))), rows)
    try:
        (py_sink, na_sink, _, _), na = _run(_records(merged, 2), [23], {3}, set(),
                                                      set())
    finally:
        _PIPELINE.clear()
    assert na._python == set()

    def opened(sink: MemorySink) -> dict[Any, dict[str, str | None]]:
        out: dict[Any, dict[str, str | None]] = {}
        for (gen, sid), h in sink.hashes.items():
            out[(gen, sid)] = {k: rows.open(sid, unit_of(k), k, v) if unit_of(k) else v
                               for k, v in h.items()}
        return out
    assert opened(na_sink) == opened(py_sink)
    surface = na_sink.hashes[(1, "x1")]["view:surface"]
    assert is_sealed(surface) and is_sealed(na_sink.hashes[(1, "x1")]["state:turns"])
    assert not is_sealed(na_sink.hashes[(1, "x1")]["view:index"])


def test_the_fold_setting_selects_the_live_folder() -> None:
    def folder(fold: str) -> Any:
        return processor(MemorySink(), fold=fold).folder

    assert folder("python").name == "python"
    assert isinstance(folder("native"), NativeFolder)
    assert isinstance(folder("auto"), NativeFolder)


class _SwitchingSink(MemorySink):
    """A sink whose generation pointer moves to 2 (a replay switched the readers) just
    before the batch numbered ``at`` is written: after the native fold read and used
    its cached generation."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.batches = at, 0

    async def write_batch(self, gen: int, writes: Any, group: str, progress: Any) -> Any:
        if self.batches == self.at:
            self.gen = 2
        self.batches += 1
        return await super().write_batch(gen, writes, group, progress)


async def _switching(driver: Any, sink: MemorySink, dlq: MemoryDeadLetters, at: int,
                     before: bool) -> None:
    for b, batch in enumerate(_batches(_fleet_records(), [37])):
        if before and b == at:
            sink.gen = 2
        await driver.process(batch)


def test_a_generation_switch_before_a_batch_is_written_moves_the_batch_to_it() -> None:
    """The native fold reads the generation once and the one-call batch write checks
    it: a pointer that moved after the fold (a replay's switch) writes nothing of the
    batch in the old generation; it is folded again and written in the new one, as the
    Python processor does when the switch came before its per-batch read."""
    _PIPELINE.clear()
    py_sink, py_dlq = MemorySink(), MemoryDeadLetters()
    asyncio.run(_switching(processor_for(py_sink, py_dlq), py_sink, py_dlq, 4, True))
    na_sink, na_dlq = _SwitchingSink(4), MemoryDeadLetters()
    asyncio.run(_switching(processor_for(na_sink, na_dlq, "native"), na_sink, na_dlq, 4,
                           False))
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert na_sink.gen == 2 and {g for g, _ in na_sink.hashes} == {1, 2}
    assert na_sink.batches > len(_batches(_fleet_records(), [37]))  # the batch written again


def test_the_extension_builds_chunk_fields_and_manifests_as_native_chunks() -> None:
    """``Folder.write_fields`` (chunk fields, deletes and manifests built in Rust) gives
    what ``chunked_fields`` + the Python ``native_chunks`` give, batch after batch, with
    the chunks stored by the previous write carried over (small chunks: many cross)."""

    _PIPELINE.clear()
    a: Any = processor_for(MemorySink(), MemoryDeadLetters(), "native").folder
    b: Any = processor_for(MemorySink(), MemoryDeadLetters(), "native").folder
    units = {u.key: u for u in a.reference.pipeline.registry.units}
    chunk = 3
    stored: dict[str, dict[str, Any]] = {}
    compared = 0
    for batch in _batches(_fleet_records(), [29]):
        for f in (a, b):
            f.extension.fold(batch, {}, set())
        for sid in sorted({r.key.decode() for r in batch if r.key}):
            first = sid not in stored
            got = a.extension.chunked_fields(sid, not first, chunk)
            if got is None:
                continue
            fields, changed, parts = got
            fields.pop(SessionRow.AS_OF_SEQ)
            fields.pop(SessionRow.AS_OF_OFFSET)
            deletes: list[str] = []
            counts = {}
            by_unit: dict[str, list[Any]] = {}
            for key, name, n, start, items in parts:
                by_unit.setdefault(key, []).append((name, n, start, items))
            for key, unit_parts in by_unit.items():
                counts[key] = native_chunks(
                    units[key], unit_parts, stored.get(sid, {}).get(key),
                    fields, deletes, chunk)
            assert b.extension.write_fields(sid, not first, chunk, stored.get(sid, {})) == (
                fields, changed, deletes, counts)
            stored.setdefault(sid, {}).update(counts)
            compared += len(counts)
    assert compared > 20


class _CountingSink(MemorySink):
    """The in-memory sink, noting the sessions each row load asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []

    async def load(self, gen: int, session_ids: Any) -> dict[str, dict[str, str]]:
        self.loaded += list(session_ids)
        return await super().load(gen, session_ids)


def test_a_session_whose_first_event_is_in_the_batch_is_started_without_a_row_load() -> None:
    _PIPELINE.clear()
    records = _fleet_records()
    sink, dlq = _CountingSink(), MemoryDeadLetters()
    py_sink, py_dlq = MemorySink(), MemoryDeadLetters()

    async def go() -> Any:
        na = processor_for(sink, dlq, "native")
        py = processor_for(py_sink, py_dlq)
        for batch in _batches(records, [40]):
            await na.process(batch)
            await py.process(batch)
        return na

    na = asyncio.run(go())
    _assert_same(py_sink, sink, py_dlq, dlq)
    assert na.folder.fresh_starts == 6  # every session's seq 0 was in a batch: none loaded
    assert sink.loaded == []


def test_new_sessions_names_what_unknown_sessions_names_and_marks_only_seq_0_past_progress(
        ) -> None:
    # unknown_sessions serves an extension user without new_sessions; both walk the same
    # first records: the same sessions and partitions, in order, and only a session whose
    # first record here is its seq 0 past the progress counts as fresh.
    _PIPELINE.clear()
    records = _fleet_records()
    native: Any = processor_for(MemorySink(), MemoryDeadLetters(), "native").folder
    folder = native.extension
    batch = records[:40]
    heads = [(sid, p) for sid, p, _ in folder.new_sessions(batch, set(), {})]
    assert heads == folder.unknown_sessions(batch, set())
    assert len(heads) == 6
    assert all(fresh for _, _, fresh in folder.new_sessions(batch, set(), {}))
    past = {p: 10**9 for _, p in heads}  # progress beyond every record: none is fresh
    assert not any(fresh for _, _, fresh in folder.new_sessions(batch, set(), past))
    later = records[200:240]  # no session's seq 0 is here
    assert not any(fresh for _, _, fresh in folder.new_sessions(later, set(), {}))
    owned = {heads[0][0]}
    assert [s for s, _ in folder.unknown_sessions(batch, owned)] == [s for s, _ in heads[1:]]


def test_a_skipped_row_load_never_overwrites_an_existing_row() -> None:
    # Another consumer group folds the same topic into the same rows first (its progress
    # is its own): this worker meets every session at seq 0, past its progress, and
    # starts them unread; the compare-and-set refuses each first write (the row exists)
    # and the rows stay as the first group wrote them, as with the Python processor.
    _PIPELINE.clear()
    records = _fleet_records()
    sink, dlq = _CountingSink(), MemoryDeadLetters()
    py_sink, py_dlq = MemorySink(), MemoryDeadLetters()

    async def go() -> Any:
        for s, d in ((sink, dlq), (py_sink, py_dlq)):
            first = processor_for(s, d)
            for batch in _batches(records, [40]):
                await first.process(batch)
        rows_before = {k: dict(v) for k, v in sink.hashes.items()}
        second = processor_for(sink, dlq, "native")
        second.group = "other"
        py_second = processor_for(py_sink, py_dlq)
        py_second.group = "other"
        na = second
        for batch in _batches(records, [40]):
            report = await na.process(batch)
            assert report.sessions_written == 0  # every write refused: the rows exist
            await py_second.process(batch)
        assert sink.hashes == rows_before
        return na

    na = asyncio.run(go())
    assert na.folder.fresh_starts >= 6
    _assert_same(py_sink, sink, py_dlq, dlq)


def test_new_sessions_row_keys_are_created_off_the_hot_path_in_batches_and_shred(
        tmp_path: Path) -> None:
    import threading

    from sessionstream.core.privacy import DataClass, KeyState

    store = FileKeyStore(tmp_path / "keys")
    created_on: list[tuple[str, int]] = []  # (thread, keys) per creation call
    put, put_many = store._put_if_absent, store._put_many_if_absent

    def noting(*args: Any) -> Any:
        created_on.append((threading.current_thread().name, 1))
        return put(*args)

    def noting_many(tenant: str, items: list[Any]) -> Any:
        created_on.append((threading.current_thread().name, len(items)))
        return put_many(tenant, items)

    store._put_if_absent = noting  # type: ignore[method-assign]
    store._put_many_if_absent = noting_many  # type: ignore[method-assign]
    rows = RowCipher(ContentCipher(store, "default"))
    records = _fleet_records()  # clear events: every row key is created by the worker
    sink, py_sink = MemorySink(), MemorySink()

    async def go() -> None:
        na = Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g", rows=rows,
                       fold="native")
        py = Processor(pipeline=ReaderPipeline.default(), sink=py_sink, group="g", rows=rows)
        for batch in _batches(records, [40]):
            await na.process(batch)
        for batch in _batches(records, [40]):
            await py.process(batch)

    asyncio.run(go())
    # surface, raw and business keys of the 6 sessions, all made off the event loop's
    # thread, in batches (a batch's keys share one sync)
    assert sum(n for _, n in created_on) == 18 and len(created_on) < 18
    assert all(name != threading.main_thread().name for name, _ in created_on)

    def opened(s: MemorySink) -> dict[Any, dict[str, str | None]]:
        return {k: {f: rows.open(k[1], unit_of(f), f, v) if unit_of(f) else v
                    for f, v in h.items()} for k, h in s.hashes.items()}
    assert opened(sink) == opened(py_sink)
    row = sink.hashes[(1, "w1")]
    assert is_sealed(row["view:surface"])
    store.shred("default", "w1", (DataClass.SURFACE,), principal="ops", reason="erasure")
    assert FileKeyStore(tmp_path / "keys").lookup(
        "default", "w1", DataClass.SURFACE).state is KeyState.SHREDDED
    assert rows.open("w1", "surface", "view:surface", row["view:surface"]) is None


def native_chunks(unit: ProjectionUnit[Any], parts: list[tuple[str, int, int, list[str]]],
                  stored: Stored | None, fields: dict[str, str],
                  deletes: list[str], chunk: int = CHUNK_ITEMS) -> Stored:
    """The manifest and chunk fields of a native chunked unit, in Python, as
    ``streams.session_row.chunked_fields`` writes them for a Python one (the reference
    ``Folder.write_fields`` is held to). ``parts``: per collection (name, items, first
    item given, the item texts from it); ``stored``: chunk size and chunks per
    collection in the row. Returns what is stored now."""
    kinds = {c.name: c.kind for c in unit.collections}
    size, had = stored if stored is not None else (0, {})
    lists: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    for name, n, start, items in parts:
        k = chunk_count(n, chunk)
        first = start // chunk if size == chunk and name in had else 0
        assert start <= first * chunk, f"{unit.key}.{name} items from {start}"
        for i in range(first, k):
            lo, hi = i * chunk - start, min(n, (i + 1) * chunk) - start
            fields[SessionRow.part(unit.key, name, i)] = ",".join(t for t in items[lo:hi] if t)
        deletes.extend(SessionRow.part(unit.key, name, i)
                       for i in range(k, had.get(name, 0)))
        lists[name] = (kinds[name], n)
        counts[name] = k
    fields[SessionRow.parts(unit.key)] = manifest(
        lists, {c.view_key: c.name for c in unit.collections if c.view_key is not None},
        {c.state_key: c.name for c in unit.collections if c.state_key is not None}, chunk)
    return chunk, counts


def test_row_keys_the_native_fold_keeps_are_dropped_by_a_shred_as_the_store_drops_them(
        tmp_path: Path) -> None:
    """The native fold keeps each session's row keys while the key store would answer
    the same; a shred in between makes the next rows of that class clear on both paths
    (a shredded class is stored clear) and leaves the others sealed."""
    from sessionstream.core.privacy import DataClass

    records = _fleet_records()
    half = len(records) // 2
    sinks = {}
    for fold in ("python", "native"):
        store = FileKeyStore(tmp_path / fold)
        rows = RowCipher(ContentCipher(store, "default"))
        sink = MemorySink()
        proc = Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g", rows=rows,
                         fold=fold)

        async def go(proc: Processor = proc, store: FileKeyStore = store) -> None:
            for batch in _batches(records[:half], [40]):
                await proc.process(batch)
            store.shred("default", "w1", (DataClass.SURFACE,), principal="t", reason="test")
            for batch in _batches(records[half:], [40]):
                await proc.process(batch)
        asyncio.run(go())
        sinks[fold] = (sink, rows)
        row = sink.hashes[(1, "w1")]
        assert not is_sealed(row["view:surface"])  # written after the shred: clear
        assert is_sealed(sink.hashes[(1, "w2")]["view:surface"])
    opened = {fold: {k: {f: rows.open(k[1], unit_of(f), f, v) if unit_of(f) else v
                         for f, v in h.items()} for k, h in sink.hashes.items()}
              for fold, (sink, rows) in sinks.items()}
    assert opened["native"] == opened["python"]
