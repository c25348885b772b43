"""The sink contract: one suite of behaviour tests every Sink adapter must pass.

Subclassed once per backend (the eventsourcing pattern): ``tests/unit/test_sink_memory.py``
runs it over ``streams.memory.MemorySink``, ``tests/integration/test_sink_redis.py`` over
``streams.sink.RedisSink`` and its Lua script on the real Redis. A subclass provides the
``harness`` fixture: the sink plus the few probes a test needs beyond the Sink port
(set the generation pointer, read the change streams, seed the writer's offset index).
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from sessionstream.streams.ports import SessionWrite, Sink


class SinkHarness(Protocol):
    sink: Sink

    async def set_generation(self, gen: int) -> None: ...

    async def session_changes(self, gen: int, session_id: str) -> list[dict[str, Any]]: ...

    async def feed(self, gen: int) -> list[dict[str, Any]]: ...

    async def set_writer_first_offset(self, session_id: str, offset: int) -> None: ...


def write(sid: str = "s1", *, base: int = -1, last: int = 0, seq: int = 0,
          fields: dict[str, str] | None = None, changed: tuple[str, ...] = ("todo",),
          activity: int = 1000, force: bool = False, deletes: tuple[str, ...] = ()
          ) -> SessionWrite:
    return SessionWrite(session_id=sid, partition=0, base_offset=base, last_offset=last,
                        as_of_seq=seq, fields=fields if fields is not None else
                        {"view:todo": '{"n":1}', "meta": "{}"},
                        changed=changed, activity_ms=activity, force=force, deletes=deletes)


class SinkContract:
    """Behaviour every sink shares; see the module docstring."""

    @pytest.fixture
    def harness(self) -> SinkHarness:
        raise NotImplementedError("a backend's test class provides the harness")

    # -- generation --------------------------------------------------------------------
    async def test_the_generation_is_the_first_until_a_pointer_names_another(
            self, harness: SinkHarness) -> None:
        assert await harness.sink.generation() == 1
        await harness.set_generation(3)
        assert await harness.sink.generation() == 3

    # -- session writes: compare-and-set by offset ---------------------------------------
    async def test_a_first_write_applies_and_stores_fields_with_the_watermark(
            self, harness: SinkHarness) -> None:
        [out] = await harness.sink.write_sessions(1, [write(last=5, seq=2)])
        assert (out.status, out.stored_offset) == ("applied", -1)
        row = (await harness.sink.load(1, ["s1"]))["s1"]
        assert row == {"view:todo": '{"n":1}', "meta": "{}", "as_of_offset": "5",
                       "as_of_seq": "2"}

    async def test_a_redelivered_write_is_stale_and_changes_nothing(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write(last=5)])
        again = write(base=-1, last=5, fields={"view:todo": '{"n":2}'})
        [out] = await harness.sink.write_sessions(1, [again])
        assert (out.status, out.stored_offset) == ("stale", 5)
        older = write(base=-1, last=4, fields={"view:todo": '{"n":3}'})
        [out] = await harness.sink.write_sessions(1, [older])
        assert (out.status, out.stored_offset) == ("stale", 5)
        assert (await harness.sink.load(1, ["s1"]))["s1"]["view:todo"] == '{"n":1}'

    async def test_a_forced_write_rewrites_at_the_same_offset(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write(last=5)])
        [out] = await harness.sink.write_sessions(
            1, [write(base=5, last=5, fields={"view:todo": '{"n":9}'}, force=True)])
        assert out.status == "applied"
        assert (await harness.sink.load(1, ["s1"]))["s1"]["view:todo"] == '{"n":9}'

    async def test_a_write_from_a_moved_base_is_a_conflict_and_writes_nothing(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write(last=5)])
        [out] = await harness.sink.write_sessions(
            1, [write(base=3, last=8, fields={"view:todo": '{"n":7}'})])
        assert (out.status, out.stored_offset) == ("conflict", 5)
        row = (await harness.sink.load(1, ["s1"]))["s1"]
        assert (row["view:todo"], row["as_of_offset"]) == ('{"n":1}', "5")

    async def test_a_write_deletes_the_fields_it_names_in_the_same_call(
            self, harness: SinkHarness) -> None:
        """Chunks past a collection's new count go in the call that writes the rest."""
        parts = {f"part:todo:items:{i}": f'{{"i":{i}}}' for i in range(1500)}
        await harness.sink.write_sessions(1, [write(last=5, fields={**parts, "meta": "{}"})])
        gone = tuple(f"part:todo:items:{i}" for i in range(2, 1500))
        [out] = await harness.sink.write_sessions(1, [write(
            base=5, last=6, seq=1, fields={"part:todo:items:1": '{"i":"one"}'},
            deletes=gone)])
        assert out.status == "applied"
        row = (await harness.sink.load(1, ["s1"]))["s1"]
        assert row == {"part:todo:items:0": '{"i":0}', "part:todo:items:1": '{"i":"one"}',
                       "meta": "{}", "as_of_offset": "6", "as_of_seq": "1"}

    async def test_one_batch_applies_each_session_on_its_own_base(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write("a", last=5), write("b", last=5)])
        outs = await harness.sink.write_sessions(1, [
            write("a", base=5, last=7, seq=1, fields={"view:todo": '{"n":2}'}),
            write("b", base=3, last=7, seq=1, fields={"view:todo": '{"n":3}'}),
            write("c", base=-1, last=2, fields={"view:todo": '{"n":4}'}),
        ])
        assert [(o.status, o.stored_offset) for o in outs] == \
            [("applied", 5), ("conflict", 5), ("applied", -1)]
        rows = await harness.sink.load(1, ["a", "b", "c"])
        assert [rows[s]["view:todo"] for s in "abc"] == ['{"n":2}', '{"n":1}', '{"n":4}']

    async def test_a_refused_first_write_creates_no_row(self, harness: SinkHarness) -> None:
        [out] = await harness.sink.write_sessions(1, [write(base=2, last=8)])
        assert (out.status, out.stored_offset) == ("conflict", -1)
        assert (await harness.sink.load(1, ["s1"])) == {"s1": {}}

    async def test_each_session_of_one_call_is_decided_on_its_own(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write("a", last=1)])
        outs = await harness.sink.write_sessions(
            1, [write("a", base=0, last=2), write("b", last=3), write("a", base=-1, last=1)])
        assert [(o.status, o.stored_offset) for o in outs] == [
            ("conflict", 1), ("applied", -1), ("stale", 1)]

    async def test_an_applied_write_appends_to_the_session_change_record(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write(last=5, seq=2, changed=("todo", "index"))])
        await harness.sink.write_sessions(1, [write(last=5, seq=2)])  # stale: no entry
        await harness.sink.write_sessions(1, [write(base=5, last=9, seq=4)])
        assert await harness.session_changes(1, "s1") == [
            {"session": "s1", "as_of_seq": 2, "offset": 5, "changed": ["todo", "index"]},
            {"session": "s1", "as_of_seq": 4, "offset": 9, "changed": ["todo"]},
        ]

    async def test_generations_do_not_share_rows(self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write(last=5)])
        [out] = await harness.sink.write_sessions(2, [write(last=1)])
        assert out.status == "applied"
        assert (await harness.sink.load(2, ["s1"]))["s1"]["as_of_offset"] == "1"
        assert (await harness.sink.load(1, ["s1"]))["s1"]["as_of_offset"] == "5"

    # -- reading back ----------------------------------------------------------------------
    async def test_load_fields_returns_only_the_fields_asked_and_present(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_sessions(1, [write(last=5)])
        got = await harness.sink.load_fields(1, ["s1", "nobody"],
                                             ["meta", "as_of_seq", "sv:todo"])
        assert got == {"s1": {"meta": "{}", "as_of_seq": "0"}, "nobody": {}}

    async def test_the_writer_first_offset_is_none_until_the_writer_index_has_one(
            self, harness: SinkHarness) -> None:
        assert await harness.sink.writer_first_offset("s1") is None
        await harness.set_writer_first_offset("s1", 42)
        assert await harness.sink.writer_first_offset("s1") == 42

    # -- tenant writes -------------------------------------------------------------------
    async def test_the_session_index_orders_by_activity_and_never_moves_back(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_tenant(
            1, [write("a", activity=300), write("b", activity=100), write("c", activity=200)],
            "g", {})
        await harness.sink.write_tenant(1, [write("b", activity=50), write("c", activity=400)],
                                        "g", {})
        assert await harness.sink.session_ids(1, 0, 10) == ["b", "a", "c"]
        assert await harness.sink.session_ids(1, 1, 1) == ["a"]
        assert await harness.sink.session_ids(2, 0, 10) == []

    async def test_the_tenant_feed_carries_every_write_in_order_per_generation(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_tenant(1, [write("a", last=3, seq=1), write("b", last=4)],
                                        "g", {})
        await harness.sink.write_tenant(2, [write("a", last=7, seq=5)], "g", {})
        assert [(c["session"], c["offset"]) for c in await harness.feed(1)] == [
            ("a", 3), ("b", 4)]
        assert await harness.feed(2) == [
            {"session": "a", "as_of_seq": 5, "offset": 7, "changed": ["todo"]}]

    async def test_progress_only_moves_forward_and_is_per_group(
            self, harness: SinkHarness) -> None:
        await harness.sink.write_tenant(1, [], "g", {"t:0": 10, "t:1": 4})
        await harness.sink.write_tenant(1, [], "g", {"t:0": 7, "t:1": 6})
        await harness.sink.write_tenant(1, [], "other", {"t:0": 1})
        assert await harness.sink.load_progress("g", ["t:0", "t:1", "t:2"]) == {
            "t:0": 10, "t:1": 6}
        assert await harness.sink.load_progress("other", ["t:0"]) == {"t:0": 1}

    # -- a live batch in one call (ports.BatchSink) ----------------------------------------
    async def test_a_batch_in_one_call_writes_sessions_index_feed_and_progress(
            self, harness: SinkHarness) -> None:
        sink: Any = harness.sink
        await sink.write_sessions(1, [write("b", last=5)])
        out = await sink.write_batch(1, [write("a", last=3, seq=1, activity=300),
                                         write("b", base=-1, last=5, activity=100)],
                                     "g", {"t:0": 7})
        assert not out.moved and out.progress_written
        assert [(o.status, o.stored_offset) for o in out.outcomes] == [
            ("applied", -1), ("stale", 5)]
        assert (await sink.load(1, ["a"]))["a"]["as_of_offset"] == "3"
        # the stale session gets no index score and no feed entry
        assert await sink.session_ids(1, 0, 10) == ["a"]
        assert [c["session"] for c in await harness.feed(1)] == ["a"]
        assert await sink.load_progress("g", ["t:0"]) == {"t:0": 7}

    async def test_a_conflict_in_a_batch_holds_the_progress_back(
            self, harness: SinkHarness) -> None:
        """The caller refolds the conflicted session and writes the progress after it:
        a crash in between must re-read the batch, not skip it."""
        sink: Any = harness.sink
        await sink.write_sessions(1, [write("b", last=5)])
        await sink.write_tenant(1, [], "g", {"t:0": 2})
        out = await sink.write_batch(1, [write("a", last=6), write("b", base=3, last=6)],
                                     "g", {"t:0": 6})
        assert not out.moved and not out.progress_written
        assert [o.status for o in out.outcomes] == ["applied", "conflict"]
        assert [c["session"] for c in await harness.feed(1)] == ["a"]
        assert await sink.load_progress("g", ["t:0"]) == {"t:0": 2}

    async def test_a_batch_for_a_generation_the_pointer_left_writes_nothing(
            self, harness: SinkHarness) -> None:
        sink: Any = harness.sink
        await harness.set_generation(2)
        out = await sink.write_batch(1, [write("a", last=3)], "g", {"t:0": 3})
        assert out.moved and out.outcomes == ()
        assert await sink.load(1, ["a"]) == {"a": {}}
        assert await harness.feed(1) == []
        assert await sink.load_progress("g", ["t:0"]) == {}
        out = await sink.write_batch(2, [write("a", last=3)], "g", {"t:0": 3})
        assert not out.moved and out.progress_written
        assert (await sink.load(2, ["a"]))["a"]["as_of_offset"] == "3"
