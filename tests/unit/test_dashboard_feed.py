"""SSE framing and Last-Event-ID cursors of the dashboard's live feed."""

from __future__ import annotations

import json

from sessionstream.dashboard.feed import Cursor, comment, frame, parse_event_id, stream_id_key


def test_an_event_id_names_the_generation_and_the_stream_entry_and_parses_back() -> None:
    c = Cursor(3, "1767225600000-7")
    assert c.event_id() == "3-1767225600000-7"
    assert parse_event_id(c.event_id()) == c


def test_a_missing_or_malformed_last_event_id_is_no_cursor() -> None:
    for bad in (None, "", "x", "1", "1-", "a-1-0", "1-abc", "1-1-0-0", "-1-0"):
        assert parse_event_id(bad) is None, bad


def test_stream_ids_order_by_milliseconds_then_sequence() -> None:
    assert stream_id_key("10-2") < stream_id_key("10-10") < stream_id_key("11-0")


def test_a_frame_is_one_sse_message_with_json_data_on_one_line() -> None:
    raw = frame("change", {"session": "s\nx", "as_of_seq": 4}, "1-5-0").decode()
    assert raw.endswith("\n\n")
    lines = raw.strip("\n").split("\n")
    assert lines[:2] == ["id: 1-5-0", "event: change"]
    assert json.loads(lines[2].removeprefix("data: ")) == {"session": "s\nx", "as_of_seq": 4}
    assert comment("keep-alive") == b": keep-alive\n\n"
