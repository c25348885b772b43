"""Import/export keeps every field its table carries and notes every other one; wrong kinds
and deep nesting are named errors (the field tables of sessionstream.core.providers.fields)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.cli.main import main
from sessionstream.core.events import CountingClock, SequentialIds
from sessionstream.core.providers import convert, fields
from sessionstream.core.providers.convert import export_session, import_conversation
from sessionstream.core.providers.errors import FieldTypeError, NestingTooDeep
from sessionstream.core.providers.fields import MAX_BODY_DEPTH, TABLES, render_tables
from sessionstream.core.session import Session
from tests.fixtures.bodies import FULL, NOTED
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import validate

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _import(api: str, body: Any) -> Any:
    return import_conversation(api, body, session_id="imp", clock=CountingClock(),
                               ids=SequentialIds("imp"))


def _round_trip(api: str, body: Any) -> tuple[dict[str, Any], list[str]]:
    """export(import(body)) and the pointers both reports name."""
    imp = _import(api, body)
    built, notes = export_session(api, list(imp.events))
    return built.body, [n.path for n in imp.report] + [n.path for n in notes]


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


@pytest.mark.parametrize("api", sorted(FULL))
def test_the_full_body_uses_every_field_its_tables_map_or_keep(api: str) -> None:
    """Guards the next test: a field added to a table without a use here fails."""
    named = {k for t in TABLES[api].values() for k in (*t.mapped, *t.kept)}
    assert named - _keys(FULL[api]) - _keys(NOTED[api][0]) == set()
    validate(api, FULL[api])


@pytest.mark.parametrize("api", sorted(FULL))
def test_import_then_export_gives_back_every_mapped_and_kept_field(api: str) -> None:
    body, noted = _round_trip(api, FULL[api])
    assert body == FULL[api]
    assert noted == []


def test_chat_max_tokens_comes_back_under_the_name_the_body_used() -> None:
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]}
    assert _round_trip("openai-chat", body)[0] == body
    newer = {**body, "max_completion_tokens": 64}
    del newer["max_tokens"]
    assert _round_trip("openai-chat", newer)[0] == newer


def test_an_exported_responses_message_id_survives_a_round_trip() -> None:
    """msg_ss<seq> is derived from the seq; after an import the seqs differ, the id not."""
    s = cases.manual()
    s.append("todo/add", {"id": "t1", "text": "check", "status": "open"})  # not imported
    s.append("turn/start")
    s.append("user/message", {"content": "more"})
    s.append("step/start")
    s.append("request/header", {"provider": "p", "model": "m"})
    s.append("assistant/message", {"content": [{"type": "text", "text": "a"},
                                               {"type": "text", "text": "b"}]})
    built, _ = export_session("openai-responses", s.events)
    ids = [i["id"] for i in built.body["input"] if i.get("id", "").startswith("msg_ss")]
    assert ids
    imp = _import("openai-responses", built.body)
    seqs = {f"msg_ss{e.seq}" for e in imp.events if e.type == "assistant/message"}
    assert set(ids) - seqs, "the case must renumber the message, or it shows nothing"
    again, _ = export_session("openai-responses", list(imp.events))
    assert [i["id"] for i in again.body["input"] if i.get("id", "").startswith("msg_")] == ids
    assert again.body == built.body


@pytest.mark.parametrize(("api", "other"), [("openai-chat", "anthropic"),
                                            ("openai-responses", "openai-chat"),
                                            ("anthropic", "openai-responses")])
def test_an_export_to_another_api_notes_every_kept_field(api: str, other: str) -> None:
    events = list(_import(api, FULL[api]).events)
    kept = [e for e in events if "provider_fields" in e.data]
    assert kept
    built, notes = export_session(other, events)
    noted = {s for n in notes if f"of {api} not carried into {other}" in n.note for s in n.seqs}
    assert {e.seq for e in kept} <= noted
    assert "fc_1" not in json.dumps(built.body) and "alice" not in json.dumps(built.body)


def _diff(a: Any, b: Any, path: str = "") -> set[str]:
    """JSON pointers where ``a`` and ``b`` differ (the shallowest differing ones)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {p for k in a.keys() | b.keys() for p in _diff(a.get(k), b.get(k),
                                                                f"{path}/{k}")}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {p for i, (x, y) in enumerate(zip(a, b, strict=True))
                for p in _diff(x, y, f"{path}/{i}")}
    return set() if a == b else {path}


@pytest.mark.parametrize("api", sorted(NOTED))
def test_a_field_the_log_cannot_carry_is_named_by_the_report(api: str) -> None:
    body, expected = NOTED[api]
    imp = _import(api, body)
    reported = {n.path for n in imp.report}
    assert expected <= reported
    built, _ = export_session(api, list(imp.events))
    for changed in _diff(body, built.body):
        assert any(changed == r or changed.startswith(r + "/") or r.startswith(changed + "/")
                   for r in reported), f"{changed} changed without a note"


def test_a_system_message_inside_the_conversation_is_noted_as_moved() -> None:
    body = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "system", "content": "Now be formal."}]}
    notes = [n for n in _import("openai-chat", body).report if n.path == "/messages/1"]
    assert notes and "moved" in notes[0].note


# Property: message-level objects are one event's own, so any extra field on them (a
# field a newer API version adds) comes back from an export to the same API.
_SLOTS = {
    "openai-chat": ["/messages/1", "/messages/2", "/messages/2/tool_calls/0",
                    "/messages/2/tool_calls/0/function", "/messages/3", "/messages/4",
                    "/messages/4/content/0", "/messages/5/content/0", "/tools/0",
                    "/tools/0/function"],
    "openai-responses": ["/input/1", "/input/1/content/0", "/input/3", "/input/4",
                         "/input/5", "/input/5/content/0", "/tools/0"],
    "anthropic": ["/system/0", "/messages/0/content/0", "/messages/1/content/2",
                  "/messages/1/content/3", "/messages/2/content/0", "/tools/0"],
}
_NAMES = st.sampled_from(["x_new", "cache_key", "label"])  # none a table names
_VALUES = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(),
                    st.lists(st.integers(0, 3), max_size=2))


def _slot(body: dict[str, Any], pointer: str) -> dict[str, Any]:
    node: Any = body
    for token in pointer.split("/")[1:]:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node  # type: ignore[no-any-return]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_extra_field_of_a_message_item_or_tool_round_trips(data: Any) -> None:
    api = data.draw(st.sampled_from(sorted(_SLOTS)))
    body = copy.deepcopy(FULL[api])
    for pointer in data.draw(st.lists(st.sampled_from(_SLOTS[api]), min_size=1, unique=True)):
        obj = _slot(body, pointer)
        for name, value in data.draw(st.dictionaries(_NAMES, _VALUES, min_size=1,
                                                     max_size=2)).items():
            if name not in obj:  # a mapped field keeps its own meaning
                obj[name] = value
    again, noted = _round_trip(api, body)
    assert again == body
    assert noted == []


# ------------------------------------------------------------------------- type checks


def _wrong(kinds: tuple[str, ...]) -> Any:
    """A value of a JSON kind not in ``kinds``."""
    for value, kind in (("text", "string"), ({"a": 1}, "object"), (1.5, "number"),
                        (True, "boolean")):
        if kind not in kinds:
            return value
    return None  # pragma: no cover - every table names a narrower kind set


def _named_fields(api: str, body: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Every field of ``body`` a field table names, as (JSON pointer, accepted kinds):
    found by watching which table the importer applies to which object."""
    seen: list[tuple[str, Any, Mapping[str, Any]]] = []

    def watching(table: Any, obj: Mapping[str, Any], path: str, *args: Any) -> Any:
        seen.append((path, table, obj))
        return fields.take(table, obj, path, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(convert, "take", watching)
        _import(api, body)
    name = convert._snake if api == "gemini" else str
    return [(f"{path}/{key}", table.mapped.get(name(key)) or table.kept[name(key)])
            for path, table, obj in seen for key in obj
            if name(key) in table.mapped or name(key) in table.kept]


def _set(body: Any, pointer: str, value: Any) -> None:
    *parents, last = pointer.split("/")[1:]
    node = body
    for token in parents:
        node = node[int(token)] if isinstance(node, list) else node[token]
    node[int(last) if isinstance(node, list) else last] = value


#: What the issue's hostile bodies put in typed fields (a number for text, text for a
#: number or a flag, text that is no base64 for a signature, null, containers).
HOSTILE = st.sampled_from([5, 1.5, "hot", "yes", "1", "not base64!", None, True, [], {},
                           [1], {"a": 1}])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_hostile_value_in_any_typed_field_is_a_named_error_at_its_pointer(data: Any) -> None:
    api = data.draw(st.sampled_from(sorted(FULL)))
    named = _named_fields(api, FULL[api])
    pointer, kinds = data.draw(st.sampled_from(named))
    value = data.draw(HOSTILE)
    body = copy.deepcopy(FULL[api])
    _set(body, pointer, value)
    if fields._accepts(kinds, value):  # a value of a kind the field takes: no type error
        return
    with pytest.raises(FieldTypeError) as info:
        _import(api, body)
    assert info.value.path == pointer


def test_the_hostile_property_sees_every_table_of_every_api() -> None:
    """Guards the property above: each API's full body reaches every one of its tables."""
    for api in FULL:
        named = {p for p, _k in _named_fields(api, FULL[api])}
        assert len(named) > 20, api
    seen: set[str] = set()
    for api in FULL:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(convert, "take", lambda table, *a, _api=api: (
                seen.add(f"{_api} {table.where}"), fields.take(table, *a))[1])
            _import(api, FULL[api])
    # the Responses body carries its system prompt as instructions, not as a message
    assert {f"{api} {t.where}" for api in TABLES for t in TABLES[api].values()} - seen == {
        "openai-responses /input/* (message, role system, developer)"}


@pytest.mark.parametrize(("api", "key"), [(api, key) for api in sorted(TABLES)
                                          for key in (*TABLES[api]["body"].mapped,
                                                      *TABLES[api]["body"].kept)])
def test_a_body_field_of_the_wrong_kind_is_a_named_error(api: str, key: str) -> None:
    table = TABLES[api]["body"]
    body = {**FULL[api], key: _wrong(table.mapped.get(key) or table.kept[key])}
    with pytest.raises(FieldTypeError) as info:
        _import(api, body)
    assert info.value.path == f"/{key}"


@pytest.mark.parametrize(("api", "body", "pointer"), [
    ("openai-chat", {"max_tokens": "100", "messages": []}, "/max_tokens"),
    ("openai-chat", {"max_completion_tokens": 1.5, "messages": []}, "/max_completion_tokens"),
    ("openai-chat", {"reasoning_effort": 3, "messages": []}, "/reasoning_effort"),
    ("openai-chat", {"messages": [{"role": "user", "name": 5, "content": "x"}]},
     "/messages/0/name"),
    ("openai-chat", {"messages": [], "tools": [{"type": "function", "function": {
        "name": "f", "strict": "yes"}}]}, "/tools/0/function/strict"),
    ("anthropic", {"max_tokens": 1.0, "messages": []}, "/max_tokens"),
    ("anthropic", {"system": 5, "messages": []}, "/system"),
    ("anthropic", {"system": ["be brief"], "messages": []}, "/system/0"),
    ("anthropic", {"messages": [{"role": "assistant", "content": ["x"]}]},
     "/messages/0/content/0"),
    ("openai-responses", {"input": [], "reasoning": {"effort": 2}}, "/reasoning/effort"),
    ("openai-responses", {"input": [{"type": "function_call", "call_id": "c", "name": "f",
                                     "arguments": "{}", "status": 1}]}, "/input/0/status"),
])
def test_the_reported_bad_inputs_are_named_errors_with_their_pointer(
        api: str, body: Any, pointer: str) -> None:
    with pytest.raises(FieldTypeError) as info:
        _import(api, body)
    assert info.value.path == pointer
    assert pointer in str(info.value) and "expected" in str(info.value)


# ----------------------------------------------------------------------------- nesting


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def test_a_body_at_the_depth_limit_imports_and_one_level_more_is_a_named_error() -> None:
    """The limit keeps every imported value storable: the deepest a body's value lands in
    the log is a request parameter, two levels deeper (session/start imported.params)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "metadata": _nested(MAX_BODY_DEPTH - 1)}
    Session.from_events(_import("openai-chat", body).events)  # valid event data
    body["metadata"] = _nested(MAX_BODY_DEPTH)
    with pytest.raises(NestingTooDeep) as info:
        _import("openai-chat", body)
    assert info.value.path.startswith("/metadata/a/a")


def test_deeply_nested_tool_arguments_are_a_named_error() -> None:
    args = "[" * 5000 + "]" * 5000
    body = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}]}]}
    with pytest.raises(NestingTooDeep) as info:
        _import("openai-chat", body)
    assert info.value.path == "/messages/1/tool_calls/0/function/arguments"


# -------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(("content", "message"), [
    ('{"model": "m", "max_tokens": "100", "messages": []}',
     "at /max_tokens: expected integer or null, got string"),
    ('{"model": "m", "reasoning_effort": 3, "messages": []}',
     "at /reasoning_effort: expected string or null, got integer"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": '
     + json.dumps(_nested(200)) + "}", "nested deeper than"),
    ('{"messages": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply to read"),
])
def test_bad_field_kinds_and_deep_nesting_exit_2_on_the_command_line(
        tmp_path: Path, content: str, message: str) -> None:
    src = tmp_path / "body.json"
    src.write_text(content)
    dest = tmp_path / "out.jsonl"
    out = CliRunner().invoke(main, ["log", "import", "--from", "openai-chat", str(src),
                                    "-o", str(dest)])
    assert out.exit_code == 2, out.output
    assert message in out.output and str(src) in out.output
    assert "Traceback" not in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)
    assert not dest.exists()


def test_a_kept_field_travels_through_the_command_line(tmp_path: Path) -> None:
    src = tmp_path / "body.json"
    src.write_text(json.dumps(FULL["openai-responses"]))
    log = tmp_path / "s.jsonl"
    runner = CliRunner()
    assert runner.invoke(main, ["log", "import", "--from", "openai-responses", str(src),
                                "-o", str(log)]).exit_code == 0
    out = runner.invoke(main, ["log", "export", "--to", "openai-responses", str(log),
                               "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["body"] == FULL["openai-responses"]


def test_harness_md_shows_the_field_tables() -> None:
    text = (DOCS / "harness.md").read_text(encoding="utf-8")
    assert render_tables() in text, "docs/harness.md's field tables are stale: paste " \
        "sessionstream.core.providers.fields.render_tables()"


@pytest.mark.parametrize(("api", "tool"), [
    ("openai-responses", {"type": "web_search", "search_context_size": "low"}),
    ("anthropic", {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}),
])
def test_a_built_in_tool_comes_back_at_its_place_and_is_noted_for_another_api(
        api: str, tool: dict[str, Any]) -> None:
    body = copy.deepcopy(FULL[api])
    body["tools"].insert(0, tool)
    again, noted = _round_trip(api, body)
    assert again == body and noted == []
    other = "openai-chat"
    _built, notes = export_session(other, list(_import(api, body).events))
    assert any(f"built-in tool {tool['type']!r} of {api} not carried" in n.note for n in notes)
