"""A private single-node broker is restarted between flush() and read-back.

The shared development broker is never restarted: this test starts its own broker (own
state directory and ports) through the local-stack module and stops it at the end.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sessionstream.core.settings import Settings
from sessionstream.localstack.stack import StackConfig, down, kafka_up
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import tool_turn

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[StackConfig]:
    cfg = StackConfig(state_dir=tmp_path / "stack", kafka_port=free_port(),
                      controller_port=free_port(), redis_port=free_port())
    kafka_up(cfg, echo=lambda _: None)
    try:
        yield cfg
    finally:
        down(cfg, echo=lambda _: None, services=["kafka"])


def test_every_flushed_event_survives_a_broker_restart(
    private_kafka: StackConfig, settings: Settings, redis_prefix: str, tmp_path: Path
) -> None:
    bootstrap = f"127.0.0.1:{private_kafka.kafka_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic("sessionstream.default.events", 2, 1)]
    )["sessionstream.default.events"].result(30)
    cfg = WriterConfig(bootstrap=bootstrap, topic="sessionstream.default.events",
                       redis_url=settings.redis_url, key_prefix=redis_prefix,
                       attachment_dir=tmp_path / "att")
    w = SessionWriter.create(cfg)
    for n in range(5):
        tool_turn(w, n)
    w.flush(10)
    flushed = [e.event_id for e in w.session.events]

    down(private_kafka, echo=lambda _: None, services=["kafka"])
    kafka_up(private_kafka, echo=lambda _: None)

    rb = read_log(cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == flushed
    # The same writer goes on after the restart (the producer reconnects).
    tool_turn(w, 99)
    w.close()
    rb = read_log(cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == [e.event_id for e in w.session.events]
