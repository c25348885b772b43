"""The LangGraph saver over the in-process store: LangGraph's conformance suite, forks
that keep every branch, the events a thread is made of."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver

from sessionstream.integrations.langgraph import (
    EVENT_TYPES,
    LangGraphDataError,
    SessionStreamSaver,
)
from sessionstream.integrations.store import MemoryStore, StoreError
from tests.langgraph_graphs import counter_graph


async def test_langgraph_conformance_suite_passes_every_capability_in_memory() -> None:
    @checkpointer_test(name="sessionstream-memory")
    async def memory() -> Any:
        yield SessionStreamSaver.memory()

    report = await validate(memory)
    failed = {c: r.failures for c, r in report.results.items() if not r.passed}
    assert not failed
    assert {c for c, r in report.results.items() if r.detected} == {
        "put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs",
        "copy_thread", "prune"}


class _IntegerVersions(SessionStreamSaver):
    """Our saver with LangGraph's default integer versions (as a custom saver has)."""

    get_next_version = BaseCheckpointSaver.get_next_version  # type: ignore[assignment]


class _InMemoryIntegerVersions(InMemorySaver):
    get_next_version = BaseCheckpointSaver.get_next_version  # type: ignore[assignment]


def _fork_and_read_the_original(saver: Any) -> tuple[list[str], list[str]]:
    """Run a thread, fork from its first checkpoint, run the fork; the original branch's
    last state and the fork's."""
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"log": ["original"], "n": 0}, config)
    original_head = graph.get_state(config).config
    first = list(graph.get_state_history(config))[-2]  # after the input, before node a
    forked = graph.update_state(first.config, {"log": ["forked"]})
    graph.invoke(None, forked)
    return (graph.get_state(original_head).values["log"],
            graph.get_state(config).values["log"])


def test_a_fork_never_overwrites_the_original_branch_even_with_integer_versions() -> None:
    ours = _fork_and_read_the_original(_IntegerVersions(MemoryStore(EVENT_TYPES)))
    assert ours == (["original", "step", "step", "step"],
                    ["original", "forked", "step", "step", "step"])
    # LangGraph's own in-memory saver keys values by (channel, version): the fork
    # reuses version numbers and overwrites the original branch's data
    theirs = _fork_and_read_the_original(_InMemoryIntegerVersions())
    assert theirs[0] == ["original", "forked", "step", "step"]  # the fork's value


def test_versions_are_ordered_by_their_counter_and_unique_across_forks() -> None:
    saver = SessionStreamSaver.memory()
    one = saver.get_next_version(None, None)
    two = saver.get_next_version(one, None)
    assert one < two and two.startswith(f"{2:032}.")
    assert saver.get_next_version(one, None) != two  # the same parent, another fork
    assert saver.get_next_version(7, None).startswith(f"{8:032}.")  # int from elsewhere


def test_a_thread_is_one_session_of_plugin_events_and_deletion_is_appended() -> None:
    saver = SessionStreamSaver.memory(session_prefix="lg-")
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "t1"}}
    graph.invoke({"log": ["hi"], "n": 0}, config)
    handle = saver.store.open("lg-t1")
    types = [e.type for e in handle.events()]
    assert types[0] == "session/start"
    assert {"langgraph/blobs", "langgraph/checkpoint", "langgraph/writes"} == set(types[1:])
    assert all(t.ignorable and not t.model_visible for t in EVENT_TYPES)
    saver.delete_thread("t1")
    assert saver.get_tuple(config) is None and list(saver.list(config)) == []
    after = [e.type for e in handle.events()]
    assert after[:len(types)] == types and after[-1] == "langgraph/deleted"


def test_bad_calls_name_what_is_missing() -> None:
    saver = SessionStreamSaver.memory()
    with pytest.raises(LangGraphDataError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(LangGraphDataError, match="checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("ch", 1)], "task")
    with pytest.raises(LangGraphDataError, match="prune strategy"):
        saver.prune(["t"], strategy="everything")
    with pytest.raises(StoreError, match="LangGraph event types"):
        SessionStreamSaver(MemoryStore())
