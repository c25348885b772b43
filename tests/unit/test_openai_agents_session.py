"""SessionstreamSession (the OpenAI Agents SDK session) on the in-process stores: the item
mapping, pops and clears as appended markers, compaction that shadows, placeholders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents.memory.session import is_openai_responses_compaction_aware_session
from agents.memory.session_settings import SessionSettings

from sessionstream.core.compaction import Budget
from sessionstream.core.events import Draft
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.integrations.openai_agents import CLEAR, POP, SessionstreamSession, items_of
from sessionstream.integrations.store import JsonlStore, MemoryStore, SessionStore

USER: Any = {"role": "user", "content": "what is in /tmp?"}
ASSISTANT: Any = {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                  "content": [{"type": "output_text", "text": "Let me look.",
                               "annotations": []}]}
CALL: Any = {"type": "function_call", "call_id": "call_1", "name": "ls",
             "arguments": '{"path": "/tmp"}', "id": "fc_1"}
OUTPUT: Any = {"type": "function_call_output", "call_id": "call_1", "output": "a.txt b.txt"}
REASONING: Any = {"type": "reasoning", "id": "rs_1", "summary": []}
FINAL: Any = {"type": "message", "role": "assistant", "content": [
    {"type": "output_text", "text": "Two files.", "annotations": []}]}


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SessionStore:
    return MemoryStore() if request.param == "memory" else JsonlStore(tmp_path)


async def test_items_round_trip_exactly_and_map_to_core_events(store: SessionStore) -> None:
    s = SessionstreamSession("conv-1", store)
    await s.add_items([USER])
    await s.add_items([REASONING, ASSISTANT, CALL, OUTPUT, FINAL])
    assert await s.get_items() == [USER, REASONING, ASSISTANT, CALL, OUTPUT, FINAL]
    types = [e.type for e in s.handle.events()]
    assert types == ["session/start", "user/message", "openai-agents/item", "turn/start",
                     "step/start", "assistant/message", "assistant/message", "tool/call",
                     "tool/result", "assistant/message", "step/end", "turn/end"]
    session = s.handle.session()
    assert session is not None
    messages = session.derive_messages()
    assert [m.content for m in messages] == ["what is in /tmp?", "Let me look.", "",
                                            "a.txt b.txt", "Two files."]
    assert messages[2].tool_calls[0].arguments == {"path": "/tmp"}


async def test_a_call_answered_in_a_later_batch_keeps_its_turn_open_until_then(
        store: SessionStore) -> None:
    s = SessionstreamSession("hitl", store)
    await s.add_items([USER, CALL])  # waiting for an approval
    session = s.handle.session()
    assert session is not None and session.open_turn is not None
    await s.add_items([OUTPUT, FINAL])
    session = s.handle.session()
    assert session is not None and session.open_turn is None
    assert [e.type for e in s.handle.events()][-3:] == ["assistant/message", "step/end",
                                                        "turn/end"]
    assert await s.get_items() == [USER, CALL, OUTPUT, FINAL]


async def test_an_item_the_session_rules_refuse_is_kept_as_a_plugin_item(
        store: SessionStore) -> None:
    s = SessionstreamSession("orphan", store)
    orphan = {"type": "function_call_output", "call_id": "never-called", "output": "x"}
    await s.add_items([USER, orphan, CALL, CALL])  # and a call id used twice
    assert await s.get_items() == [USER, orphan, CALL, CALL]
    kinds = [e.type for e in s.handle.events() if "item" in e.data]
    assert kinds == ["user/message", "openai-agents/item", "assistant/message",
                     "openai-agents/item"]


async def test_pop_and_clear_are_appended_markers_and_history_keeps_every_item(
        store: SessionStore) -> None:
    s = SessionstreamSession("pop", store)
    assert await s.pop_item() is None
    await s.add_items([USER, CALL, OUTPUT])
    assert await s.pop_item() == OUTPUT
    assert await s.get_items() == [USER, CALL]
    await s.clear_session()
    assert await s.get_items() == []
    await s.add_items([{"role": "user", "content": "again"}])
    assert await s.get_items() == [{"role": "user", "content": "again"}]
    events = s.handle.events()
    assert [e.type for e in events].count(POP) == 1 and [e.type for e in events].count(CLEAR) == 1
    assert [thaw(e.data["item"]) for e in events if "item" in e.data] == [
        USER, CALL, OUTPUT, {"role": "user", "content": "again"}]


async def test_limit_takes_the_latest_items_in_order(store: SessionStore) -> None:
    s = SessionstreamSession("limit", store, session_settings=SessionSettings(limit=2))
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    await s.add_items(items)
    assert await s.get_items() == items[-2:]
    assert await s.get_items(3) == items[-3:]
    assert await s.get_items(0) == []
    assert await s.get_items(-1) == items


async def test_a_second_object_on_the_same_id_sees_one_history(store: SessionStore) -> None:
    a, b = SessionstreamSession("shared", store), SessionstreamSession("shared", store)
    await a.add_items([USER])
    await b.add_items([{"role": "user", "content": "from b"}])
    assert await a.get_items() == [USER, {"role": "user", "content": "from b"}]


async def test_run_compaction_shadows_a_run_with_a_summary_and_keeps_every_event(
        store: SessionStore) -> None:
    s = SessionstreamSession("compact", store,
                             budget=Budget(tokens=100_000, keep_recent=2, min_nodes=2))
    assert is_openai_responses_compaction_aware_session(s)
    items: list[Any] = []
    for i in range(6):
        items += [{"role": "user", "content": f"question {i} " * 20},
                  {"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": f"answer {i} " * 20}]}]
    await s.add_items(items)
    await s.run_compaction({"response_id": "resp_1"})  # under budget: nothing happens
    assert await s.get_items() == items
    await s.run_compaction({"response_id": "resp_1", "force": True})
    got = await s.get_items()
    assert len(got) < len(items) and got[-2:] == items[-2:]
    assert got[0]["role"] == "user" and "question 0" in got[0]["content"]  # the summary
    events = s.handle.events()
    end = [e for e in events if e.type == "compaction/end"][-1]
    assert end.data["outcome"] == "completed"
    assert [thaw(e.data["item"]) for e in events if "item" in e.data] == items  # nothing destroyed


async def test_shredded_items_read_as_valid_placeholder_items() -> None:
    s = SessionstreamSession("shred", MemoryStore())
    await s.add_items([USER, CALL, OUTPUT])
    shredded = [e.replace(data={**e.data, "item": DELETED_TEXT}) if "item" in e.data else e
                for e in s.handle.events()]
    assert items_of(shredded) == [
        {"role": "user", "content": DELETED_TEXT},
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": DELETED_TEXT}]


async def test_a_non_dict_item_is_refused_with_a_clear_error() -> None:
    s = SessionstreamSession("bad", MemoryStore())
    with pytest.raises(TypeError, match="item is a dict"):
        await s.add_items(["not an item"])  # type: ignore[list-item]


def test_items_are_mapped_against_the_session_as_the_write_takes_it(
        store: SessionStore) -> None:
    """Another writer's events that land before this write are part of the session the
    items are mapped against (on the fleet: what the writer reads when it takes the
    lease): the batch continues them, nothing is duplicated as a plugin item."""
    s = SessionstreamSession("behind", store)
    h = s.handle
    h.append("user/message", {"content": "first"})
    h.append_many([Draft("turn/start", {}), Draft("step/start", {})])  # someone else's
    s._add_sync([{"role": "assistant", "content": "answer"},
                 {"role": "user", "content": "mine"}])
    types = [e.type for e in h.events()]
    assert types.count("openai-agents/item") == 0
    assert types[2:] == ["turn/start", "step/start", "assistant/message", "step/end",
                         "turn/end", "user/message"]


async def test_a_batch_with_an_item_the_log_cannot_take_stores_none_of_it(
        store: SessionStore) -> None:
    """add_items is atomic: a non-JSON value in the third item refuses the whole batch
    (SQLiteSession rolls the transaction back the same way)."""
    s = SessionstreamSession("atomic", store)
    await s.add_items([{"role": "user", "content": "kept"}])
    with pytest.raises(TypeError, match="nothing of the batch was stored"):
        await s.add_items([{"role": "user", "content": "a"},
                           {"role": "assistant", "content": "b"},
                           {"role": "user", "content": float("nan")}])
    assert await s.get_items() == [{"role": "user", "content": "kept"}]
    await s.add_items([{"role": "assistant", "content": "still writable"}])
    assert len(await s.get_items()) == 2


async def test_a_pop_whose_validation_fails_removes_nothing(store: SessionStore) -> None:
    s = SessionstreamSession("auth-pop", store)
    await s.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])

    def refuse(item: object) -> None:
        raise ValueError("not authentic")

    with pytest.raises(ValueError, match="not authentic"):
        await s._pop_item_with_validation(refuse)
    assert [i["content"] for i in await s.get_items()] == ["one", "two"]
    assert (await s._pop_item_with_validation(lambda item: None))["content"] == "two"
    assert [i["content"] for i in await s.get_items()] == ["one"]
