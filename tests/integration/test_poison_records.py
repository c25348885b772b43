"""No poison record: large undecodable records among good ones, under both engines.

A 2 MiB and a 15 MiB undecodable record (the local broker accepts up to 16 MiB) are
written between good sessions' events. The worker must keep running, produce both to
the dead-letter topic — the 2 MiB one whole, the 15 MiB one by reference because this
test's dead-letter topic only takes 4 MiB — and every good session must catch up.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition

from sessionstream.core.settings import Settings
from tests.integration.procs import ProcessGroup
from tests.integration.streams_helpers import (
    caught_up,
    expected_views,
    fleet,
    interleave,
    produce,
    stored_views,
    wait_until,
    worker_env,
)
from tests.integration.test_streams_worker import _alive, start_worker

MiB = 1024 * 1024


def _produce_large(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 16 * MiB,
                  "log_level": 3})
    for key, value in records:
        p.produce(topic, key=key, value=value)
    assert p.flush(60) == 0


def _letters(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list:  # type: ignore[type-arg]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                  "enable.auto.commit": False, "log_level": 3})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        out: list = []  # type: ignore[type-arg]
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            out.extend(m for m in c.consume(10, timeout=0.5) if m.error() is None)
        return out
    finally:
        c.close()


@pytest.mark.parametrize("engine", ["faust", "kafka"])
def test_large_undecodable_records_reach_the_dead_letter_topic_and_good_sessions_catch_up(
    engine: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup,
) -> None:
    topic = unique_topic(2)
    dlq = unique_topic(2, max_message_bytes=str(4 * MiB))
    logs = fleet(20, seed=21)
    merged = interleave(logs)
    half = len(merged) // 2
    two, fifteen = b"\x00" + os.urandom(2 * MiB), b"\x00" + os.urandom(15 * MiB)
    produce(settings.kafka_bootstrap, topic, merged[:half])
    _produce_large(settings.kafka_bootstrap, topic,
                   [(b"sess-0001", two), (b"sess-0002", fifteen)])
    produce(settings.kafka_bootstrap, topic, merged[half:])
    worker = start_worker(procs, engine, worker_env(settings, topic, dlq, consumer_group,
                                                    redis_prefix))
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, logs), 120,
               "every good session projected past the large records",
               alive=lambda: _alive(worker))
    for sid, events in logs.items():
        _, views, _ = stored_views(redis_client, redis_prefix, settings.tenant, sid)
        assert views == expected_views(events), sid
    letters = _letters(settings.kafka_bootstrap, dlq, 2)
    assert worker.running(), worker.log_tail()
    by_key = {m.key(): m for m in letters}
    assert set(by_key) == {b"sess-0001", b"sess-0002"}
    whole = by_key[b"sess-0001"]
    assert whole.value() == two  # fits the dead-letter topic: produced as it was read
    assert dict(whole.headers())["sessionstream.reason"] == b"corrupt"
    ref = by_key[b"sess-0002"]
    headers = dict(ref.headers())
    assert headers["sessionstream.stored"] == b"reference"
    body = json.loads(ref.value())
    assert body["by_reference"] and body["topic"] == topic and body["size"] == len(fifteen)
    assert headers["sessionstream.source"] == f"{topic}:{body['partition']}:{body['offset']}" \
        .encode()
    assert body["reason"] == "corrupt"
