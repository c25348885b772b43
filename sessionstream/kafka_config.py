"""The base of every Kafka client config: the brokers, librdkafka's log level and logger.

:func:`base_config` is the dict every client sessionstream makes starts from (the
servers, librdkafka's own log level, its log lines routed to Python logging,
rate-limited by :class:`RateLimit`, instead of raw stderr), with the call site's
``extra`` settings on top and ``security`` (``Settings.kafka_security()``) over
everything; :func:`admin_config` is an admin client's. It lives here, beside the
settings and outside the edges, so that server management (``sessionstream.localstack.cluster``)
builds its admin clients without importing an edge package; ``producers.kafka_clients``
builds the producer and consumer configs on it. Standard library only: the client
classes (confluent-kafka) are imported by the modules that make clients.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

LIBRDKAFKA_LOGGER = "sessionstream.producers.librdkafka"
#: The librdkafka setting naming the brokers.
BOOTSTRAP = "bootstrap.servers"
#: librdkafka's syslog level for its own log channel: errors and worse.
LOG_LEVEL = 3


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
    """The logger every librdkafka client of sessionstream logs through (rate-limited)."""
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not any(isinstance(f, RateLimit) for f in logger.filters):
        logger.addFilter(RateLimit())
    return logger


def client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` whose librdkafka logs go to Python logging, not stderr."""
    cfg = dict(config)
    cfg.setdefault("logger", librdkafka_logger())
    return cfg


def base_config(bootstrap: str, extra: Mapping[str, Any] | None = None, *,
                route_logs: bool = True,
                security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:data:`LOG_LEVEL`, then ``extra``, then ``security``, then the brokers (never
    overridden); with ``route_logs`` the librdkafka logger (:func:`client_config`)."""
    cfg: dict[str, Any] = {"log_level": LOG_LEVEL}
    cfg.update(extra or {})
    cfg.update(security or {})
    cfg[BOOTSTRAP] = bootstrap
    return client_config(cfg) if route_logs else cfg


def admin_config(bootstrap: str, extra: Mapping[str, Any] | None = None, *,
                 security: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An admin client's config (``extra``: e.g. ``{"log_level": 0}`` for a probe that
    expects refused connections)."""
    return base_config(bootstrap, extra, security=security)
