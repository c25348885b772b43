"""The log's basic promise: all records of one key stay in one partition, in order."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from sessionstream.core.settings import Settings


def test_per_key_order_is_kept_over_a_multi_partition_topic(
    settings: Settings, unique_topic: Callable[..., str], consumer_group: str
) -> None:
    topic = unique_topic(6)
    keys = [f"session-{i}" for i in range(12)]
    per_key = 150
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap,
                         "enable.idempotence": True, "linger.ms": 2})
    for seq in range(per_key):
        for key in keys:  # interleave keys so every partition sees mixed traffic
            producer.produce(topic, key=key, value=json.dumps({"seq": seq}))
        producer.poll(0)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap,
                         "group.id": consumer_group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: dict[str, list[int]] = defaultdict(list)
    partitions: dict[str, set[int]] = defaultdict(set)
    expected = len(keys) * per_key
    received = 0
    deadline = time.monotonic() + 60
    try:
        while received < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                assert msg.error() is None, msg.error()
                key = msg.key().decode()
                seen[key].append(json.loads(msg.value())["seq"])
                partitions[key].add(msg.partition())
                received += 1
    finally:
        consumer.close()

    assert received == expected
    for key in keys:
        assert seen[key] == list(range(per_key)), f"{key} out of order"
        assert len(partitions[key]) == 1, f"{key} spread over {partitions[key]}"
    assert len({p for ps in partitions.values() for p in ps}) > 1, "test needs >1 partition"
