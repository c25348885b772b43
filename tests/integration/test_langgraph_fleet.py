"""The LangGraph saver on the fleet (real Kafka + Redis, the fenced SessionWriter):
LangGraph's own conformance suite, content sealed at rest, a shredded thread read back
as placeholders, two processes racing on one thread, reads from the thread's inline view
in a process that never wrote it, a writer that keeps no values, the tenant's thread
index, a view a view-less writer left behind, and a conversation served by ten
processes in turn."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

from sessionstream.core.codec import decode
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.integrations import store as store_module
from sessionstream.integrations.langgraph import EVENT_TYPES, THREAD_VIEW, SessionStreamSaver
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig, read_log
from tests.integration.streams_helpers import read_topic
from tests.integration.writers import writer_cfg
from tests.langgraph_graphs import chat_graph, counter_graph, delta_graph

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CANARY = "canary-lg-7c31"


@pytest.fixture
def sealed_cfg(writer_cfg: WriterConfig, tmp_path: Path) -> WriterConfig:
    cipher = ContentCipher(FileKeyStore(tmp_path / "keys", cache_ttl_s=0), "default")
    return dataclasses.replace(writer_cfg, cipher=cipher)


def _saver(cfg: WriterConfig) -> SessionStreamSaver:
    return SessionStreamSaver(FleetStore(cfg, EVENT_TYPES))


async def test_langgraph_conformance_suite_passes_every_capability_on_the_fleet(
        sealed_cfg: WriterConfig) -> None:
    @checkpointer_test(name="sessionstream-fleet")
    async def fleet() -> AsyncIterator[SessionStreamSaver]:
        saver = _saver(sealed_cfg)
        yield saver
        saver.close()

    report = await validate(fleet)
    summary = {cap: (r.tests_passed, r.tests_failed, r.failures)
               for cap, r in report.results.items()}
    print("conformance on the fleet:", json.dumps(summary))
    assert all(r.detected and r.passed for r in report.results.values()), summary
    assert sum(r.tests_passed for r in report.results.values()) >= 81


def test_checkpoint_content_is_sealed_in_kafka_and_opens_through_the_saver(
        sealed_cfg: WriterConfig) -> None:
    saver = _saver(sealed_cfg)
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "lg-sealed-1"}}
    graph.invoke({"log": [CANARY], "n": 0}, config)
    state = graph.get_state(config)
    assert CANARY in state.values["log"] and state.values["n"] == 3
    saver.close()
    events = read_log(sealed_cfg, "lg-sealed-1").admitted
    records = read_topic(sealed_cfg.bootstrap, sealed_cfg.topic, len(events))
    assert records and all(CANARY.encode() not in (r.value or b"") for r in records)
    sealed_types = {decode(r.value).type for r in records
                    if r.value is not None and decode(r.value).sealed}
    assert {"langgraph/checkpoint", "langgraph/blobs", "langgraph/writes"} <= sealed_types


def test_a_deleted_thread_reads_as_placeholders_through_get_tuple(
        writer_cfg: WriterConfig, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sessionstream.cli.main import main
    from sessionstream.core.settings import Settings
    from sessionstream.governance.wiring import content_cipher

    env = {"SESSIONSTREAM_EVENTS_TOPIC": writer_cfg.topic,
           "SESSIONSTREAM_KEY_PREFIX": writer_cfg.key_prefix,
           "SESSIONSTREAM_KEY_DIR": str(tmp_path / "cli-keys"),
           "SESSIONSTREAM_ATTACHMENT_DIR": str(tmp_path / "cli-att"),
           "SESSIONSTREAM_PRINCIPAL": "cli-dpo"}
    settings = Settings.from_env({**env, "SESSIONSTREAM_STATE_DIR": str(tmp_path)})

    def cfg() -> WriterConfig:  # a fresh key cache, as a new process has
        return dataclasses.replace(writer_cfg, cipher=content_cipher(settings),
                                   attachment_dir=tmp_path / "cli-att")

    saver = _saver(cfg())
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "lg-shred-1"}}
    graph.invoke({"log": [CANARY], "n": 0}, config)
    before = saver.get_tuple(config)
    assert before is not None and CANARY in before.checkpoint["channel_values"]["log"]
    saver.close()
    done = CliRunner().invoke(main, ["delete", "lg-shred-1", "--json"], env=env)
    assert done.exit_code == 0, done.output

    after_saver = _saver(cfg())
    after = after_saver.get_tuple(config)
    assert after is not None
    # the structure stays: the same checkpoint, parent, versions, step and source
    assert after.config["configurable"]["checkpoint_id"] == before.config[
        "configurable"]["checkpoint_id"]
    assert after.parent_config == before.parent_config
    assert after.checkpoint["channel_versions"] == before.checkpoint["channel_versions"]
    assert after.metadata["step"] == before.metadata["step"]
    # every value is the deletion's placeholder, never the content, never a crash
    values = after.checkpoint["channel_values"]
    assert set(values) == set(before.checkpoint["channel_values"])
    assert all(v == DELETED_TEXT for v in values.values())
    assert all(w[2] == DELETED_TEXT for w in after.pending_writes or [])
    history = list(after_saver.list(config))
    assert len(history) == len(list(saver.list(config)))
    assert CANARY not in repr(history)
    # the graph itself reads the thread without crashing
    snapshot = counter_graph(after_saver).get_state(config)
    assert snapshot.values["log"] == DELETED_TEXT
    after_saver.close()


def _racer_env(cfg: WriterConfig, tmp_path: Path) -> dict[str, str]:
    import os

    return {**os.environ, "SESSIONSTREAM_EVENTS_TOPIC": cfg.topic,
            "SESSIONSTREAM_KEY_PREFIX": cfg.key_prefix,
            "SESSIONSTREAM_KEY_DIR": str(tmp_path / "race-keys"),
            "SESSIONSTREAM_ATTACHMENT_DIR": str(tmp_path / "race-att")}


def test_two_processes_racing_on_one_thread_leave_one_history_and_name_the_loser(
        writer_cfg: WriterConfig, tmp_path: Path) -> None:
    """The overlap is forced, not hoped for: the holder's last write keeps the thread
    (durable=False) until the challenger has tried its whole turn."""
    env = _racer_env(writer_cfg, tmp_path)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph_racer", "lg-race-1", name, str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("holder", "challenger")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["result"] for o in outs] == ["ok", "WriterConflict"], outs
    winner, loser = outs
    assert "lg-race-1" in loser["detail"]
    events = read_log(writer_cfg, "lg-race-1").admitted
    # one history: every admitted event after session/start is the winner's
    writers = {e.writer.id for e in events}
    assert len(writers) == 1, writers
    from sessionstream.core.settings import Settings
    from sessionstream.governance.wiring import content_cipher

    reader_cfg = dataclasses.replace(
        writer_cfg, cipher=content_cipher(Settings.from_env(env)))
    saver = _saver(reader_cfg)
    graph = counter_graph(saver)
    state = graph.get_state({"configurable": {"thread_id": "lg-race-1"}})
    assert state.values["log"] == [f"from {winner['name']}"] + ["step"] * 3
    assert loser["name"] not in " ".join(state.values["log"])
    saver.close()


# -- reads from the thread's inline view, memory, the tenant's index --------------------


def _chat(saver: SessionStreamSaver, thread_id: str, turns: int, start: int = 0) -> None:
    graph = chat_graph(saver)
    for i in range(start, start + turns):
        graph.invoke({"messages": [("user", f"question {i}")]},
                     {"configurable": {"thread_id": thread_id},
                      "metadata": {"run_id": f"run-{thread_id}-{i}"}})


def test_a_process_that_never_wrote_the_thread_reads_it_from_redis_not_the_log(
        sealed_cfg: WriterConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = _saver(sealed_cfg)
    graph = delta_graph(writer)
    config = {"configurable": {"thread_id": "lg-view-1"}}
    graph.invoke({"items": ["x"], "n": 0}, config)
    for i in range(4):
        graph.invoke({"items": [f"y{i}"]}, config)
    history = list(writer.list(config))
    middle = history[len(history) // 2].config
    expected = (writer.get_tuple(config), writer.get_tuple(middle),
                [t.config for t in writer.list(config, before=middle, limit=3)],
                [t.config for t in writer.list(config, filter={"source": "input"})],
                writer.get_delta_channel_history(config=middle, channels=["items", "n"]),
                graph.get_state(config).values)
    writer.close()

    def no_log(*_a: object, **_k: object) -> None:
        raise AssertionError("a read went to the log")

    monkeypatch.setattr(store_module, "read_log", no_log)
    reader = _saver(sealed_cfg)  # another store: another process as far as it knows
    got = (reader.get_tuple(config), reader.get_tuple(middle),
           [t.config for t in reader.list(config, before=middle, limit=3)],
           [t.config for t in reader.list(config, filter={"source": "input"})],
           reader.get_delta_channel_history(config=middle, channels=["items", "n"]),
           delta_graph(reader).get_state(config).values)
    assert got == expected
    assert got[4]["items"]["writes"]  # the walk went up the parent chain
    assert len(got[2]) == 3 and len(got[3]) == 5
    reader.close()


def test_the_writing_process_keeps_no_checkpoint_values(writer_cfg: WriterConfig) -> None:
    saver = _saver(writer_cfg)
    _chat(saver, "lg-mem-1", 30)
    handle: Any = saver.store.open(saver.session_id("lg-mem-1"))
    events = handle._writer.session.events
    kept = [e for e in events if e.type.startswith("langgraph/") and e.data]
    assert len(events) > 100 and kept == []  # every value forgotten once handed on
    assert all(not state.fields for state in handle._views.values())
    state = chat_graph(saver).get_state({"configurable": {"thread_id": "lg-mem-1"}})
    assert len(state.values["messages"]) == 60  # and still read back whole
    saver.close()


def test_list_none_and_delete_for_runs_reach_threads_other_processes_wrote(
        writer_cfg: WriterConfig) -> None:
    def saver(prefix: str) -> SessionStreamSaver:
        return SessionStreamSaver(FleetStore(writer_cfg, EVENT_TYPES), session_prefix=prefix)

    for thread_id in ("lg-idx-1", "lg-idx-2"):
        one = saver("app-")  # each thread written by its own store
        _chat(one, thread_id, 2)
        one.close()
    other = saver("other-")
    _chat(other, "lg-idx-1", 1)  # another prefix: another set of threads
    other.close()
    third = saver("app-")
    listed = [t.config["configurable"]["thread_id"] for t in third.list(None)]
    assert sorted(set(listed)) == ["lg-idx-1", "lg-idx-2"] and len(listed) == 2 * 2 * 3
    third.delete_for_runs(["run-lg-idx-2-1"])
    runs = {t.metadata.get("run_id") for t in third.list(None)}
    assert "run-lg-idx-2-1" not in runs and {"run-lg-idx-2-0", "run-lg-idx-1-1"} <= runs
    third.close()


def test_a_thread_missing_from_the_index_is_indexed_again_when_read(
        writer_cfg: WriterConfig, redis_client: Any) -> None:
    saver = _saver(writer_cfg)
    _chat(saver, "lg-lost-1", 1)
    saver.close()
    key = writer_cfg.keys.tenant_key("langgraph:threads")
    redis_client.zrem(key, "lg-lost-1")  # a process died between its write and the index
    fresh = _saver(writer_cfg)
    assert list(fresh.list(None)) == []
    assert fresh.get_tuple({"configurable": {"thread_id": "lg-lost-1"}}) is not None
    fresh.close()  # the repair is made in the background; close waits for it
    again = _saver(writer_cfg)
    assert {t.config["configurable"]["thread_id"] for t in again.list(None)} == {"lg-lost-1"}
    again.close()


def test_a_view_left_behind_by_a_writer_without_views_is_rebuilt_from_the_log(
        writer_cfg: WriterConfig) -> None:
    saver = _saver(writer_cfg)
    config = {"configurable": {"thread_id": "lg-stale-1"}}
    _chat(saver, "lg-stale-1", 2)
    bare = FleetStore(writer_cfg, EVENT_TYPES)  # keeps no views (a harness, the compactor)
    bare.open("lg-stale-1").append("langgraph/deleted", {})
    bare.close()
    reader = _saver(writer_cfg)
    handle = reader.store.open("lg-stale-1")
    assert handle.view(THREAD_VIEW.name, fields=False).source == "log"  # and installed
    assert reader.get_tuple(config) is None  # the bare writer deleted the thread
    assert handle.view(THREAD_VIEW.name, fields=False).source == "redis"
    reader.close()
    _chat(saver, "lg-stale-1", 1, start=2)  # the first saver's view is behind: rebuilt
    after = _saver(writer_cfg)
    state = chat_graph(after).get_state(config)
    assert state.values["messages"][0].content == "question 2"
    assert after.store.open("lg-stale-1").view(THREAD_VIEW.name).source == "redis"
    after.close()
    saver.close()


def test_a_conversation_of_ten_turns_served_by_ten_processes_stores_every_message(
        writer_cfg: WriterConfig, tmp_path: Path) -> None:
    """Each turn in a process of its own that builds the saver and the graph, runs the
    turn and exits without closing anything (a stateless web tier)."""
    env = _racer_env(writer_cfg, tmp_path)
    for n in range(10):
        proc = subprocess.run([sys.executable, "-m", "tests.langgraph_turn", "lg-ten-1",
                               str(n)], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1])["messages"] == 2 * (n + 1)
    from sessionstream.core.settings import Settings
    from sessionstream.governance.wiring import content_cipher

    reader = _saver(dataclasses.replace(writer_cfg,
                                        cipher=content_cipher(Settings.from_env(env))))
    messages = chat_graph(reader).get_state(
        {"configurable": {"thread_id": "lg-ten-1"}}).values["messages"]
    assert [m.content for m in messages[::2]] == [f"question {n}" for n in range(10)]
    assert all(m.content.startswith(f"reply {2 * n + 1}: ") for n, m in
               enumerate(messages[1::2]))
    events = read_log(writer_cfg, "lg-ten-1").admitted
    assert len({e.writer.id for e in events}) == 10  # ten writers, one history
    reader.close()


def test_values_the_writer_holds_are_not_served_once_the_thread_is_deleted(
        writer_cfg: WriterConfig, tmp_path: Path) -> None:
    """The writing process keeps the values of its last checkpoint to skip reading them
    back; after ``sessionstream delete`` (the key shredded) it serves placeholders, as
    every reader does, never what it kept."""
    from click.testing import CliRunner

    from sessionstream.cli.main import main
    from sessionstream.core.settings import Settings
    from sessionstream.governance.keys import FileKeyStore
    from sessionstream.governance.wiring import content_cipher, tenant_keys

    env = {"SESSIONSTREAM_EVENTS_TOPIC": writer_cfg.topic,
           "SESSIONSTREAM_KEY_PREFIX": writer_cfg.key_prefix,
           "SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
           "SESSIONSTREAM_ATTACHMENT_DIR": str(tmp_path / "att"),
           "SESSIONSTREAM_PRINCIPAL": "cli-dpo"}
    settings = Settings.from_env({**env, "SESSIONSTREAM_STATE_DIR": str(tmp_path)})
    keys = FileKeyStore(settings.key_dir, tenant_keys(settings), cache_ttl_s=0)
    saver = _saver(dataclasses.replace(writer_cfg, cipher=content_cipher(settings, keys),
                                       attachment_dir=tmp_path / "att"))
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "lg-held-1"}}
    graph.invoke({"messages": [("user", CANARY)]}, config)
    assert saver._recent["lg-held-1"]  # the values of its last put, kept here
    before = saver.get_tuple(config)
    assert before is not None and CANARY in repr(before.checkpoint["channel_values"])
    done = CliRunner().invoke(main, ["delete", "lg-held-1", "--json"], env=env)
    assert done.exit_code == 0, done.output
    after = saver.get_tuple(config)
    assert after is not None and CANARY not in repr(after)
    assert after.checkpoint["channel_values"]["messages"] == DELETED_TEXT
    saver.close()


def test_the_writer_serves_the_values_it_kept_only_while_the_store_opens_the_thread(
        writer_cfg: WriterConfig, redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    saver = _saver(writer_cfg)
    config = {"configurable": {"thread_id": "lg-kept-1"}}
    chat_graph(saver).invoke({"messages": [("user", "q")]}, config)
    kept = [n for n in saver._recent["lg-kept-1"] if n.startswith("B")]
    assert kept  # the last put's channel values
    head = writer_cfg.keys.inline_view("lg-kept-1", THREAD_VIEW.name)
    # what Redis holds under that name changes (it never does: a version names one
    # value) — so which of the two a read returns shows where it came from
    redis_client.hset(head, "f:" + kept[0], '"replaced in redis"')
    read = saver.get_tuple(config)
    assert read is not None and read.checkpoint["channel_values"]["messages"] != \
        "replaced in redis"  # served from what the writer kept, not fetched
    monkeypatch.setattr(FleetStore, "opens", lambda *_a: False)  # e.g. the key shredded
    read = saver.get_tuple(config)
    assert read is not None and read.checkpoint["channel_values"]["messages"] == \
        "replaced in redis"  # fetched: nothing kept is served
    assert "lg-kept-1" not in saver._recent
    saver.close()
