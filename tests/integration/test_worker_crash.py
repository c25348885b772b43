"""A faust worker killed mid-stream and restarted still counts every event exactly once.

The worker commits offsets to Kafka only every 60s here, so after the SIGKILL everything
it processed is redelivered; only the idempotent Redis script keeps counts exact. The
``redelivered`` counter proves the redelivery really happened (not luck).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import redis
from confluent_kafka import Producer

from sessionstream.settings import Settings
from streams.demo_count import DemoKeys
from tests.integration.procs import ProcessGroup

SESSIONS = [f"crash-session-{i}" for i in range(20)]
EVENTS = 4000


def produce_slowly(bootstrap: str, topic: str, done: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(EVENTS):
        sid = SESSIONS[i % len(SESSIONS)]
        producer.produce(topic, key=sid, value=json.dumps({"n": i}))
        if i % 100 == 99:
            producer.flush(10)
            time.sleep(0.05)  # ~2s in total: the worker is killed while events still arrive
    assert producer.flush(30) == 0
    done.set()


def test_sigkill_and_restart_counts_every_event_once(
    settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup,
) -> None:
    topic = unique_topic(4)
    env = {"SESSIONSTREAM_DEMO_TOPIC": topic, "SESSIONSTREAM_DEMO_APP_ID": consumer_group,
           "SESSIONSTREAM_DEMO_KEY_PREFIX": redis_prefix,
           "SESSIONSTREAM_DEMO_COMMIT_INTERVAL": "60"}
    keys = DemoKeys.for_app(redis_prefix, consumer_group)

    def total() -> int:
        return sum(int(v) for v in redis_client.hvals(keys.counts))

    worker = procs.start_faust_worker("streams.demo_count:app", env)
    done = threading.Event()
    producer = threading.Thread(target=produce_slowly,
                                args=(settings.kafka_bootstrap, topic, done), daemon=True)
    producer.start()
    worker.wait_for(lambda: total() >= 500, timeout=90, what="500 events counted")
    worker.kill()
    counted_before_kill = total()
    assert counted_before_kill < EVENTS, "worker finished before the kill; test proves nothing"

    restarted = procs.start_faust_worker("streams.demo_count:app", env)
    producer.join(60)
    assert done.is_set(), "producer did not finish"
    restarted.wait_for(lambda: total() >= EVENTS, timeout=90, what=f"{EVENTS} events counted")
    time.sleep(2)  # anything still in flight would show up as an over-count now
    restarted.stop()

    counts = {k: int(v) for k, v in redis_client.hgetall(keys.counts).items()}
    assert counts == {sid: EVENTS // len(SESSIONS) for sid in SESSIONS}
    assert int(redis_client.get(keys.redelivered) or 0) > 0, "no redelivery was exercised"
