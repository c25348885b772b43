"""The configs of every Kafka client sessionstream makes, built in one place.

:func:`admin_config`, :func:`producer_config` and :func:`consumer_config` return the
librdkafka dicts for one bootstrap list: the servers, librdkafka's own log level, and
its log lines routed to Python logging (rate-limited, ``producers.kafka``) instead of
raw stderr; each takes the call site's ``extra`` settings on top, and ``security`` (the
principal's ``security.protocol``/``sasl.*`` keys, ``Settings.kafka_security()``) over
everything. :class:`KafkaClients` binds them to the process's ``Settings``. No other
module of the package builds a client config by hand (``tests/unit/test_kafka_clients.py``
checks it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient

from producers.kafka import BOOTSTRAP, PRODUCER_DEFAULTS, client_config
from sessionstream.core.settings import Settings

#: librdkafka's syslog level for its own log channel: errors and worse.
LOG_LEVEL = 3


def _base(bootstrap: str, extra: Mapping[str, Any] | None, *, route_logs: bool = True,
          security: Mapping[str, str] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"log_level": LOG_LEVEL}
    cfg.update(extra or {})
    cfg.update(security or {})
    cfg[BOOTSTRAP] = bootstrap
    return client_config(cfg) if route_logs else cfg


def admin_config(bootstrap: str, extra: Mapping[str, Any] | None = None, *,
                 security: Mapping[str, str] | None = None) -> dict[str, Any]:
    return _base(bootstrap, extra, security=security)


def producer_config(bootstrap: str, extra: Mapping[str, Any] | None = None, *,
                    defaults: Mapping[str, Any] = PRODUCER_DEFAULTS,
                    route_logs: bool = True,
                    security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A producer's config: ``defaults`` (the session writer's, see ``producers.kafka``)
    under ``extra``. ``route_logs=False``: the caller adds the logger itself (the
    process's shared producers do, so the logger is not part of their pool key)."""
    return _base(bootstrap, {**defaults, **dict(extra or {})}, route_logs=route_logs,
                 security=security)


def consumer_config(bootstrap: str, group: str, extra: Mapping[str, Any] | None = None,
                    *, security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A consumer's config; offsets are never auto-committed (progress lives in Redis, or
    the caller commits after its writes)."""
    return _base(bootstrap, {"group.id": group, "enable.auto.commit": False,
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
