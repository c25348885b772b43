"""The projection registry: one pass over all units, one watermark, replay equality."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.errors import ProjectionError
from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps
from sessionstream.core.projections import ProjectionUnit, Registry, Snapshot, default_registry
from sessionstream.core.projections.index import IndexUnit
from tests.unit.logbuilder import LogBuilder
from tests.unit.strategies import PLUGIN_TYPE, logs, random_log


class Counter(ProjectionUnit[int]):
    """Counts user messages; fails on demand to test isolation."""

    key = "counter"
    state_version = 3

    def __init__(self, fail_on: int | None = None) -> None:
        self.fail_on = fail_on
        self.calls = 0

    def init(self) -> int:
        return 0

    def apply(self, state: int, event: Event) -> int:
        self.calls += 1
        if event.seq == self.fail_on:
            raise KeyError("boom")
        return state + 1 if event.type == "user/message" else state

    def view(self, state: int) -> JsonValue:
        return {"n": state}

    def dump(self, state: int) -> JsonValue:
        return state

    def load(self, data: JsonValue) -> int:
        return int(data)


def test_two_units_with_the_same_key_are_refused():
    with pytest.raises(ValueError, match="counter"):
        Registry([Counter(), Counter()])


def test_default_registry_has_every_built_in_unit_and_reports_versions():
    reg = default_registry()
    assert set(reg.unit_keys()) == {"index", "turns", "tools", "surface", "usage", "todo", "plan",
                               "goal", "business", "compaction", "rejections"}
    assert all(v >= 1 for v in reg.versions().values())
    assert Registry([Counter()]).versions() == {"counter": 3}


def test_apply_folds_every_unit_once_and_reports_only_changed_keys():
    counter = Counter()
    reg = Registry([counter, IndexUnit()])
    b = LogBuilder()
    states = reg.init_states()
    states, changed = reg.apply(states, b.events[0])
    assert changed == ("index",)
    states, changed = reg.apply(states, b.user("hi"))
    assert changed == ("counter", "index") and states["counter"] == 1
    assert counter.calls == 2


def test_apply_returns_the_same_states_when_no_unit_changes():
    reg = Registry([Counter()])
    states = reg.init_states()
    b = LogBuilder()
    assert reg.apply(states, b.events[0]) == (states, ())
    assert reg.apply(states, b.events[0])[0] is states


def test_unrelated_and_unknown_events_leave_every_unit_state_identical():
    reg = default_registry()
    b = LogBuilder()
    b.tool_turn("q", [("c1", "search")])
    states = reg.fold(b.events).states
    unknown = b.add("vendor/telemetry", {"x": 1})
    new, changed = reg.apply(states, unknown)
    assert changed == ("index",)  # the index counts every event; nobody else reads it
    assert all(new[k] is states[k] for k in reg.unit_keys() if k != "index")


def test_a_failing_unit_raises_projection_error_naming_unit_and_seq_and_corrupts_nothing():
    reg = Registry([IndexUnit(), Counter(fail_on=2)])
    b = LogBuilder()
    b.user("a")
    before = reg.fold(b.events)
    bad = b.user("b")
    with pytest.raises(ProjectionError) as info:
        reg.apply(before.states, bad)
    assert info.value.unit == "counter" and info.value.seq == 2
    assert isinstance(info.value.cause, KeyError)
    assert before.states["index"].event_count == 2  # the input states are untouched


def test_fold_reports_the_last_folded_seq_as_watermark():
    reg = default_registry()
    assert reg.fold([]).as_of_seq == -1
    b = LogBuilder()
    b.tool_turn("q", [])
    snap = reg.fold(b.events)
    assert isinstance(snap, Snapshot) and snap.as_of_seq == b.events[-1].seq
    assert set(snap.views()) == set(reg.unit_keys())


def test_a_redelivered_event_does_not_change_the_projection():
    reg = default_registry()
    b = LogBuilder()
    b.tool_turn("q", [("c1", "search")])
    snap = reg.fold(b.events)
    again = reg.fold(b.events[-3:], snap)  # at-least-once delivery re-sends a tail
    assert again.as_of_seq == snap.as_of_seq
    assert all(again.states[k] is snap.states[k] for k in reg.unit_keys())


def _roundtrip(reg: Registry, snap: Snapshot) -> Snapshot:
    """What the stream processor does between batches: dump to JSON text, load back."""
    text = json.dumps(snap.dump(), sort_keys=True)
    return reg.snapshot(json.loads(text), snap.as_of_seq)


def _incremental(reg: Registry, events: list[Event]) -> Snapshot:
    states: Any = reg.init_states()
    for e in events:
        states, _ = reg.apply(states, e)
    return Snapshot(reg, events[-1].seq if events else -1, states)


PROFILE = settings(max_examples=60, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_generated_logs_cover_what_the_units_must_handle():
    """The generator reaches every shape the unit tests below rely on."""
    types: set[str] = set()
    reasons: set[str] = set()
    for seed in range(40):
        for e in random_log(seed, 150):
            types.add(e.type)
            if e.type == "turn/end":
                reasons.add(e.data["reason"])
    assert {PLUGIN_TYPE, "compaction/summary", "compaction/end", "business/metric",
            "business/filters", "business/approval", "goal/set", "plan/set", "todo/update",
            "tool/result", "context/snapshot"} <= types
    assert any(e.surface_op.value == "replace" for e in random_log(3, 400))
    assert {"completed", "failed", "cancelled", "interrupted"} <= reasons


@PROFILE
@given(logs(max_steps=80))
def test_replay_from_seq_zero_equals_the_incrementally_folded_state(events):
    reg = default_registry()
    replay = reg.fold(events)
    incremental = _incremental(reg, events)
    assert replay.as_of_seq == incremental.as_of_seq
    assert replay.views() == incremental.views()
    assert dict(replay.states) == dict(incremental.states)


@PROFILE
@given(logs(max_steps=80), st.data())
def test_folding_in_batches_with_dump_and_load_between_equals_one_fold(events, data):
    reg = default_registry()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=6)))
    snap = reg.fold([])
    start = 0
    for cut in [*cuts, len(events)]:
        snap = reg.fold(events[start:cut], _roundtrip(reg, snap))
        start = cut
    whole = reg.fold(events)
    assert snap.as_of_seq == whole.as_of_seq
    assert snap.views() == whole.views()
    assert dict(snap.states) == dict(whole.states)


@PROFILE
@given(logs(max_steps=60))
def test_views_and_dumps_are_plain_json(events):
    snap = default_registry().fold(events)
    for value in (snap.views(), snap.dump()):
        assert json.loads(json.dumps(value)) == value


@PROFILE
@given(logs(max_steps=60))
def test_every_unit_keeps_its_state_object_for_event_types_it_does_not_declare(events):
    reg = default_registry()
    states: Any = reg.init_states()
    for e in events:
        for unit in reg.units:
            if unit.types is not None and e.type not in unit.types:
                assert unit.apply(states[unit.key], e) is states[unit.key], (unit.key, e.type)
        states, _ = reg.apply(states, e)


@PROFILE
@given(logs(max_steps=60), st.data())
def test_every_units_encode_equals_the_canonical_json_of_its_view_and_dump(events, data):
    """``encode`` (what the processor stores) is exactly the canonical text of view and
    dump, also for states at intermediate points and after a dump/load round trip."""
    reg = default_registry()
    cut = data.draw(st.integers(0, len(events)))
    snaps = [reg.fold(events[:cut]), reg.fold(events)]
    snaps.append(_roundtrip(reg, snaps[-1]))
    for snap in snaps:
        for unit in reg.units:
            state = snap.states[unit.key]
            assert unit.encode(state) == (canonical_dumps(unit.view(state)),
                                          canonical_dumps(unit.dump(state))), unit.key
