"""The ``confluent`` wire against a real Apicurio Registry (started once per test session).

Writers register ``<topic>-value`` (compatibility BACKWARD) and frame with its id; our
readers fold such records, a plain confluent-kafka ``AvroDeserializer`` reads them, both
framings decode on one topic, and an id the registry does not know is a dead letter.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from producers.writer import SessionWriter, WriterConfig, read_log
from sessionstream.core import codec
from sessionstream.core.pipeline import DeadLetterReason, Outcome, Undecodable
from sessionstream.core.settings import Settings
from sessionstream.devregistry import LocalRegistry, find_java
from sessionstream.governance.wiring import reader_pipeline
from sessionstream.registry import RegistryClient, subject, wire_codec
from tests.integration.streams_helpers import expected_views, produce, read_topic
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def registry_url(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An Apicurio Registry of its own (in-memory, loopback), started once."""
    if find_java() is None:
        pytest.skip("Apicurio Registry needs Java 21+: none in JAVA_HOME, PATH or the "
                    "system JVM directory")
    reg = LocalRegistry(Path(tmp_path_factory.mktemp("registry")), settings.cache_dir,
                        _free_port(), _free_port())
    reg.up(print)
    try:
        yield reg.url
    finally:
        reg.down()


def _confluent(cfg: WriterConfig, url: str) -> WriterConfig:
    return dataclasses.replace(cfg, wire="confluent", schema_registry_url=url)


def _reader_settings(settings: Settings, url: str) -> Settings:
    return dataclasses.replace(settings, wire="confluent", schema_registry_url=url)


def test_confluent_writer_registers_subject_and_our_reader_folds_the_session(
    writer_cfg: WriterConfig, registry_url: str, settings: Settings,
) -> None:
    cfg = _confluent(writer_cfg, registry_url)
    w = SessionWriter.create(cfg)
    tool_turn(w, 0)
    w.flush(10)
    events = list(w.session.events)
    w.close()

    client = RegistryClient(registry_url)
    assert client.compatibility(subject(cfg.topic)) == "BACKWARD"
    schema_id = client.register(subject(cfg.topic), codec.schema_files()[-1].read_text())
    records = read_topic(cfg.bootstrap, cfg.topic, len(events))
    assert all(r.value[:1] == b"\x00" and int.from_bytes(r.value[1:5], "big") == schema_id
               for r in records)

    pipeline = reader_pipeline(_reader_settings(settings, registry_url))
    reading = pipeline.start(w.session_id)
    for r in sorted(records, key=lambda r: r.offset):
        item = pipeline.decode(r)
        assert not isinstance(item, Undecodable), item
        assert reading.read(item, r.offset).outcome is Outcome.FOLDED
    got = {u.key: u.view(reading.states[u.key]) for u in pipeline.registry.units}
    assert json.loads(json.dumps(got)) == expected_views(events)
    # the writer's own read-back decodes its framing too
    assert [e.event_id for e in read_log(cfg, w.session_id).admitted] == [
        e.event_id for e in events]


def test_plain_confluent_avro_deserializer_reads_the_same_field_values(
    writer_cfg: WriterConfig, registry_url: str,
) -> None:
    cfg = _confluent(writer_cfg, registry_url)
    w = SessionWriter.create(cfg)
    tool_turn(w, 1)
    w.flush(10)
    events = {e.seq: e for e in w.session.events}
    w.close()
    deser = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    ctx = SerializationContext(cfg.topic, MessageField.VALUE)
    for r in read_topic(cfg.bootstrap, cfg.topic, len(events)):
        rec = deser(r.value, ctx)
        ev = events[rec["seq"]]
        assert (rec["session_id"], rec["event_id"], rec["type"], rec["data"],
                rec["writer"], rec["turn_id"]) == (
            ev.session_id, ev.event_id, ev.type, ev.data_json(),
            {"id": ev.writer.id, "epoch": ev.writer.epoch}, ev.turn_id)


def test_both_framings_on_one_topic_decode_and_unknown_id_is_a_dead_letter(
    writer_cfg: WriterConfig, registry_url: str, settings: Settings,
) -> None:
    w = SessionWriter.create(writer_cfg)  # single-object
    tool_turn(w, 2)
    w.flush(10)
    events = list(w.session.events)
    w.close()
    wire = wire_codec("confluent", registry_url, writer_cfg.topic, writing=True)
    body = codec.default_codec().encode(events[0])[codec.HEADER_LEN:]
    unknown = codec.confluent_header(2**31 - 7) + body
    produce(writer_cfg.bootstrap, writer_cfg.topic, [],
            raw=[(e.session_id.encode(), wire.encode(e)) for e in events]
            + [(events[0].session_id.encode(), unknown)])
    records = read_topic(writer_cfg.bootstrap, writer_cfg.topic, 2 * len(events) + 1)
    framings = {r.value[:1] for r in records}
    assert framings == {b"\xc3", b"\x00"}

    pipeline = reader_pipeline(_reader_settings(settings, registry_url))
    decoded = [pipeline.decode(r) for r in records]
    dead = [d for d in decoded if isinstance(d, Undecodable)]
    assert len(dead) == 1 and dead[0].reason is DeadLetterReason.CORRUPT
    assert "schema id 2147483641 is unknown to the schema registry" in dead[0].detail
    by_framing: dict[bytes, list[str]] = {}
    for r, d in zip(records, decoded, strict=True):
        if not isinstance(d, Undecodable):
            by_framing.setdefault(r.value[:1], []).append(d.event_id)
    assert sorted(by_framing[b"\xc3"]) == sorted(by_framing[b"\x00"]) == sorted(
        e.event_id for e in events)
