"""The projection processor's batch logic, over the in-memory sink (``streams.memory``).

The sink contract suite checks that the memory sink behaves as the Redis script does.

The integration tests run the same logic against the real Redis script and Kafka; these
pin the rules: idempotency by offset, admission, quarantine, dead letters, rebuilds.
"""

from __future__ import annotations

import json
import random
from typing import Any, ClassVar

import pytest

from sessionstream.core.codec import encode
from sessionstream.core.events import Event, Writer, make_event
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.projections import Registry, default_registry, default_units
from sessionstream.core.rows import SessionRow
from sessionstream.core.simulate import simulate_session
from sessionstream.streams.memory import MemoryDeadLetters, MemoryLog, MemorySink
from sessionstream.streams.processor import Processor

TOPIC = "sessionstream.t.events"


def as_records(events: list[Event], partitions: int = 3) -> list[Record]:
    """Interleave sessions like a topic does; a session always lands in one partition."""
    offsets = [0] * partitions
    out = []
    for ev in events:
        p = sum(ev.session_id.encode()) % partitions
        out.append(Record(TOPIC, p, offsets[p], ev.session_id.encode(), encode(ev)))
        offsets[p] += 1
    return out


def fleet(n: int, seed: int = 7, turns: int = 3) -> tuple[dict[str, list[Event]], list[Event]]:
    rng = random.Random(seed)
    logs = {f"s{i:03d}": simulate_session(rng, f"s{i:03d}", turns=turns, compact_every=2)
            for i in range(n)}
    merged: list[Event] = []
    cursors = dict.fromkeys(logs, 0)
    while any(cursors[s] < len(logs[s]) for s in logs):
        for s in logs:
            k = rng.randrange(1, 6)
            merged.extend(logs[s][cursors[s]:cursors[s] + k])
            cursors[s] += k
    return logs, merged


def views_of(sink: MemorySink, sid: str, gen: int = 1) -> dict[str, Any]:
    h = sink.hashes[(gen, sid)]
    return SessionRow.views(h)


def offline_views(events: list[Event], registry: Registry | None = None) -> dict[str, Any]:
    reg = registry or default_registry()
    snap = reg.fold(events)
    return json.loads(json.dumps(snap.views()))


def processor(sink: MemorySink, pipeline: ReaderPipeline | None = None, **kw: Any
              ) -> Processor:
    return Processor(pipeline=pipeline or ReaderPipeline.default(), sink=sink, group="g", **kw)


async def run_batches(proc: Processor, records: list[Record], size: int) -> None:
    for i in range(0, len(records), size):
        await proc.process(records[i:i + size])


async def test_every_view_equals_the_offline_fold() -> None:
    logs, merged = fleet(12)
    sink = MemorySink()
    await run_batches(processor(sink), as_records(merged), 37)
    for sid, events in logs.items():
        assert views_of(sink, sid) == offline_views(events), sid
        assert int(sink.hashes[(1, sid)]["as_of_seq"]) == events[-1].seq


async def test_a_redelivered_batch_changes_nothing() -> None:
    _logs, merged = fleet(5)
    records = as_records(merged)
    sink = MemorySink()
    proc = processor(sink)
    await run_batches(proc, records, 50)
    before = {k: dict(v) for k, v in sink.hashes.items()}
    applied = sink.applied
    # the same records again, to this worker and to a fresh one (cache lost in a crash)
    await run_batches(proc, records[40:120], 30)
    await run_batches(processor(sink), records, 64)
    assert sink.hashes == before
    assert sink.applied == applied


async def test_a_fresh_worker_without_progress_skips_applied_records_per_session() -> None:
    logs, merged = fleet(4)
    records = as_records(merged)
    sink = MemorySink()
    await run_batches(processor(sink), records[:100], 25)
    sink.progress.clear()  # progress lost: the per-session offsets still guard
    await run_batches(processor(sink), records, 40)
    for sid, events in logs.items():
        assert views_of(sink, sid) == offline_views(events)


async def test_batch_size_does_not_change_the_result() -> None:
    logs, merged = fleet(6)
    records = as_records(merged)
    a, b = MemorySink(), MemorySink()
    await run_batches(processor(a), records, 1)
    await run_batches(processor(b), records, 500)
    for sid in logs:
        assert a.hashes[(1, sid)] == b.hashes[(1, sid)]


async def test_folding_in_memory_and_flushing_writes_what_batch_processing_writes() -> None:
    """Replay's path: fold() batches without writing, flush() each session once."""
    logs, merged = fleet(8)
    records = as_records(merged)
    # a duplicate, a gap and a corrupt record fold the same way on both paths
    records.insert(50, records[10])
    records.append(Record(TOPIC, 0, 10_000, b"s000", b"garbage"))
    live, deferred = MemorySink(), MemorySink()
    await run_batches(processor(live), records, 40)
    proc = processor(deferred)
    for i in range(0, len(records), 40):
        await proc.fold(records[i:i + 40])
        if i == 160:
            await proc.flush()  # a periodic flush mid-way, then more folding
    assert proc.unflushed_sessions > 0
    await proc.flush()
    assert proc.unflushed_sessions == 0
    for sid, events in logs.items():
        assert deferred.hashes[(1, sid)] == live.hashes[(1, sid)], sid
        assert views_of(deferred, sid) == offline_views(events)
    assert deferred.progress == live.progress
    assert {s for _, s in deferred.index} == {s for _, s in live.index}
    # fewer script calls: at most two per session (the mid-way flush and the last one)
    assert deferred.applied <= 2 * len(logs) < live.applied


async def test_process_refuses_to_run_with_unflushed_folds() -> None:
    _logs, merged = fleet(2)
    proc = processor(MemorySink())
    await proc.fold(as_records(merged)[:10])
    with pytest.raises(RuntimeError, match="flush"):
        await proc.process(as_records(merged)[10:20])


async def test_stale_and_duplicate_events_are_recorded_not_applied() -> None:
    events = simulate_session(random.Random(1), "s1", turns=2)
    dup = events[3]
    zombie = make_event(session_id="s1", seq=len(events), event_id="zombie-1", time=1,
                        type="todo/add", data={"id": "z", "text": "zombie"},
                        writer=Writer("old", events[-1].writer.epoch - 1))
    gap = make_event(session_id="s1", seq=len(events) + 5, event_id="gap-1", time=1,
                     type="todo/add", data={"id": "g", "text": "gap"},
                     writer=events[-1].writer)
    sink = MemorySink()
    await processor(sink).process(as_records([*events, dup, zombie, gap], partitions=1))
    views = views_of(sink, "s1")
    expected = offline_views(events)
    assert {k: v for k, v in views.items() if k != "rejections"} == \
        {k: v for k, v in expected.items() if k != "rejections"}
    rej = views["rejections"]
    assert rej["total"] == (2 if zombie.writer.epoch < events[-1].writer.epoch else 1)
    meta = json.loads(sink.hashes[(1, "s1")]["meta"])
    assert meta["counts"]["duplicate"] == 1


async def test_a_corrupt_record_goes_to_the_dead_letters_and_the_rest_is_processed() -> None:
    logs, merged = fleet(3)
    records = as_records(merged, partitions=1)
    poison = Record(TOPIC, 0, len(records), b"s000", b"\x00not avro")
    later = [Record(TOPIC, 0, r.offset + len(records) + 1, r.key, r.value) for r in records]
    dlq = MemoryDeadLetters()
    sink = MemorySink()
    # the second copy is all duplicates by event_id: processed, nothing changes
    await processor(sink, dead_letters=dlq).process([*records, poison, *later])
    assert [d.reason for d in dlq.letters] == ["corrupt"]
    for sid, events in logs.items():
        assert views_of(sink, sid) == offline_views(events)


async def test_an_unknown_required_event_quarantines_only_its_session() -> None:
    logs, _ = fleet(2)
    a, b = logs["s000"], logs["s001"]
    alien = make_event(session_id="s000", seq=len(a), event_id="alien", time=1,
                       type="alien/thing", data={}, writer=a[-1].writer,
                       prev_event_id=a[-1].event_id)
    after_a = make_event(session_id="s000", seq=len(a) + 1, event_id="after", time=2,
                         type="todo/add", data={"id": "x", "text": "y"}, writer=a[-1].writer,
                         prev_event_id="alien")
    sink = MemorySink()
    proc = processor(sink)
    report = await proc.process(as_records([*a, alien, after_a, *b], partitions=1))
    assert report.quarantined == ["s000"]
    meta = json.loads(sink.hashes[(1, "s000")]["meta"])
    assert meta["quarantine"]["kind"] == "unknown_event"
    assert "alien/thing" in meta["quarantine"]["reason"]
    assert views_of(sink, "s000")["index"]["status"] == "quarantined"
    assert views_of(sink, "s000")["todo"] == offline_views(a)["todo"]
    assert views_of(sink, "s001") == offline_views(b)


@pytest.mark.parametrize(("data", "counts"), [
    ({"id": "x", "text": "y", "status": 3}, {"3": 1, "pending": 1}),  # a number beside strings
    ({"id": 3, "text": "y", "status": "done"}, {"done": 1, "pending": 1}),  # an id keyed by
])
async def test_data_keys_of_mixed_kinds_fold_instead_of_failing_the_batch(
        data: dict[str, Any], counts: dict[str, int]) -> None:
    # Written past the writer's checks (another client): a unit that keys by a number
    # next to strings must not make the batch's write fail (a poison record that would
    # stop the partition); the session folds, keyed by the JSON text, and so do the others.
    logs, _ = fleet(2)
    a, b = logs["s000"], logs["s001"]
    first = make_event(session_id="s000", seq=len(a), event_id="ok", time=1, type="todo/add",
                       data={"id": "k", "text": "fine", "status": "pending"},
                       writer=a[-1].writer, prev_event_id=a[-1].event_id)
    odd = make_event(session_id="s000", seq=len(a) + 1, event_id="odd", time=2,
                     type="todo/add", data=data, writer=a[-1].writer, prev_event_id="ok")
    sink = MemorySink()
    report = await processor(sink).process(as_records([*a, first, odd, *b], partitions=1))
    assert report.quarantined == []
    assert int(sink.hashes[(1, "s000")]["as_of_seq"]) == odd.seq
    todo = views_of(sink, "s000")["todo"]
    before = offline_views(a)["todo"]["counts"]
    expected = dict(before)
    for k, n in counts.items():
        expected[k] = expected.get(k, 0) + n
    assert todo["counts"] == expected
    assert [i["id"] for i in todo["items"]][-2:] == ["k", data["id"]]
    assert views_of(sink, "s001") == offline_views(b)


async def test_an_unknown_ignorable_event_is_skipped() -> None:
    a = simulate_session(random.Random(3), "s1", turns=1)
    skip = make_event(session_id="s1", seq=len(a), event_id="ign", time=1, type="alien/note",
                      data={}, writer=a[-1].writer, ignorable=True,
                      prev_event_id=a[-1].event_id)
    nxt = make_event(session_id="s1", seq=len(a) + 1, event_id="n", time=2, type="todo/add",
                     data={"id": "x", "text": "y"}, writer=a[-1].writer, prev_event_id="ign")
    sink = MemorySink()
    await processor(sink).process(as_records([*a, skip, nxt], partitions=1))
    assert views_of(sink, "s1") == offline_views([*a, nxt])


async def test_a_newer_format_quarantines_the_session() -> None:
    a = simulate_session(random.Random(4), "s1", turns=1)
    newer = make_event(session_id="s1", seq=len(a), event_id="v2", time=1, type="todo/add",
                       data={"id": "x", "text": "y"}, writer=a[-1].writer, format_version=2)
    sink = MemorySink()
    await processor(sink).process(as_records([*a, newer], partitions=1))
    meta = json.loads(sink.hashes[(1, "s1")]["meta"])
    assert meta["quarantine"]["kind"] == "newer_format"
    assert int(sink.hashes[(1, "s1")]["as_of_seq"]) == a[-1].seq


async def test_a_state_version_bump_rebuilds_only_that_unit() -> None:
    logs, merged = fleet(4)
    records = as_records(merged)
    half = len(records) // 2
    sink = MemorySink()
    await run_batches(processor(sink), records[:half], 40)
    before = {k: dict(v) for k, v in sink.hashes.items()}

    units = default_units()
    todo_unit = next(u for u in units if u.key == "todo")

    class TodoV2(type(todo_unit)):  # type: ignore[misc]
        state_version: ClassVar[int] = todo_unit.state_version + 1

    bumped = Registry([TodoV2() if u.key == "todo" else u for u in units])
    pipeline = ReaderPipeline.default(registry=bumped)
    log_reader = MemoryLog(records)
    report_rebuilt: dict[str, tuple[str, ...]] = {}
    proc = processor(sink, pipeline=pipeline, log_reader=log_reader)
    for i in range(half, len(records), 40):
        report = await proc.process(records[i:i + 40])
        report_rebuilt.update(report.rebuilt)
    assert log_reader.reads >= 1
    assert all(v == ("todo",) for v in report_rebuilt.values())
    for sid, events in logs.items():
        assert views_of(sink, sid) == offline_views(events, bumped)
        h = sink.hashes[(1, sid)]
        assert h["sv:todo"] == str(TodoV2.state_version)
    # a session untouched after the bump keeps its old state until it is touched
    assert set(before) <= set(sink.hashes)


async def test_quiet_sessions_converge_to_a_bumped_state_version_after_assignment() -> None:
    """A state_version bump reaches sessions with no new events, only in owned partitions."""
    logs, merged = fleet(6)
    records = as_records(merged)
    sink = MemorySink()
    await run_batches(processor(sink), records, 50)
    units = default_units()
    todo_unit = next(u for u in units if u.key == "todo")

    class TodoV2(type(todo_unit)):  # type: ignore[misc]
        state_version: ClassVar[int] = todo_unit.state_version + 1

    bumped = Registry([TodoV2() if u.key == "todo" else u for u in units])
    pipeline = ReaderPipeline.default(registry=bumped)
    proc = processor(sink, pipeline=pipeline, log_reader=MemoryLog(records))
    owned = {0, 2}
    before = {k: dict(v) for k, v in sink.hashes.items()}
    proc.schedule_converge(TOPIC, owned)
    rebuilt = 0
    while proc.converging:
        rebuilt += await proc.converge_step(limit=2)
    part = {r.key.decode(): r.partition for r in records if r.key}
    assert rebuilt == sum(1 for s in logs if part[s] in owned) > 0
    for sid, events in logs.items():
        h = sink.hashes[(1, sid)]
        if part[sid] in owned:
            assert h["sv:todo"] == str(TodoV2.state_version)
            assert views_of(sink, sid) == offline_views(events, bumped)
            assert h["as_of_offset"] == before[(1, sid)]["as_of_offset"]
        else:
            assert h == before[(1, sid)], "a partition this worker does not own was touched"
    # a second pass finds nothing left to do, and later batches are still no-ops
    proc.schedule_converge(TOPIC, owned)
    while proc.converging:
        assert await proc.converge_step(limit=4) == 0
    report = await proc.process(records)
    assert report.sessions_written == 0


async def test_a_worker_with_a_stale_cache_reloads_instead_of_overwriting() -> None:
    logs, merged = fleet(3)
    records = as_records(merged, partitions=1)
    sink = MemorySink()
    a, b = processor(sink), processor(sink)
    await run_batches(a, records[:30], 30)  # a caches sessions at offset 29
    await run_batches(b, records[:80], 40)  # b moves them on (a missed the rebalance)
    await run_batches(a, records[80:], 25)  # a's base is stale: conflict, reload, refold
    for sid, events in logs.items():
        assert views_of(sink, sid) == offline_views(events)


@pytest.mark.parametrize("gen", [2])
async def test_a_pinned_generation_writes_only_there(gen: int) -> None:
    _logs, merged = fleet(2)
    sink = MemorySink()
    await run_batches(processor(sink, generation=gen), as_records(merged), 100)
    assert {g for g, _ in sink.hashes} == {gen}


class FlakyDeadLetters(MemoryDeadLetters):
    """Refuses the letter of one source offset for the first ``failures`` sends."""

    def __init__(self, refuse_offset: int, failures: int) -> None:
        super().__init__()
        self.refuse_offset = refuse_offset
        self.failures = failures

    async def send(self, letters: Any) -> list[Any]:
        refused = [d for d in letters if d.record.offset == self.refuse_offset
                   and self.failures > 0]
        self.failures -= bool(refused)
        self.letters.extend(d for d in letters if d not in refused)
        return refused


async def test_a_dead_letter_that_cannot_be_produced_holds_only_its_partition_behind_it() -> None:
    """The other letters go out, the other partitions and sessions go on; progress of
    that partition stays just below the letter until it is produced (then moves on)."""
    logs, merged = fleet(6)
    records = as_records(merged, partitions=2)
    p0 = [r for r in records if r.partition == 0]
    n0 = len(p0)
    poison = [Record(TOPIC, 0, n0, b"s000", b"\x00bad one"),
              Record(TOPIC, 0, n0 + 1, b"s000", b"\x00bad two")]
    dlq = FlakyDeadLetters(refuse_offset=n0, failures=2)
    sink = MemorySink()
    proc = processor(sink, dead_letters=dlq)
    await proc.process([*records, *poison])
    assert [d.record.offset for d in dlq.letters] == [n0 + 1]  # the other one went out
    assert sink.progress[("g", f"{TOPIC}:0")] == n0 - 1  # held just below the refused one
    assert sink.progress[("g", f"{TOPIC}:1")] == max(r.offset for r in records
                                                    if r.partition == 1)
    for sid, events in logs.items():  # every session caught up, that partition's too
        assert views_of(sink, sid) == offline_views(events)
    later = Record(TOPIC, 0, n0 + 2, b"s999", b"\x00bad three")
    await proc.process([later])  # still refused: retried, still held
    assert sink.progress[("g", f"{TOPIC}:0")] == n0 - 1
    await proc.process([Record(TOPIC, 0, n0 + 3, b"s999", b"\x00bad four")])  # produced now
    assert sorted(d.record.offset for d in dlq.letters) == [n0, n0 + 1, n0 + 2, n0 + 3]
    assert sink.progress[("g", f"{TOPIC}:0")] == n0 + 3


async def _pipelined(proc: Processor, records: list[Record], size: int,
                     between: dict[int, Processor]) -> None:
    """The kafka engine's overlap (ADR 0014): each batch folded while the previous one's
    write is in flight; ``between[b]`` (another worker) processes batch ``b`` and the
    one in flight first, so the write in flight is refused (stale or a conflict)."""
    flight: Any = None
    for b, i in enumerate(range(0, len(records), size)):
        batch = records[i:i + size]
        other = between.get(b)
        if other is not None:
            await other.process([*(flight.records if flight is not None else []), *batch])
        _, current = await proc.pipelined(batch, flight)
        flight = None if not hasattr(current, "batch") else current
    if flight is not None:
        await proc.complete(flight)


@pytest.mark.parametrize("size", [5, 17, 40])
async def test_the_python_fold_pipelined_writes_what_it_writes_batch_by_batch(size: int) -> None:
    """The engine overlaps batches whatever the fold: a refused write in flight refolds
    the next batch's records of that session from the stored row, as the native fold."""
    _logs, merged = fleet(6)
    records = as_records(merged)
    seq_sink, sink = MemorySink(), MemorySink()
    seq = processor(seq_sink)
    for b, i in enumerate(range(0, len(records), size)):
        if b in (3, 7):
            await processor(seq_sink).process(records[i:i + size])
        await seq.process(records[i:i + size])
    proc = processor(sink)
    refused: list[str] = []
    forget = proc.folder.refused
    proc.folder.refused = lambda sid: refused.append(sid) or forget(sid)  # type: ignore[method-assign]
    await _pipelined(proc, records, size, {3: processor(sink), 7: processor(sink)})
    assert refused  # writes in flight were refused and refolded
    assert sink.hashes == seq_sink.hashes
    assert sink.progress == seq_sink.progress
    assert sink.index == seq_sink.index
