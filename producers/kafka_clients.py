"""The configs of every Kafka client sessionstream makes, built in one place.

:func:`admin_config`, :func:`producer_config` and :func:`consumer_config` return the
librdkafka dicts for one bootstrap list: the servers, librdkafka's own log level, and
its log lines routed to Python logging (rate-limited, :class:`RateLimit`) instead of
raw stderr; each takes the call site's ``extra`` settings on top, and ``security`` (the
principal's ``security.protocol``/``sasl.*`` keys, ``Settings.kafka_security()``) over
everything. The session writer's producer defaults (:data:`PRODUCER_DEFAULTS`) live here
too, so that :mod:`producers.kafka` (the sender) imports this module and not the
reverse. :class:`KafkaClients` binds them to the process's ``Settings``. No other module
of the package builds a client config by hand (``tests/unit/test_kafka_clients.py``
checks it).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient

from sessionstream.core.settings import Settings

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

LIBRDKAFKA_LOGGER = "sessionstream.producers.librdkafka"
#: The librdkafka setting naming the brokers.
BOOTSTRAP = "bootstrap.servers"


class RateLimit(logging.Filter):
    """Let at most ``burst`` records per (level, facility) through per ``window_s``.

    librdkafka repeats a connection failure several times a second; the first few lines
    say everything. At the start of the next window a record notes how many were
    suppressed. Records carry librdkafka's own text (broker, state): never session data.
    """

    def __init__(self, burst: int = 5, window_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self._clock = clock
        self._windows: dict[tuple[int, str], list[float]] = {}  # key -> [start, seen]
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        fac = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        key = (record.levelno, fac)
        now = self._clock()
        with self._lock:
            w = self._windows.get(key)
            if w is None or now - w[0] >= self.window_s:
                suppressed = int(w[1]) - self.burst if w is not None else 0
                self._windows[key] = [now, 1]
                if suppressed > 0:
                    record.msg = f"{record.msg} (and {suppressed} similar line(s) suppressed)"
                return True
            w[1] += 1
            return w[1] <= self.burst


def librdkafka_logger() -> logging.Logger:
    """The logger every librdkafka client of this package logs through (rate-limited)."""
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not any(isinstance(f, RateLimit) for f in logger.filters):
        logger.addFilter(RateLimit())
    return logger


def client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` whose librdkafka logs go to Python logging, not stderr."""
    cfg = dict(config)
    cfg.setdefault("logger", librdkafka_logger())
    return cfg



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
