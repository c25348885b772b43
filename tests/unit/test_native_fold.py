"""The native fold (the ``native/`` Rust extension) against the Python reference.

Differential: generated logs — valid random walks with compactions (replace ops) and
unknown ignorable events, forks, plus redeliveries, zombie writers, seq gaps and
conflicts, history conflicts, unknown required events and newer formats
(quarantine), corrupt and mis-keyed records (dead letters), and admitted events whose
data has odd shapes and values (1 vs 1.0 vs true, containers, non-string ids: what
the tools, todo, business and compaction units compare and key by; surface events:
tool calls left open and abandoned, results with content, attachment or neither,
unicode content whose token estimate counts characters, compaction replaces of valid
and refused ranges) — are folded by the
Python processor and by the native path, in the same random batches and flushes; every
Redis field, the feed, the index, the progress and the dead letters must be equal.

In CI the extension must be built (the project's install builds it); elsewhere
these tests are skipped when it is missing. The Python fallback is tested by every
other processor test.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.codec import encode
from sessionstream.core.events import Event, Writer, make_event
from sessionstream.core.fork import fork
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.projections import Registry, default_units
from sessionstream.core.projections.base import ProjectionUnit
from sessionstream.core.rows import CHUNK_ITEMS, assemble
from sessionstream.core.simulate import simulate_session
from sessionstream.streams import fold_native
from sessionstream.streams.fold_native import NativeUnavailable
from sessionstream.streams.memory import MemoryDeadLetters as MemoryDLQ
from sessionstream.streams.memory import MemorySink
from sessionstream.streams.ports import WriteOutcome
from sessionstream.streams.processor import Processor
from tests.unit.strategies import new_session, walk_with_plugins
from tests.unit.test_streams_processor import TOPIC, processor

if not fold_native.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)

WRITER = Writer("w1", 2)


def _records(events: list[tuple[Event | bytes, str]], partitions: int) -> list[Record]:
    offsets = [0] * partitions
    out = []
    for ev, key in events:
        p = sum(key.encode()) % partitions
        value = ev if isinstance(ev, bytes) else encode(ev)
        out.append(Record(TOPIC, p, offsets[p], key.encode(), value))
        offsets[p] += 1
    return out


#: Values whose Python equality differs from JSON text equality, or that a unit keys by.
ODD_VALUES = [None, 0, 1, 1.0, True, False, "x", "", [], [1], [1.0], {}, {"a": 1},
              {"a": 1.0}, 2**53 + 1, float(2**53), -0.0, 1.5e-7]


def _odd_data(draw: st.DrawFn, sid: str) -> tuple[str, dict[str, Any]]:
    """One event of a type a native unit reads, with data in shapes and values at its edges."""
    v = st.sampled_from(ODD_VALUES)
    ident = st.sampled_from(["a", "b", "c1", 3])  # 3: not a string (Python keys by it)
    call = st.sampled_from([f"{sid}-c1", f"{sid}-c2", "c9"])
    comp = st.sampled_from(["k1", "k2"])
    kind = draw(st.integers(0, 16))
    if kind == 0:
        return "business/time", {"time": draw(v)}
    if kind == 1:
        return "business/filters", {"filters": draw(v)}
    if kind == 2:
        data = {"id": draw(v), "definition_version": draw(v), "status": draw(v)}
        if draw(st.booleans()):
            data["source_turn"] = draw(v)
        return "business/metric", data
    if kind == 3:
        key, field = draw(st.sampled_from([("business/ambiguities", "ambiguities"),
                                           ("business/plan", "plan_hash"),
                                           ("business/approval", "approval")]))
        return key, {field: draw(v)}
    if kind == 4:
        return "goal/set", {"goal": draw(st.sampled_from(["g1", "g2", ""]))}
    if kind == 5:
        data = {"id": draw(ident), "text": draw(v)}
        status = draw(st.sampled_from(["absent", None, "", "done", "pending", 0]))
        if status != "absent":
            data["status"] = status
        return "todo/add", data
    if kind == 6:
        return "todo/update", {"id": draw(ident),
                               "status": draw(st.sampled_from(["done", "pending"]))}
    if kind == 7:
        data = {"call_id": draw(call), "name": draw(v)}
        if draw(st.booleans()):
            data["idempotency_key"] = draw(v)
        return "tool/call", data
    if kind == 8:
        data = {"call_id": draw(call), "status": draw(st.sampled_from(["ok", "error"]))}
        if draw(st.booleans()):
            data["operation_id"] = draw(st.sampled_from(["op1", "op2", None]))
        if draw(st.booleans()):
            data["version"] = draw(v)
        return "tool/result", data
    if kind == 9:
        calls = draw(st.sampled_from([
            None, [], {}, "", [{"call_id": f"{sid}-c1", "name": "ls"}],
            [{"call_id": f"{sid}-c2", "name": 1}, {"call_id": f"{sid}-c1", "name": "x"}],
            [{"call_id": 5, "name": "x"}], "abc"]))
        return "assistant/message", {"content": [{"type": "text", "text": "hi"}],
                                     "tool_calls": calls}
    if kind == 10:
        return "compaction/start", {"compaction_id": draw(comp), "trigger": draw(v)}
    if kind == 11:
        return "compaction/summary", {
            "compaction_id": draw(comp), "first_position": draw(v), "last_position": 2,
            "shadowed_seqs": draw(st.sampled_from([[1, 2], [], "ab"])),
            "tokens_before": draw(v), "tokens_after": 3, "summarizer": {"model": draw(v)}}
    if kind == 12:
        data = {"compaction_id": draw(comp),
                "outcome": draw(st.sampled_from(["completed", "failed"]))}
        if draw(st.booleans()):
            data["reason"] = draw(v)
        return "compaction/end", data
    if kind == 13:
        return "session/end-seed", {}
    if kind == 14:
        return "turn/end", {"reason": draw(st.sampled_from(["completed", "cancelled"]))}
    if kind == 15:
        return "plan/set", {"steps": [draw(v)], "plan_hash": draw(v)}
    return "business/metric", {"id": "m", "definition_version": draw(v), "status": "ok"}


#: Content values for the surface: unicode (tokens count characters, not bytes), empty
#: values (an abandoned call's node is dropped when nothing else is left of it).
CONTENTS = [*ODD_VALUES, "h\u00e9 \U0001f600", "\u0000\n\"", [{"type": "text", "text": "hi"}]]


def _surface_data(draw: st.DrawFn, sid: str, log: list[Event]) -> dict[str, Any]:
    """make_event arguments of a surface event (the surface unit's edges): tool calls
    and results (answered, open, odd ids), context snapshots, abandoning turn ends, and
    compaction replaces of a run of recent seqs (valid or not: the Python unit refuses)."""
    content = st.sampled_from(CONTENTS)
    call = st.sampled_from([f"{sid}-c1", f"{sid}-c2", f"{sid}-c3", "c9"])
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return {"type": "user/message", "data": {"content": draw(content)},
                "surface_op": draw(st.sampled_from(["append", "none"]))}
    if kind == 1:
        return {"type": "context/snapshot", "data": {"content": draw(content)},
                "surface_op": "append"}
    if kind == 2:
        calls = [{"call_id": draw(call), "name": draw(st.sampled_from(["ls", 1])),
                  "arguments": draw(content)} for _ in range(draw(st.integers(0, 2)))]
        data: dict[str, Any] = {"content": draw(st.sampled_from(["", None, [], "x"]))}
        if calls or draw(st.booleans()):
            data["tool_calls"] = calls
        return {"type": "assistant/message", "data": data, "surface_op": "append"}
    if kind == 3:
        data = {"call_id": draw(call), "status": draw(st.sampled_from(["ok", "error"]))}
        which = draw(st.integers(0, 2))
        if which == 0:
            data["content"] = draw(content)
        elif which == 1:
            data["attachment"] = {"uri": draw(st.sampled_from(["a", "\u00e9"]))}
        return {"type": "tool/result", "data": data, "surface_op": "append"}
    if kind == 4:
        return {"type": "turn/end",
                "data": {"reason": draw(st.sampled_from(["failed", "interrupted", "done"]))}}
    seqs = [e.seq for e in log if e.surface_op.value != "none"][-6:]
    first = draw(st.integers(0, max(0, len(seqs) - 1)))
    run = seqs[first:first + draw(st.integers(0, 3))]
    if draw(st.booleans()) and run:
        run = draw(st.permutations(run))  # out of order: refused
    return {"type": "user/message", "data": {"content": draw(content)},
            "surface_op": "replace", "source_event_seqs": run}


def _append_odd(draw: st.DrawFn, sid: str, log: list[Event]) -> None:
    """Admissible events (the next seqs, linked) with odd data at the end of ``log``."""
    for _ in range(draw(st.integers(1, 12))):
        last = log[-1]
        if draw(st.booleans()):
            etype, data = _odd_data(draw, sid)
            extra: dict[str, Any] = {"type": etype, "data": data}
        else:
            extra = _surface_data(draw, sid, log)
        log.append(make_event(session_id=sid, seq=last.seq + 1, event_id=f"{sid}-o{last.seq}",
                              time=last.time + 1, writer=WRITER, turn_id=last.turn_id,
                              prev_event_id=last.event_id, **extra))


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Record], list[int], set[int], int]:
    """(records, batch sizes, flush after these batches, items per row chunk)."""
    n = draw(st.integers(1, 3))
    logs: dict[str, list[Event]] = {}
    for i in range(n):
        sid = f"s{i}"
        steps = draw(st.integers(0, 60))

        def choose(k: int) -> int:
            return draw(st.integers(0, k - 1)) if k > 1 else 0

        session = walk_with_plugins(new_session(sid, writer=WRITER), choose, steps)
        logs[sid] = list(session.events)
        if draw(st.booleans()) and len(session.events) > 2:
            try:
                child = fork(session, f"{sid}-fork", writer=WRITER)
            except Exception:
                child = None
            if child is not None:
                logs[child.session_id] = list(child.events)
    for sid in sorted(logs):
        if draw(st.integers(0, 2)) == 0:
            _append_odd(draw, sid, logs[sid])
    merged: list[tuple[Event | bytes, str]] = []
    cursors = dict.fromkeys(logs, 0)
    while any(cursors[s] < len(logs[s]) for s in logs):
        for s in logs:
            k = draw(st.integers(1, 6))
            merged.extend((e, s) for e in logs[s][cursors[s]:cursors[s] + k])
            cursors[s] += k
    faults = draw(st.lists(st.sampled_from([
        "dup", "zombie", "gap", "conflict", "history", "unknown", "newer", "corrupt",
        "mismatch", "ignorable"]), max_size=5))
    for f in faults:
        sid = draw(st.sampled_from(sorted(logs)))
        evs = logs[sid]
        last = evs[-1]
        nxt = last.seq + 1
        base: dict[str, Any] = {"session_id": sid, "time": last.time + 1, "writer": WRITER,
                                "type": "todo/add", "data": {"id": f"f{f}", "text": "t"},
                                "prev_event_id": last.event_id}
        pos = draw(st.integers(0, len(merged)))
        if f == "dup":
            item: tuple[Event | bytes, str] = (draw(st.sampled_from(evs)), sid)
        elif f == "zombie":
            item = (make_event(**{**base, "writer": Writer("old", 1)}, seq=nxt,
                               event_id=f"{sid}-zombie"), sid)
        elif f == "gap":
            item = (make_event(**base, seq=nxt + 3, event_id=f"{sid}-gap"), sid)
        elif f == "conflict":
            item = (make_event(**base, seq=max(0, last.seq - 1), event_id=f"{sid}-c"), sid)
        elif f == "history":
            item = (make_event(**{**base, "prev_event_id": "nope"}, seq=nxt,
                               event_id=f"{sid}-h"), sid)
            pos = len(merged)
        elif f == "unknown":
            item = (make_event(**{**base, "type": "alien/thing", "data": {}}, seq=nxt,
                               event_id=f"{sid}-u"), sid)
            pos = len(merged)
        elif f == "ignorable":
            item = (make_event(**{**base, "type": "alien/note", "data": {"x": 1.5e-7}},
                               seq=nxt, event_id=f"{sid}-i", ignorable=True), sid)
            pos = len(merged)
        elif f == "newer":
            item = (make_event(**base, seq=nxt, event_id=f"{sid}-n", format_version=2), sid)
            pos = len(merged)
        elif f == "corrupt":
            item = (b"\xc3\x01garbage", sid)
        else:  # mismatch: a record keyed by another session
            item = (last, "someone-else")
        merged.insert(pos, item)
    records = _records(merged, draw(st.integers(1, 3)))
    sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=8))
    flushes = set(draw(st.lists(st.integers(0, 12), max_size=4)))
    chunk = draw(st.sampled_from([1, 2, 3, CHUNK_ITEMS]))  # small: many chunks per unit
    return records, sizes, flushes, chunk


async def _fold(driver: Any, records: list[Record], sizes: list[int], flushes: set[int],
                background: bool = False) -> None:
    i = b = 0
    while i < len(records):
        size = sizes[b % len(sizes)]
        await driver.fold(records[i:i + size])
        if b in flushes:
            if background:  # replay's: written while the next batches fold
                await driver.flush(background=True)
            else:
                await driver.flush()
        i += size
        b += 1
    await driver.flush()


def _run(records: list[Record], sizes: list[int], flushes: set[int],
         pipeline: ReaderPipeline | None = None, *, native: list[Processor] | None = None,
         chunk: int = CHUNK_ITEMS, background: bool = False
         ) -> tuple[MemorySink, MemorySink, Any, Any]:
    py_sink, na_sink = MemorySink(), MemorySink()
    py_dlq, na_dlq = MemoryDLQ(), MemoryDLQ()
    py = processor(py_sink, pipeline, dead_letters=py_dlq)
    na = processor(na_sink, pipeline, dead_letters=na_dlq, fold="native")
    py.codec.chunk = na.codec.chunk = chunk
    asyncio.run(_fold(py, records, sizes, flushes))
    asyncio.run(_fold(na, records, sizes, flushes, background))
    if native is not None:
        native.append(na)
    return py_sink, na_sink, py_dlq, na_dlq


def _assert_same(py_sink: MemorySink, na_sink: MemorySink, py_dlq: MemoryDLQ,
                 na_dlq: MemoryDLQ) -> None:
    assert na_sink.hashes == py_sink.hashes
    assert na_sink.index == py_sink.index
    assert {g: sorted(f) for g, f in na_sink.feed.items()} == \
        {g: sorted(f) for g, f in py_sink.feed.items()}
    assert na_sink.changes == py_sink.changes
    assert na_sink.progress == py_sink.progress
    assert [(d.reason, d.detail) for d in na_dlq.letters] == \
        [(d.reason, d.detail) for d in py_dlq.letters]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_native_fold_equals_the_python_fold_on_generated_logs(
        case: tuple[list[Record], list[int], set[int], int]) -> None:
    records, sizes, flushes, chunk = case
    _assert_same(*_run(records, sizes, flushes, chunk=chunk))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_background_flushes_write_what_the_python_fold_writes_on_generated_logs(
        case: tuple[list[Record], list[int], set[int], int]) -> None:
    # replay's mid-run flushes: the rows leave the extension, and are sealed and written
    # while the next batches fold (hand-overs to Python wait for them first)
    records, sizes, flushes, chunk = case
    _assert_same(*_run(records, sizes, flushes, chunk=chunk, background=True))


class _RefusingSink(MemorySink):
    """Refuses the first write of ``victim`` (as a row moved under the flush)."""

    def __init__(self, victim: str) -> None:
        super().__init__()
        self.victim, self.refused = victim, 0

    async def write_sessions(self, gen: int, writes: Any) -> Any:
        await asyncio.sleep(0)  # the outcome comes back while the caller folds on
        out = []
        for w in writes:
            if w.session_id == self.victim and not self.refused:
                self.refused += 1
                out.append(WriteOutcome("conflict", -1))
            else:
                out.append(self._write(gen, w))
        return out


def test_a_background_write_that_did_not_apply_is_written_whole_by_the_next_flush() -> None:
    import random

    rng = random.Random(5)
    logs = {f"bg{i}": simulate_session(rng, f"bg{i}", turns=4) for i in range(3)}
    merged = [(e, sid) for k in range(max(map(len, logs.values())))
              for sid, evs in logs.items() if k < len(evs) for e in [evs[k]]]
    records = _records(merged, 2)
    half = len(records) // 2
    py_sink, sink = MemorySink(), _RefusingSink("bg1")
    py = processor(py_sink)
    na = processor(sink, fold="native")
    py.codec.chunk = na.codec.chunk = 2  # many chunks: a delta write would miss some

    async def run() -> None:
        await na.fold(records[:half])
        await na.flush(background=True)
        assert na._flushing is not None  # still being written
        await na.fold(records[half:])  # folds on while that write is refused
        await na.flush()

    asyncio.run(_fold(py, records, [len(records)], set()))
    asyncio.run(run())
    assert sink.refused == 1
    assert sink.hashes == py_sink.hashes


def test_native_fold_equals_the_python_fold_on_simulated_fleets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    built: list[Any] = []  # Python events the native path builds (none: every unit is native)
    real_event = fold_native._event
    monkeypatch.setattr(fold_native, "_event", lambda t: built.append(t) or real_event(t))

    rng = random.Random(3)
    logs = {f"lab{i}": simulate_session(rng, f"lab{i}", turns=4, compact_every=2,
                                        failures=0.2) for i in range(8)}
    merged = [(e, sid) for k in range(max(map(len, logs.values())))
              for sid, evs in logs.items() if k < len(evs) for e in [evs[k]]]
    native: list[Processor] = []
    py_sink, na_sink, py_dlq, na_dlq = _run(_records(merged, 3), [97], {2, 5}, native=native,
                                            chunk=4)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert len(py_sink.hashes) == 8
    # every built-in unit, the surface too, folded in the extension: no session went to
    # Python and no record was decoded into a Python event
    folder: Any = native[0].folder
    assert folder._python == set()
    assert folder.extension.sessions == 8
    assert folder._py_units == ()
    assert built == []
    assert any(f.startswith("part:surface:messages:") for h in na_sink.hashes.values()
               for f in h)
    assert any('"kind":"summary"' in assemble(h)["view:surface"]
               for h in na_sink.hashes.values())
    row = assemble(next(h for (_, sid), h in na_sink.hashes.items() if sid == "lab0"))
    assert any(f.startswith("part:tools:") for h in na_sink.hashes.values() for f in h)
    assert '"results":{"' in row["view:tools"] and '"attempts":[{' in row["view:compaction"]


def _extend(log: list[Event], *items: dict[str, Any]) -> list[Event]:
    out = list(log)
    for kw in items:
        last = out[-1]
        out.append(make_event(session_id=last.session_id, seq=last.seq + 1,
                              event_id=f"{last.session_id}-x{last.seq}", time=last.time + 1,
                              writer=last.writer, turn_id=last.turn_id,
                              prev_event_id=last.event_id, **kw))
    return out


def test_the_native_surface_abandons_calls_replaces_and_refuses_as_the_python_unit() -> None:
    import random

    base = simulate_session(random.Random(4), "a1", turns=3, compact_every=2)
    calls = [{"call_id": "k1", "name": "ls", "arguments": {"p": "\u00e9"}},
             {"call_id": "k2", "name": "cat", "arguments": None}]
    good = _extend(base,
                   {"type": "assistant/message", "data": {"content": "", "tool_calls": calls},
                    "surface_op": "append"},
                   {"type": "tool/result", "data": {"call_id": "k1", "status": "ok"},
                    "surface_op": "append"},
                   {"type": "turn/end", "data": {"reason": "interrupted"}})
    kept = [e.seq for e in good if e.surface_op.value != "none"][-3:]
    good = _extend(good, {"type": "user/message", "data": {"content": "summary \U0001f600"},
                          "surface_op": "replace", "source_event_seqs": kept})
    bad = _extend(simulate_session(random.Random(6), "b1", turns=2),
                  {"type": "user/message", "data": {"content": "s"}, "surface_op": "replace",
                   "source_event_seqs": [10**6]})
    native: list[Processor] = []
    merged = [(e, "a1") for e in good] + [(e, "b1") for e in bad]
    _assert_same(*_run(_records(merged, 1), [13], {1}, native=native, chunk=2))
    folder: Any = native[0].folder
    assert folder._python == {"b1"}  # the refused replace: the Python unit's verdict
    na = native[0].sink
    assert '"projection_error"' in na.hashes[(1, "b1")]["meta"]
    view = assemble(na.hashes[(1, "a1")])["view:surface"]
    assert '"kind":"summary"' in view and "\U0001f600" in view
    assert '"call_id":"k2"' not in view  # abandoned by the interrupted turn


class Counting(ProjectionUnit[int]):
    """A custom Python unit that counts the events of its types (base of the test units
    that fail on chosen events)."""

    key = "counting"
    state_version = 1

    def init(self) -> int:
        return 0

    def apply(self, state: int, event: Event) -> int:
        return state + 1

    def view(self, state: int) -> int:
        return state

    def dump(self, state: int) -> int:
        return state

    def load(self, data: Any) -> int:
        return int(data)


class Fragile(Counting):
    """A custom Python unit that fails on plan/set (a unit bug)."""

    key = "fragile"
    types = frozenset({"todo/add", "plan/set"})

    def apply(self, state: int, event: Event) -> int:
        if event.type == "plan/set":
            raise RuntimeError("fragile unit bug")
        return state + 1


def test_a_custom_python_unit_plugs_in_and_its_failure_quarantines_as_in_python() -> None:
    import random

    events = simulate_session(random.Random(5), "c1", turns=2)
    last = events[-1]
    extra = [make_event(session_id="c1", seq=last.seq + 1 + i, event_id=f"x{i}",
                        time=last.time + i, type=t, data=d, writer=last.writer,
                        prev_event_id=(last.event_id if i == 0 else f"x{i - 1}"))
             for i, (t, d) in enumerate([("todo/add", {"id": "a", "text": "b"}),
                                         ("plan/set", {"steps": ["s"]}),
                                         ("todo/add", {"id": "c", "text": "d"})])]
    pipeline = ReaderPipeline(Registry([*default_units(), Fragile()]),
                              ReaderPipeline.default().catalog)
    records = _records([(e, "c1") for e in [*events, *extra]], 1)
    py_sink, na_sink, py_dlq, na_dlq = _run(records, [7], {1}, pipeline)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert '"projection_error"' in na_sink.hashes[(1, "c1")]["meta"]
    log = [*events, *extra]
    first_plan = next(i for i, e in enumerate(log) if e.type == "plan/set")
    todos = sum(e.type == "todo/add" for e in log[:first_plan])  # up to the failing plan/set
    assert na_sink.hashes[(1, "c1")]["view:fragile"] == str(todos)


def test_the_fold_setting_selects_python_or_native(monkeypatch: pytest.MonkeyPatch) -> None:
    def folder(fold: str) -> str:
        return processor(MemorySink(), fold=fold).folder.name

    assert (folder("python"), folder("native"), folder("auto")) == ("python", "native",
                                                                    "native")
    with pytest.raises(NativeUnavailable, match="SESSIONSTREAM_FOLD='fast'"):
        folder("fast")
    monkeypatch.setattr(fold_native, "_native", None)
    assert folder("auto") == "python"  # the pure-Python fallback
    with pytest.raises(NativeUnavailable, match=r"not available.*make install"):
        folder("native")


def test_sealed_content_folds_as_in_python_through_the_opener(tmp_path: Any) -> None:
    import random

    from sessionstream.governance import ContentCipher
    from sessionstream.governance.keys import FileKeyStore
    from sessionstream.governance.opener import SealedContentOpener

    cipher = ContentCipher(FileKeyStore(tmp_path / "keys"), "default")
    clear_log = simulate_session(random.Random(8), "e1", turns=3)
    sealed_log = []
    for ev in simulate_session(random.Random(9), "e2", turns=3):
        clear, parts = cipher.seal(ev)
        sealed_log.append(clear.replace(sealed=parts) if parts else clear)
    merged = [(e, "e1") for e in clear_log] + [(e, "e2") for e in sealed_log]
    pipeline = ReaderPipeline.default(opener=SealedContentOpener(cipher))
    py_sink, na_sink, py_dlq, na_dlq = _run(_records(merged, 2), [11], {3}, pipeline)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert any(e.sealed for e in sealed_log)
