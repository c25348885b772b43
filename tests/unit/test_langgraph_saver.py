"""The LangGraph saver over the in-process store: LangGraph's conformance suite, forks
that keep every branch, the events a thread is made of, the thread's inline view (the
one-read delta history against LangGraph's own walk, values stored once per version,
prune and delete leaving nothing behind, incremental == rebuilt) and the store-wide
list."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver

from sessionstream.core.jsonvalue import thaw
from sessionstream.integrations.langgraph import (
    EVENT_TYPES,
    SEP,
    THREAD_VIEW,
    LangGraphDataError,
    SessionStreamSaver,
)
from sessionstream.integrations.store import MemoryStore, StoreError
from tests.langgraph_graphs import chat_graph, counter_graph, delta_graph


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


# -- the thread view: what reads read ----------------------------------------------------


def _fields(saver: SessionStreamSaver, thread_id: str) -> dict[str, Any]:
    """Every field of the thread's inline view (names with their kind first)."""
    return saver.store.open(saver.session_id(thread_id)).view(THREAD_VIEW.name).fields


def _delta_run(saver: SessionStreamSaver) -> list[Any]:
    """A delta-channel thread with a fork and an update_state; every checkpoint's config."""
    graph = delta_graph(saver)
    config = {"configurable": {"thread_id": "d"}}
    graph.invoke({"items": ["x"], "n": 0}, config)
    for i in range(3):
        graph.invoke({"items": [f"y{i}"]}, config)
    history = list(graph.get_state_history(config))
    forked = graph.update_state(history[5].config, {"items": ["forked"]})
    graph.invoke(None, forked)
    graph.update_state(config, {"items": ["edited"], "n": 100})
    return [s.config for s in graph.get_state_history(config)]


def test_the_delta_channel_history_is_the_parent_walk_of_the_base_saver_in_one_read() -> None:
    """Our one-read override returns what LangGraph's default (one get_tuple per
    ancestor) returns, at every checkpoint of a thread with forks and edits."""
    saver = SessionStreamSaver.memory()
    configs = _delta_run(saver)
    assert len(configs) > 10
    gathers = []
    handle = saver.store.open(saver.session_id("d"))
    real = handle.gather
    handle.gather = lambda *a, **k: gathers.append(a[1]) or real(*a, **k)  # type: ignore
    for config in configs:
        for channels in (["items"], ["items", "n"], ["n", "missing"]):
            gathers.clear()
            ours = saver.get_delta_channel_history(config=config, channels=channels)
            assert len(gathers) == 1  # one read, whatever the depth of the walk
            base = BaseCheckpointSaver.get_delta_channel_history(
                saver, config=config, channels=channels)
            assert ours == base, (config, channels)
    assert any(h["items"]["writes"] for c in configs
               for h in [saver.get_delta_channel_history(config=c, channels=["items"])])


def test_a_channel_value_is_stored_once_per_version_not_once_per_checkpoint() -> None:
    saver = SessionStreamSaver.memory()
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "c"}}
    for i in range(12):
        graph.invoke({"messages": [("user", f"q{i}")]}, config)
    checkpoints = list(saver.list(config))
    fields = _fields(saver, "c")
    blobs = [k for k in fields if k.startswith("B")]
    versions = {(ch, v) for t in checkpoints
                for ch, v in t.checkpoint["channel_versions"].items()
                if ch in t.checkpoint["channel_values"]}
    assert len(blobs) == len(versions) < 2 * len(checkpoints)
    assert sum(1 for k in fields if k.startswith("S")) == len(checkpoints)
    # every checkpoint still reads back whole
    assert [len(t.checkpoint["channel_values"]["messages"]) for t in checkpoints[:3]] == \
        [24, 23, 22]


def test_prune_and_delete_remove_what_nothing_reads_any_more() -> None:
    saver = SessionStreamSaver.memory()
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "p"}}
    graph.invoke({"log": ["a"], "n": 0}, config)
    graph.invoke({"log": ["b"], "n": 0}, config)
    latest = saver.get_tuple(config)
    assert latest is not None
    saver.prune(["p"])
    fields = _fields(saver, "p")
    kept = latest.config["configurable"]["checkpoint_id"]
    assert {k.split(SEP)[0] for k in fields} == {"L", "S", "C", "B"}
    assert all(kept in k for k in fields if k[0] in "SC")
    refs = set(fields[f"S{SEP}{SEP}{kept}"]["r"].values()) - {None}
    assert {k for k in fields if k.startswith("B")} == refs
    after = saver.get_tuple(config)
    assert after is not None and after.checkpoint == latest.checkpoint
    saver.delete_thread("p")
    assert _fields(saver, "p") == {} and saver.get_tuple(config) is None


@pytest.mark.parametrize("graph_of", [counter_graph, delta_graph])
def test_the_view_folded_write_by_write_is_the_view_built_from_the_log(graph_of: Any) -> None:
    saver = SessionStreamSaver.memory()
    configs = _delta_run(saver) if graph_of is delta_graph else None
    if configs is None:
        graph = counter_graph(saver)
        config = {"configurable": {"thread_id": "d"}}
        for i, run in enumerate((uuid.uuid4(), uuid.uuid4(), uuid.uuid4())):
            graph.invoke({"log": [str(i)], "n": 0}, {**config, "metadata": {"run_id": str(run)}})
            if i == 1:
                saver.delete_for_runs([str(run)])
        assert len(list(saver.list(config))) == 10  # 5 a run, the second's hidden
    handle = saver.store.open(saver.session_id("d"))
    live = handle.view(THREAD_VIEW.name)
    built = THREAD_VIEW.build(handle.events())
    assert list(live.entries) == thaw(built.entries)
    assert live.fields == thaw(built.fields)


def test_list_none_and_delete_for_runs_reach_every_thread_of_the_store() -> None:
    saver = SessionStreamSaver.memory()
    graph = counter_graph(saver)
    runs = {t: uuid.uuid4() for t in ("t1", "t2")}
    for t, run in runs.items():
        graph.invoke({"log": [t], "n": 0},
                     {"configurable": {"thread_id": t}, "metadata": {"run_id": str(run)}})
    threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert threads == {"t1", "t2"}
    saver.delete_for_runs([str(runs["t2"])])
    assert list(saver.list({"configurable": {"thread_id": "t2"}})) == []
    assert len(list(saver.list({"configurable": {"thread_id": "t1"}}))) == 5
