"""The ``confluent`` wire against a real Apicurio Registry (started once per test session).

Writers register ``<topic>-value`` (compatibility BACKWARD) and frame with its id; our
readers fold such records, a plain confluent-kafka ``AvroDeserializer`` reads them, both
framings decode on one topic, and an id the registry does not know is a dead letter.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from redis.asyncio import Redis

from sessionstream.cli.main import main
from sessionstream.core import codec
from sessionstream.core.errors import SchemaUnavailable
from sessionstream.core.events import Event
from sessionstream.core.pipeline import DeadLetterReason, Outcome, Undecodable
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.dashboard.timeline import TimelineSource
from sessionstream.governance.wiring import reader_pipeline
from sessionstream.localstack.registry import LocalRegistry, find_java
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from sessionstream.registry import RegistryClient, reader_decode, subject, wire_codec
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from sessionstream.streams.worker import process_retrying
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


def _closed_port_url() -> str:
    """A registry URL nothing listens on (connection refused)."""
    return f"http://127.0.0.1:{_free_port()}/apis/ccompat/v7"


def _mixed_framing_session(writer_cfg: WriterConfig, registry_url: str
                           ) -> tuple[list[Event], codec.WireCodec]:
    """A session's events and a Confluent-framing codec registered for its topic."""
    w = SessionWriter.create(writer_cfg)
    tool_turn(w, 0)
    tool_turn(w, 1)
    w.flush(10)
    events = list(w.session.events)
    w.close()
    return events, wire_codec("confluent", registry_url, writer_cfg.topic, writing=True)


async def test_the_dashboard_timeline_lists_a_session_written_in_both_framings(
    writer_cfg: WriterConfig, registry_url: str, settings: Settings,
    unique_topic: Callable[..., str], redis_prefix: str,
) -> None:
    events, wire = _mixed_framing_session(writer_cfg, registry_url)
    half = len(events) // 2  # a fleet switched wires mid-session: both framings, one session
    topic = unique_topic(1)
    raw = [(e.session_id.encode(), codec.encode(e)) for e in events[:half]] + [
        (e.session_id.encode(), wire.encode(e)) for e in events[half:]]
    produce(writer_cfg.bootstrap, topic, [], raw=raw)
    records = read_topic(writer_cfg.bootstrap, topic, len(events))
    assert {r.value[:1] for r in records} == {b"\xc3", b"\x00"}
    reader = _reader_settings(settings, registry_url)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    keys = KeySpace(settings.tenant, redis_prefix)
    try:
        proc = Processor(pipeline=reader_pipeline(reader), sink=RedisSink(aredis, keys),
                         group="g")
        report = await proc.process(records)
        assert not report.dead_letters
        config = DashboardConfig(redis_url=settings.redis_url, keys=keys, block_ms=200,
                                 timeline=TimelineSource(settings.kafka_bootstrap, topic,
                                                         decode=reader_decode(reader)))
        async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as client:
            resp = await client.get(f"/api/sessions/{events[0].session_id}/timeline")
            assert resp.status == 200
            rows = (await resp.json())["rows"]
        assert [(r["seq"], r["verdict"]) for r in rows] == [(e.seq, "admitted")
                                                            for e in events]
        # the same source without the registry: the framed half is not readable
        plain = DashboardConfig(redis_url=settings.redis_url, keys=keys, block_ms=200,
                                timeline=TimelineSource(settings.kafka_bootstrap, topic))
        async with TestClient(TestServer(create_app(plain), host="127.0.0.1")) as client:
            rows = (await (await client.get(
                f"/api/sessions/{events[0].session_id}/timeline")).json())["rows"]
        assert [r["verdict"] for r in rows].count("corrupt") == len(events) - half
        # the registry away while the page reads: 503 saying so, no row called corrupt
        away = DashboardConfig(redis_url=settings.redis_url, keys=keys, block_ms=200,
                               timeline=TimelineSource(
                                   settings.kafka_bootstrap, topic, decode=reader_decode(
                                       _reader_settings(settings, _closed_port_url()))))
        async with TestClient(TestServer(create_app(away), host="127.0.0.1")) as client:
            resp = await client.get(f"/api/sessions/{events[0].session_id}/timeline")
            assert resp.status == 503
            assert "unreachable" in (await resp.json())["error"]
    finally:
        await aredis.aclose()


async def test_an_unreachable_registry_is_retried_as_temporary_and_nothing_is_dead_lettered(
    writer_cfg: WriterConfig, registry_url: str, settings: Settings,
    unique_topic: Callable[..., str], redis_prefix: str,
) -> None:
    w = SessionWriter.create(_confluent(writer_cfg, registry_url))
    tool_turn(w, 0)
    w.flush(10)
    events = list(w.session.events)
    w.close()
    records = read_topic(writer_cfg.bootstrap, writer_cfg.topic, len(events))
    # the reader's registry is away: connection refused on its port
    reader = _reader_settings(settings, _closed_port_url())
    pipeline = reader_pipeline(reader)
    with pytest.raises(SchemaUnavailable, match="unreachable"):
        pipeline.decode(records[0])  # temporary, not an Undecodable (dead letter)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    keys = KeySpace(settings.tenant, redis_prefix)
    dead = _Letters()
    try:
        proc = Processor(pipeline=pipeline, sink=RedisSink(aredis, keys), group="g",
                         dead_letters=dead)
        lookup = pipeline._decode.__self__._lookup.__self__  # type: ignore[attr-defined]
        waits: list[float] = []

        async def registry_returns(seconds: float) -> None:
            waits.append(seconds)
            if len(waits) == 3:  # the registry answers again after the third wait
                lookup.url = registry_url.rstrip("/")

        report = await process_retrying(proc, records, sleep=registry_returns,
                                        backoff=(0.5, 1.0))
        assert waits == [0.5, 1.0, 1.0]  # doubling, capped
        assert not report.dead_letters and not dead.sent
        row = await aredis.hget(keys.session_row(w.session_id, 1), "as_of_seq")
        assert row is not None and int(row) == events[-1].seq

        # bounded: past its patience the outage is raised (the engine exits, unacknowledged)
        lookup.url = _closed_port_url()
        again = Processor(pipeline=reader_pipeline(reader), sink=RedisSink(aredis, keys),
                          group="g2")

        async def no_wait(seconds: float) -> None:
            return None

        with pytest.raises(SchemaUnavailable):
            await process_retrying(again, records, sleep=no_wait, patience=0.0)
    finally:
        await aredis.aclose()


class _Letters:
    """A dead-letter port that records what it was given (nothing must reach it)."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    async def send(self, letters: Sequence[object]) -> list[object]:
        self.sent.extend(letters)
        return []


def test_registry_up_and_down_answer_json_for_scripts(
    settings: Settings, tmp_path: Path,
) -> None:
    if find_java() is None:
        pytest.skip("Apicurio Registry needs Java 21+")
    port, mgmt = _free_port(), _free_port()
    env = {"SESSIONSTREAM_STATE_DIR": str(tmp_path),
           "SESSIONSTREAM_CACHE_DIR": str(settings.cache_dir)}
    args = ["--port", str(port), "--management-port", str(mgmt), "--json"]
    runner = CliRunner()
    try:
        up = runner.invoke(main, ["registry", "up", *args], env=env)
        assert up.exit_code == 0, up.output
        row = json.loads(up.stdout)
        assert row["started"] is True and row["ready"] is True and row["pid"]
        assert row["env"] == {"SESSIONSTREAM_WIRE": "confluent",
                              "SESSIONSTREAM_SCHEMA_REGISTRY_URL": row["url"]}
        assert RegistryClient(row["url"])._call("GET", "/subjects") == []
        again = json.loads(runner.invoke(main, ["registry", "up", *args], env=env).stdout)
        assert again["started"] is False and again["pid"] == row["pid"]
    finally:
        down = runner.invoke(main, ["registry", "down", *args], env=env)
    assert down.exit_code == 0 and json.loads(down.stdout)["stopped"] is True
    idle = json.loads(runner.invoke(main, ["registry", "down", *args], env=env).stdout)
    assert idle["stopped"] is False
