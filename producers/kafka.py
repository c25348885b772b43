"""A thin confluent-kafka Producer wrapper that tracks every record's delivery.

No network in ``__init__`` (the librdkafka handle is created on first use); the caller's
config is copied; ``poll(0)`` after each produce serves delivery callbacks; a full local
queue is retried a bounded number of times; delivery errors are mapped to
:mod:`producers.errors`. Each record is tracked by ``event_id``:
pending → ok (partition, offset) | failed | possibly-persisted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from producers.errors import (
    KafkaProducerError,
    PossiblyPersisted,
    ProducerFatal,
    QueueFull,
    map_kafka_error,
)

#: Defaults, each chosen for an append-only per-session log (override via ``config``).
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    # Idempotence: no duplicates or reordering from librdkafka's own retries within this
    # producer instance (it implies acks=all, max.in.flight <= 5, retries > 0).
    "enable.idempotence": True,
    "acks": "all",
    # Kafka's Java default partitioner: murmur2 of the key. Python and JVM writers of one
    # tenant must agree on a session's partition (see producers.partition).
    "partitioner": "murmur2_random",
    # Batching: wait up to 5 ms to fill a batch. Agents append in bursts (chunks, tool
    # output); 5 ms is invisible next to a model call and lets one request carry many
    # events. flush() bypasses linger, so a durability barrier never waits for it.
    "linger.ms": 5,
    "batch.size": 1_048_576,  # bytes per partition batch (1 MiB)
    "batch.num.messages": 10_000,
    # Event data is JSON text: lz4 is cheap on CPU and typically halves the bytes.
    "compression.type": "lz4",
    # How long one record may stay undelivered before it is reported as timed out
    # (surfaces as DeliveryTimeout, i.e. possibly persisted).
    "message.timeout.ms": 30_000,
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 262_144,
    "log_level": 3,
}

#: How often a full local queue (BufferError) is retried, serving callbacks in between.
QUEUE_FULL_RETRIES = 50
QUEUE_FULL_WAIT_S = 0.1


class DeliveryState(StrEnum):
    PENDING = "pending"
    OK = "ok"
    FAILED = "failed"
    POSSIBLY_PERSISTED = "possibly-persisted"


@dataclass
class Delivery:
    """What we know about one produced record."""

    event_id: str
    state: DeliveryState = DeliveryState.PENDING
    partition: int | None = None
    offset: int | None = None
    error: KafkaProducerError | None = None


DeliveryListener = Callable[[Delivery], None]


class KafkaSender:
    """Produce keyed records to one topic; remember how each one's delivery ended."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        config: Mapping[str, Any] | None = None,
        on_delivery: DeliveryListener | None = None,
    ) -> None:
        self.topic = topic
        self._config: dict[str, Any] = {**PRODUCER_DEFAULTS, **dict(config or {})}
        self._config["bootstrap.servers"] = bootstrap
        self._producer: Producer | None = None
        self._deliveries: dict[str, Delivery] = {}
        self._on_delivery = on_delivery
        self._fatal: KafkaProducerError | None = None

    @property
    def config(self) -> Mapping[str, Any]:
        return dict(self._config)

    def _handle(self) -> Producer:
        if self._producer is None:
            cfg = dict(self._config)
            cfg["error_cb"] = self._on_error
            try:
                self._producer = Producer(cfg)
            except KafkaException as exc:
                raise map_kafka_error(exc.args[0], what="creating the producer") from exc
        return self._producer

    def _on_error(self, err: KafkaError) -> None:
        # Global errors: transient ones (broker down) are retried by librdkafka and show
        # up as delivery errors later; a fatal one ends this producer instance.
        if err.fatal():
            self._fatal = map_kafka_error(err, what="idempotent producer")

    def _callback(self, event_id: str) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, msg: Message) -> None:
            d = self._deliveries[event_id]
            if err is None:
                d.state = DeliveryState.OK
                d.partition = msg.partition()
                d.offset = msg.offset()
            else:
                d.error = map_kafka_error(err, what=f"delivering event {event_id}")
                d.state = (
                    DeliveryState.POSSIBLY_PERSISTED
                    if isinstance(d.error, PossiblyPersisted)
                    else DeliveryState.FAILED
                )
            if self._on_delivery is not None:
                self._on_delivery(d)

        return done

    def produce(
        self,
        key: bytes,
        value: bytes,
        event_id: str,
        headers: Iterable[tuple[str, bytes]] = (),
    ) -> Delivery:
        """Queue one record (tracked by ``event_id``); raises QueueFull or a mapped error."""
        if self._fatal is not None:
            raise self._fatal
        p = self._handle()
        d = Delivery(event_id)
        self._deliveries[event_id] = d
        for attempt in range(QUEUE_FULL_RETRIES + 1):
            try:
                p.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=list(headers),
                    on_delivery=self._callback(event_id),
                )
                break
            except BufferError:
                if attempt == QUEUE_FULL_RETRIES:
                    del self._deliveries[event_id]
                    raise QueueFull(
                        f"local queue full after {QUEUE_FULL_RETRIES} retries",
                        code=KafkaError._QUEUE_FULL,
                        retriable=True,
                    ) from None
                p.poll(QUEUE_FULL_WAIT_S)
            except KafkaException as exc:
                del self._deliveries[event_id]
                raise map_kafka_error(exc.args[0], what="produce") from exc
        p.poll(0)
        return d

    def poll(self, timeout: float = 0.0) -> int:
        return self._handle().poll(timeout) if self._producer is not None else 0

    def flush(self, timeout: float) -> int:
        """Wait for outstanding deliveries; returns how many are still undelivered."""
        if self._producer is None:
            return 0
        deadline = time.monotonic() + timeout
        remaining = self._producer.flush(max(timeout, 0.0))
        # flush() can return before the last callbacks ran; serve them.
        while remaining == 0 and self.pending() and time.monotonic() < deadline:
            self._producer.poll(0.01)
        if self._fatal is not None:
            raise self._fatal
        return remaining

    def delivery(self, event_id: str) -> Delivery | None:
        return self._deliveries.get(event_id)

    def pending(self) -> list[str]:
        return [e for e, d in self._deliveries.items() if d.state is DeliveryState.PENDING]

    def unconfirmed(self) -> dict[str, str]:
        """event_id -> state of every record that is not (yet) acknowledged."""
        return {
            e: d.state.value for e, d in self._deliveries.items()
            if d.state is not DeliveryState.OK
        }

    def forget(self, event_ids: Iterable[str]) -> None:
        """Stop tracking records (after their outcome was handled)."""
        for e in event_ids:
            self._deliveries.pop(e, None)

    def deliveries(self) -> list[Delivery]:
        return list(self._deliveries.values())

    @property
    def fatal(self) -> KafkaProducerError | None:
        return self._fatal

    def close(self, timeout: float = 5.0) -> int:
        """Flush what can be flushed and drop the handle; returns undelivered count."""
        if self._producer is None:
            return 0
        try:
            remaining = self._producer.flush(timeout)
        finally:
            self._producer = None
        return remaining


__all__ = [
    "PRODUCER_DEFAULTS",
    "Delivery",
    "DeliveryState",
    "KafkaSender",
    "ProducerFatal",
]
