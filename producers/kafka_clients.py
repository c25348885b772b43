"""The configs of every Kafka client sessionstream makes, built in one place.

:func:`admin_config`, :func:`producer_config` and :func:`consumer_config` return the
librdkafka dicts for one bootstrap list: the servers, librdkafka's own log level, and
its log lines routed to Python logging (rate-limited, :class:`RateLimit`) instead of
raw stderr; each takes the call site's ``extra`` settings on top, and ``security`` (the
principal's ``security.protocol``/``sasl.*`` keys, ``Settings.kafka_security()``) over
everything. The base they share and :func:`admin_config` live in
:mod:`sessionstream.kafka_config` (below the edges, so server management uses them
too) and are re-exported here, the edges' one import point. The session writer's
producer defaults (:data:`PRODUCER_DEFAULTS`) live here, so that :mod:`producers.kafka`
(the sender) imports this module and not the reverse. :class:`KafkaClients` binds them
to the process's ``Settings``. No other module builds a client config by hand
(``tests/unit/test_kafka_clients.py`` checks it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient

from sessionstream.core.settings import Settings
from sessionstream.kafka_config import (
    BOOTSTRAP,
    LIBRDKAFKA_LOGGER,
    LOG_LEVEL,
    RateLimit,
    admin_config,
    base_config,
    client_config,
    librdkafka_logger,
)

__all__ = [
    "BOOTSTRAP", "LIBRDKAFKA_LOGGER", "LOG_LEVEL", "PRODUCER_DEFAULTS", "KafkaClients",
    "RateLimit", "admin_client", "admin_config", "client_config", "consumer_config",
    "librdkafka_logger", "private_group", "producer_config",
]

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

def producer_config(bootstrap: str, extra: Mapping[str, Any] | None = None, *,
                    defaults: Mapping[str, Any] = PRODUCER_DEFAULTS,
                    route_logs: bool = True,
                    security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A producer's config: ``defaults`` (the session writer's, see ``producers.kafka``)
    under ``extra``. ``route_logs=False``: the caller adds the logger itself (the
    process's shared producers do, so the logger is not part of their pool key)."""
    return base_config(bootstrap, {**defaults, **dict(extra or {})}, route_logs=route_logs,
                 security=security)


def consumer_config(bootstrap: str, group: str, extra: Mapping[str, Any] | None = None,
                    *, security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A consumer's config; offsets are never auto-committed (progress lives in Redis, or
    the caller commits after its writes)."""
    return base_config(bootstrap, {"group.id": group, "enable.auto.commit": False,
                             **dict(extra or {})}, security=security)


def private_group(purpose: str) -> str:
    """A group id of its own for a consumer that only assign()s (never joins a group)."""
    return f"sessionstream-{purpose}-{uuid.uuid4().hex[:12]}"


def admin_client(bootstrap: str, security: Mapping[str, str] | None = None) -> AdminClient:
    return AdminClient(admin_config(bootstrap, security=security))


@dataclass(frozen=True)
class KafkaClients:
    """The builders above, bound to one process's settings."""

    bootstrap: str
    #: The principal's librdkafka keys (``Settings.kafka_security()``; empty: plaintext).
    security: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaClients:
        return cls(settings.kafka_bootstrap, settings.kafka_security())

    def admin(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return admin_config(self.bootstrap, extra, security=self.security)

    def producer(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return producer_config(self.bootstrap, extra, security=self.security)

    def consumer(self, group: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return consumer_config(self.bootstrap, group, extra, security=self.security)
