"""How big one record may be: the topic's limit (asked once per process) and a cheap bound.

The topic's ``max.message.bytes`` is the real limit; a writer asks the broker once per
(bootstrap, topic) and keeps the answer in :data:`TOPIC_LIMITS`. :func:`size_bound` is an
upper bound of an event's canonical JSON size that costs about a microsecond, so most
appends skip serializing their data twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sessionstream.producers.errors import map_kafka_error
from sessionstream.producers.kafka_clients import admin_config

#: Bytes an envelope adds around ``data`` (ids, type, writer, Avro framing), generously.
ENVELOPE_OVERHEAD = 2048
#: Bytes a Kafka record adds around key + value (record header, batch share).
RECORD_OVERHEAD = 512
#: Client-side cap on one record; the topic's max.message.bytes is the real limit.
CLIENT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class TopicLimits:
    """``max.message.bytes`` per (bootstrap, topic), asked of the broker once per process."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], int] = {}

    def get(self, bootstrap: str, topic: str, timeout: float = 10.0,
            security: Mapping[str, str] | None = None) -> int:
        cached = self._known.get((bootstrap, topic))
        if cached is None:
            cached = self._known[(bootstrap, topic)] = topic_config_int(
                bootstrap, topic, "max.message.bytes", timeout, security)
        return cached

    def clear(self) -> None:
        self._known.clear()


#: The process's cache (a topic's limit rarely changes; restart a writer to re-read it).
TOPIC_LIMITS = TopicLimits()


def topic_config_int(bootstrap: str, topic: str, key: str, timeout: float = 10.0,
                     security: Mapping[str, str] | None = None) -> int:
    """One integer setting of a topic, e.g. ``max.message.bytes`` (retried while the
    topic's metadata settles after its creation, up to ``timeout``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(admin_config(bootstrap, security=security))
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + timeout
    while True:
        try:
            entries = admin.describe_configs([res], request_timeout=timeout)[res].result()
            return int(entries[key].value)
        except KafkaException as exc:
            # A topic created a moment ago may not be in every broker's metadata yet.
            if time.monotonic() > deadline:
                raise map_kafka_error(exc.args[0], what=f"reading {key} of {topic}") from exc
            time.sleep(0.2)


def topic_max_message_bytes(bootstrap: str, topic: str, timeout: float = 10.0,
                            security: Mapping[str, str] | None = None) -> int:
    """The topic's ``max.message.bytes`` (cached per process)."""
    return TOPIC_LIMITS.get(bootstrap, topic, timeout, security)


_SCALARS = frozenset({int, float, bool, type(None)})


def size_bound(value: Any) -> int:
    """An upper bound of the canonical JSON size of ``value`` in bytes.

    Canonical JSON is UTF-8 (``ensure_ascii=False``): a code point takes at most 6
    bytes (``\\u001f``). Exact types first, with dict/str inlined: this runs on every
    append; anything unusual takes the generic path.
    """
    t = type(value)
    if t is str:
        return 6 * len(value) + 2
    if t is dict:
        n = 2
        for k, x in value.items():
            tx = type(x)
            if tx is str:
                n += 6 * len(x) + 2
            elif tx in _SCALARS:
                n += 32 + (x.bit_length() // 3 if tx is int else 0)
            else:
                n += size_bound(x)
            n += 6 * len(k) + 4 if type(k) is str else size_bound(k) + 2
        return n
    if t is list or t is tuple:
        return 2 + sum(size_bound(x) + 1 for x in value)
    if t in _SCALARS:
        return 32 + (value.bit_length() // 3 if t is int else 0)
    if isinstance(value, str):
        return 6 * len(value) + 2
    if isinstance(value, Mapping):
        return 2 + sum(size_bound(k) + size_bound(v) + 2 for k, v in value.items())
    if isinstance(value, list | tuple):
        return 2 + sum(size_bound(v) + 1 for v in value)
    return 32 + (int(value).bit_length() // 3 if isinstance(value, int) else 0)
