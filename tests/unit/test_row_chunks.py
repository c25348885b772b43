"""Chunked session rows (ADR 0013): growing views and states stored as chunk fields.

The reference is the whole-row write (every unit's ``encode``): a row written chunk by
chunk, batch after batch, must read back as the same views and states, hold no chunk its
manifest does not name, and cost per batch what its events changed, not the session.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.projections import default_registry
from sessionstream.core.projections.domain import TodoUnit
from sessionstream.core.rows import BrokenRow, SessionRow, assemble
from sessionstream.core.simulate import simulate_session
from sessionstream.core.surface import Surface
from sessionstream.governance.rows import open_fields
from sessionstream.streams.memory import MemorySink
from sessionstream.streams.processor import Processor
from sessionstream.streams.session_row import chunked_fields
from tests.unit.strategies import lab_sessions, logs
from tests.unit.test_streams_processor import as_records

CHUNKED = [u for u in default_registry().units if u.collections]


def _whole(row: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    flat = assemble(row)
    views = {k: json.loads(v) for k, v in flat.items() if k.startswith(SessionRow.VIEW)}
    states = {k: json.loads(v) for k, v in flat.items() if k.startswith(SessionRow.STATE)}
    return views, states


def _orphans(row: dict[str, str]) -> list[str]:
    """Chunk fields no manifest names, and chunks a manifest names that are missing."""
    named = set()
    for name, raw in row.items():
        if name.startswith(SessionRow.PARTS):
            unit = name[len(SessionRow.PARTS):]
            for c, spec in json.loads(raw)["lists"].items():
                named |= {SessionRow.part(unit, c, i) for i in range(spec["chunks"])}
    present = {n for n in row if n.startswith(SessionRow.PART)}
    return sorted(present ^ named)


def test_the_chunked_units_are_the_growing_ones() -> None:
    assert {u.key for u in CHUNKED} == {"surface", "turns", "tools", "todo", "compaction"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.one_of(lab_sessions(max_turns=8), logs(max_steps=80)),
       chunk=st.integers(1, 5))
def test_a_chunked_unit_reads_back_as_its_whole_view_and_state(events: list[Event],
                                                              chunk: int) -> None:
    reg = default_registry()
    snap = reg.fold(events)
    for unit in CHUNKED:
        state = snap.states[unit.key]
        fields: dict[str, str] = {}
        deletes: list[str] = []
        chunked_fields(unit, None, state, None, fields, deletes, chunk)
        view, dump = unit.heads(state)
        fields[SessionRow.view(unit.key)] = view
        fields[SessionRow.state(unit.key)] = dump
        whole_view, whole_state = unit.encode(state)
        views, states = _whole(fields)
        assert views[SessionRow.view(unit.key)] == json.loads(whole_view), unit.key
        assert states[SessionRow.state(unit.key)] == json.loads(whole_state), unit.key
        assert deletes == []
        assert unit.load(states[SessionRow.state(unit.key)]) == state


def _fold(events: list[Event], sizes: list[int], *, chunked: bool = True, chunk: int = 3,
          sink: MemorySink | None = None) -> MemorySink:
    sink = sink or MemorySink()
    proc = Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g")
    proc.codec.chunked, proc.codec.chunk = chunked, chunk
    records = as_records(events)

    async def run() -> None:
        i = b = 0
        while i < len(records):
            n = sizes[b % len(sizes)]
            await proc.process(records[i:i + n])
            i, b = i + n, b + 1

    asyncio.run(run())
    return sink


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=lab_sessions(max_turns=12), sizes=st.lists(st.integers(1, 25), min_size=1,
                                                         max_size=6),
       chunk=st.integers(1, 6))
def test_writing_only_changed_chunks_batch_after_batch_equals_a_whole_rewrite(
        events: list[Event], sizes: list[int], chunk: int) -> None:
    """Appends, compaction replaces (the surface shrinks), abandoned tool calls (an
    earlier node rewritten), todo updates in the middle: any batch cut."""
    chunked = _fold(events, sizes, chunk=chunk)
    whole = _fold(events, [len(events)], chunked=False)
    row = chunked.hashes[(1, "lab")]
    assert _whole(row) == _whole(whole.hashes[(1, "lab")])
    assert _orphans(row) == []
    assert {SessionRow.parts(u.key) for u in CHUNKED} <= set(row)


def test_a_row_written_whole_reads_and_is_chunked_by_the_next_write() -> None:
    events = simulate_session(random.Random(3), "lab", turns=30, compact_every=4)
    half = len(events) // 2
    sink = _fold(events[:half], [17], chunked=False)
    assert not any(k.startswith(SessionRow.PARTS) for k in sink.hashes[(1, "lab")])
    # a new worker (cache miss: loads the whole-text row) folds on in the chunked format
    sink = _fold(events, [17], sink=sink)
    row = sink.hashes[(1, "lab")]
    reference = _fold(events, [len(events)], chunked=False).hashes[(1, "lab")]
    assert _whole(row) == _whole(reference)
    assert {SessionRow.parts(u.key) for u in CHUNKED} <= set(row)
    assert _orphans(row) == []


@pytest.mark.parametrize(("first", "then"), [(3, 5), (5, 3)])
def test_a_row_chunked_at_another_size_is_rewritten_at_the_new_one(first: int,
                                                                    then: int) -> None:
    events = simulate_session(random.Random(6), "lab", turns=30, compact_every=5)
    half = len(events) // 2
    sink = _fold(events[:half], [13], chunk=first)
    sink = _fold(events, [13], chunk=then, sink=sink)  # a new worker, another chunk size
    row = sink.hashes[(1, "lab")]
    reference = _fold(events, [len(events)], chunked=False).hashes[(1, "lab")]
    assert _whole(row) == _whole(reference)
    assert _orphans(row) == []
    assert all(json.loads(v)["chunk"] == then for k, v in row.items()
               if k.startswith(SessionRow.PARTS))


class CountingSink(MemorySink):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[int] = []

    async def write_sessions(self, gen: int, writes: Any) -> Any:
        self.sent.append(sum(len(k) + len(v) for w in writes for k, v in w.fields.items()))
        return await super().write_sessions(gen, writes)

    async def write_batch(self, gen: int, writes: Any, group: str, progress: Any) -> Any:
        self.sent.append(sum(len(k) + len(v) for w in writes for k, v in w.fields.items()))
        return await super().write_batch(gen, writes, group, progress)


@pytest.mark.parametrize("chunked", [True, False])
def test_a_late_batch_writes_about_what_an_early_one_does_only_when_chunked(
        chunked: bool) -> None:
    events = simulate_session(random.Random(5), "lab", turns=300)  # no compaction: grows
    sink = CountingSink()
    proc = Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g")
    proc.codec.chunked = chunked
    records = as_records(events)
    asyncio.run(_batches(proc, records, 20))
    early = sorted(sink.sent[20:60])[20]  # medians of 40 batches
    late = sorted(sink.sent[-40:])[20]
    assert len(events) > 4000
    if chunked:
        assert late < 1.5 * early
    else:
        assert late > 5 * early  # the whole-row write grows with the session


async def _batches(proc: Processor, records: list[Record], n: int) -> None:
    for i in range(0, len(records), n):
        await proc.process(records[i:i + n])


def test_the_surface_reports_the_prefix_an_edit_left_unchanged() -> None:
    events = simulate_session(random.Random(1), "lab", turns=6, compact_every=2)
    surface = Surface()
    marks: list[tuple[int, int]] = []
    for e in events:
        marks.append((surface.revision, len(surface)))
        before = list(surface.messages())
        surface.apply(e)
        after = list(surface.messages())
        rev, n = marks[-1]
        same = surface.unchanged_since(rev, n)
        assert before[:same] == after[:same]
        assert all(a is b for a, b in zip(before[:same], after[:same], strict=True))
    # across many changes: the minimum over the edits since then
    rev0, n0 = marks[len(marks) // 3]
    same = surface.unchanged_since(rev0, n0)
    assert same <= n0
    replaced = [i for i, e in enumerate(events) if e.source_event_seqs]
    assert replaced, "the simulated session compacts"


def test_todo_versions_folded_from_the_same_state_do_not_see_each_other() -> None:
    """The todo list shares blocks and positions between versions: a version folded on
    from an older state (a retry after a conflict) must not see the newer one's items."""
    unit = TodoUnit()
    events = simulate_session(random.Random(2), "lab", turns=80)
    todo = [e for e in events if e.type.startswith("todo/")]
    assert len(todo) > 100

    def fold(evs: list[Event]) -> Any:
        state = unit.init()
        for e in evs:
            state = unit.apply(state, e)
        return state

    base = fold(todo[:-40])
    a = b = base
    for e in todo[-40:]:
        a = unit.apply(a, e)
    for e in todo[-40:-20:2]:  # an older version goes on differently
        b = unit.apply(b, e)
    assert unit.view(a) == unit.view(fold(todo))
    assert unit.view(b) == unit.view(fold([*todo[:-40], *todo[-40:-20:2]]))
    assert unit.view(base) == unit.view(fold(todo[:-40]))
    assert unit.load(unit.dump(a)) == a
    assert unit.unchanged(base, a, "items") <= base.n


def test_a_missing_chunk_is_an_error_naming_the_field_or_reads_unavailable() -> None:
    events = simulate_session(random.Random(4), "lab", turns=5)
    row = dict(_fold(events, [9], chunk=2).hashes[(1, "lab")])
    gone = SessionRow.part("surface", "messages", 1)
    del row[gone]
    with pytest.raises(BrokenRow, match=gone):
        assemble(row)
    views = SessionRow.views(row)
    assert views["surface"] == {"unavailable": "[content unavailable]"}
    assert views["turns"]["total"] >= 1


def test_a_sealed_chunk_without_its_key_makes_the_view_unavailable_never_ciphertext() -> None:
    events = simulate_session(random.Random(4), "lab", turns=5)
    row = dict(_fold(events, [9], chunk=2).hashes[(1, "lab")])
    row[SessionRow.part("surface", "messages", 0)] = "ss-aead1:AAAA"
    opened = open_fields(None, "lab", row, SessionRow.VIEW, SessionRow.STATE)
    assert not any(k.startswith(SessionRow.PART + "surface:") for k in opened)
    assert SessionRow.parts("surface") not in opened
    assert SessionRow.state("surface") not in opened
    views = SessionRow.views(opened)
    assert views["surface"] == {"unavailable": "[content unavailable]"}
    assert views["todo"] == json.loads(canonical_dumps(views["todo"]))
