"""The dashboard's plot series, folded from a session's log (sessionstream.core.series)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstream.core.events import CountingClock, Event, SequentialIds
from sessionstream.core.projections import default_registry
from sessionstream.core.series import (
    Price,
    Prices,
    PricesError,
    SessionSeries,
    Tokens,
    downsample,
)
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session
from sessionstream.core.surface import token_estimate


def _log(turns: int = 9, seed: int = 4) -> list[Event]:
    return simulate_session(random.Random(seed), "plot-1", turns=turns, compact_every=3,
                            failures=0.2)


def _reference_context(events: list[Event]) -> dict[int, int]:
    """The context size after every event, computed the slow, obvious way: the session
    rebuilt from each prefix of its log, its derive_messages() measured."""
    return {events[k].seq: token_estimate(Session.from_events(events[:k + 1])
                                          .derive_messages())
            for k in range(len(events))}


def test_the_context_series_is_the_surface_size_after_every_change_of_the_log() -> None:
    events = _log()
    series = SessionSeries()
    series.add_all(events)
    reference = _reference_context(events)
    assert series.points and all(reference[seq] == tok for seq, tok in series.points)
    changed = [seq for seq, prev in zip(list(reference)[1:], list(reference), strict=False)
               if reference[seq] != reference[prev]]
    assert set(changed) <= {seq for seq, _ in series.points}  # no change is missed
    # the last point is the surface projection's estimate
    states = default_registry().fold(events).states
    assert series.tokens == default_registry().unit("surface").view(
        states["surface"])["token_estimate"]


def test_each_compaction_is_a_drop_from_the_surface_before_to_after_its_replace() -> None:
    events = _log()
    series = SessionSeries()
    series.add_all(events)
    replaces = [e for e in events if e.surface_op.value == "replace"]
    assert replaces and [d["seq"] for d in series.drops] == [e.seq for e in replaces]
    for drop in series.drops:
        before = token_estimate(Session.from_events(
            [e for e in events if e.seq < drop["seq"]]).derive_messages())
        after = token_estimate(Session.from_events(
            [e for e in events if e.seq <= drop["seq"]]).derive_messages())
        assert (drop["before"], drop["after"]) == (before, after)
        attempt = series.compactions[drop["compaction_id"]]
        assert attempt.outcome == "completed" and attempt.drop_seq == drop["seq"]
        summary = next(e for e in events if e.type == "compaction/summary"
                       and e.data["compaction_id"] == attempt.compaction_id)
        assert attempt.recorded_before == summary.data["tokens_before"]


def test_turns_carry_their_usage_status_and_a_waterfall_of_steps_and_tool_calls() -> None:
    s = Session.create("w1", clock=CountingClock(1_000, step=10), ids=SequentialIds("w1"))
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": "q"})
    s.append("request/header", {"provider": "openai", "model": "gpt-x"})
    s.append("assistant/message", {"content": "", "usage": {
        "input_tokens": 1000, "output_tokens": 300, "cached_input_tokens": 400,
        "reasoning_tokens": 200}, "tool_calls": [
            {"call_id": "c1", "name": "sql", "arguments": {}},
            {"call_id": "c2", "name": "read", "arguments": {}}]})
    s.append("tool/call", {"call_id": "c1", "name": "sql", "arguments": {}})
    s.append("tool/result", {"call_id": "c1", "status": "error", "content": "boom"})
    s.append("tool/call", {"call_id": "c2", "name": "read", "arguments": {}})
    s.append("turn/end", {"reason": "interrupted"})
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": "again"})
    s.append("request/header", {"provider": "anthropic", "model": "claude-x"})
    s.append("assistant/message", {"content": "ok", "usage": {
        "input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 900}})
    s.append("step/end")
    s.append("turn/end", {"reason": "completed"})
    prices = Prices({"openai/gpt-x": Price(input=2.0, output=10.0, cached_input=0.5),
                     "claude-x": Price(input=3.0, output=15.0, cached_input=0.3)})
    series = SessionSeries(prices)
    series.add_all(s.events)
    first, second = series.turns_json()["bars"]
    assert (first["status"], first["input"], first["cached"], first["output"],
            first["reasoning"]) == ("interrupted", 600, 400, 300, 200)
    assert first["cost"] == pytest.approx((600 * 2 + 400 * 0.5 + 300 * 10) / 1e6)
    assert (second["input"], second["cached"]) == (50, 900)  # Anthropic: reads beside input
    assert second["cost"] == pytest.approx((50 * 3 + 900 * 0.3 + 20 * 15) / 1e6)
    assert first["duration_ms"] == 80 and first["tool_errors"] == 1
    fall = series.waterfall(0)
    assert fall is not None
    by_label = {(sp["kind"], sp["label"]): sp for sp in fall["spans"]}
    assert by_label[("tool", "sql")]["status"] == "error"
    assert by_label[("tool", "read")]["status"] == "abandoned"  # the turn ended first
    assert by_label[("step", "step 1")]["status"] == "interrupted"
    model = by_label[("model", "openai/gpt-x")]
    assert (model["start"], model["end"]) == (30, 40)  # request/header -> its answer
    assert by_label[("tool", "sql")]["start"] == 40  # declared by the assistant message
    # no price for a model: no cost rather than a wrong one
    unpriced = SessionSeries(Prices({"claude-x": Price(3.0, 15.0)}))
    unpriced.add_all(s.events)
    assert unpriced.turns_json()["bars"][0]["cost"] is None


def test_a_long_session_is_drawn_from_a_bounded_number_of_points_and_bars() -> None:
    events = simulate_session(random.Random(2), "long-1", turns=600, compact_every=40,
                              failures=0.0, chunks=(1, 1))
    series = SessionSeries()
    series.add_all(events)
    body = series.to_json(points=400, bars=100)
    assert body["context"]["total_points"] > 2_000
    drops = {d["seq"] for d in series.drops}
    shown = body["context"]["points"]
    assert len(shown) <= 400 + 2 * len(drops) and {s for s, _ in shown} >= drops
    turns = body["turns"]
    assert turns["total"] == 600 and len(turns["bars"]) <= 100 and turns["per_bar"] == 6
    assert sum(b["turns"] for b in turns["bars"]) == 600
    assert sum(b["output"] for b in turns["bars"]) == turns["totals"]["output"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 50_000)), min_size=1,
                max_size=3_000), st.integers(4, 400))
def test_downsampling_keeps_the_ends_the_extremes_and_never_invents_a_point(
        raw: list[tuple[int, int]], limit: int) -> None:
    points = sorted(dict(raw).items())
    shown = downsample(points, limit)
    assert set(shown) <= set(points) and shown == sorted(shown)
    assert shown[0] == points[0] and shown[-1] == points[-1]
    assert max(y for _, y in shown) == max(y for _, y in points)
    assert min(y for _, y in shown) == min(y for _, y in points)
    assert len(shown) <= max(limit, len(points) if len(points) <= limit else limit + 2)


def test_incremental_folding_equals_folding_at_once() -> None:
    events = _log(turns=6, seed=9)
    whole, parts = SessionSeries(), SessionSeries()
    whole.add_all(events)
    for i in range(0, len(events), 7):
        parts.add_all(events[i:i + 7])
        parts.add_all(events[max(0, i - 3):i + 2])  # a re-read of some events: no-op
    assert parts.to_json(points=10_000) == whole.to_json(points=10_000)


@pytest.mark.parametrize(("table", "needle"), [
    ([1], "expected an object"),
    ({"m": {"input": 1}}, "needs 'output'"),
    ({"m": {"input": -1, "output": 1}}, "must be a number >= 0"),
    ({"m": {"input": 1, "output": 1, "cahced_input": 1}}, "unknown field"),
])
def test_a_bad_price_table_names_the_entry_and_the_field(table: object, needle: str) -> None:
    with pytest.raises(PricesError, match=needle):
        Prices.parse(table, "prices.json")


def test_tokens_split_cached_and_reasoning_whichever_way_the_provider_counts() -> None:
    assert Tokens.of_usage({"input_tokens": 10, "output_tokens": 5}) == Tokens(10, 0, 5, 0)
    assert Tokens.of_usage({"input_tokens": 10, "output_tokens": 5,
                            "cached_input_tokens": 4, "reasoning_tokens": 3}) \
        == Tokens(6, 4, 5, 3)
    assert Tokens.of_usage({"input_tokens": 10, "output_tokens": 5,
                            "cache_read_input_tokens": 40,
                            "cache_creation_input_tokens": 7}) == Tokens(17, 40, 5, 0, 7)
