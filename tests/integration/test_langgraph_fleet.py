"""The LangGraph saver on the fleet (real Kafka + Redis, the fenced SessionWriter):
LangGraph's own conformance suite, content sealed at rest, a shredded thread read back
as placeholders, and two processes racing on one thread."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

from sessionstream.core.codec import decode
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.integrations.langgraph import EVENT_TYPES, SessionStreamSaver
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig, read_log
from tests.integration.streams_helpers import read_topic
from tests.integration.writers import writer_cfg
from tests.langgraph_graphs import counter_graph

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
    env = _racer_env(writer_cfg, tmp_path)
    start_at = time.time() + 3.0  # both import langgraph first, then start together
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph_racer", "lg-race-1", str(start_at), name],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("a", "b")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    results = sorted(o["result"] for o in outs)
    assert results == ["WriterConflict", "ok"], outs
    winner = next(o for o in outs if o["result"] == "ok")
    loser = next(o for o in outs if o["result"] == "WriterConflict")
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
