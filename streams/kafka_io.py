"""Kafka edges of the processor that faust does not provide: log read-back and dead letters.

Both use confluent-kafka in a worker thread so the event loop keeps running.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from sessionstream.core.pipeline import Record
from sessionstream.producers.kafka_clients import admin_config, producer_config
from sessionstream.producers.readback import scan_session
from sessionstream.streams.ports import DeadLetter


def missing_topics(bootstrap: str, topics: Sequence[str], timeout: float = 30.0,
                   security: Mapping[str, str] | None = None) -> list[str]:
    """The topics of ``topics`` the cluster does not have (checked once at worker start)."""
    admin = AdminClient(admin_config(bootstrap, security=security))
    have = admin.list_topics(timeout=timeout).topics
    return [t for t in topics if t not in have or have[t].error is not None]


class KafkaLogReader:
    """Reads one session's records back from its partition (state_version rebuilds).

    The reading itself is ``producers.readback.scan_session``, shared with the writer's
    resume and confirm: one reader, one error (``ReadBackError``), one timeout policy.
    """

    def __init__(self, bootstrap: str, *, timeout: float = 60.0,
                 security: Mapping[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.security = dict(security or {})

    async def read_session(self, topic: str, partition: int, from_offset: int,
                           upto_offset: int, session_id: str) -> list[Record]:
        if upto_offset < from_offset:
            return []
        scan = await asyncio.to_thread(
            scan_session, self.bootstrap, topic, session_id, partition=partition,
            start=from_offset, end=upto_offset + 1, timeout=self.timeout,
            consumer_config=dict(self.security))
        return scan.records


#: Bytes a dead letter adds around the record's key and value (headers, record and batch
#: framing), generously: a record this much under the topic's limit is produced whole.
DEAD_LETTER_OVERHEAD = 4096
#: Delivery attempts of one dead letter within one send() before it is handed back.
DEAD_LETTER_ATTEMPTS = 3
#: The dead-letter topic's limit when it cannot be read (the broker default).
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588

log = logging.getLogger("sessionstream.streams.worker")


def topic_max_message_bytes(bootstrap: str, topic: str, timeout: float = 10.0,
                            security: Mapping[str, str] | None = None) -> int | None:
    """The topic's ``max.message.bytes``, or None when it cannot be read now."""
    admin = AdminClient(admin_config(bootstrap, security=security))
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout)
        return int(entries["max.message.bytes"].value)
    except Exception as exc:  # any failure here means "unknown now": fall back, say so
        log.warning("cannot read max.message.bytes of %s (%s); assuming %d", topic, exc,
                    DEFAULT_MAX_MESSAGE_BYTES)
        return None


def reference_body(letter: DeadLetter) -> bytes:
    """The value of a dead letter stored by reference: where the record is, and why."""
    r = letter.record
    return json.dumps({
        "by_reference": True, "topic": r.topic, "partition": r.partition, "offset": r.offset,
        "size": len(r.value or b""), "reason": letter.reason,
        "detail": letter.detail[:500],
    }, separators=(",", ":")).encode()


class KafkaDeadLetters:
    """Produces undecodable records to the dead-letter topic, with the reason in headers.

    A dead letter of any size the broker accepted on the events topic is produced: the
    producer allows the dead-letter topic's own ``max.message.bytes`` (asked once), and a
    record too big for that topic is stored by reference instead — a JSON body naming
    topic, partition, offset, size and reason, with header ``sessionstream.stored:
    reference`` (the record itself stays in the events topic, which never expires).
    A letter that still cannot be produced after DEAD_LETTER_ATTEMPTS is handed back to
    the caller (the processor keeps that partition's progress behind it and retries);
    the others are produced regardless.
    """

    def __init__(self, bootstrap: str, topic: str, *, max_message_bytes: int | None = None,
                 attempts: int = DEAD_LETTER_ATTEMPTS,
                 security: Mapping[str, str] | None = None) -> None:
        self.security = dict(security or {})
        self.bootstrap = bootstrap
        self.topic = topic
        self.attempts = attempts
        self._limit = max_message_bytes
        self._producer: Producer | None = None

    @property
    def limit(self) -> int:
        """The dead-letter topic's max message size (read from the broker on first use)."""
        if self._limit is None:
            self._limit = topic_max_message_bytes(
                self.bootstrap, self.topic, security=self.security) or \
                DEFAULT_MAX_MESSAGE_BYTES
        return self._limit

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(producer_config(self.bootstrap, {
                "enable.idempotence": True,
                # librdkafka keeps a 1 MB default: a bigger undecodable record would be a
                # poison pill (MSG_SIZE_TOO_LARGE on every restart). Allow the topic's size.
                "message.max.bytes": max(self.limit, 1_000_000),
                "message.timeout.ms": 30_000,
            }, defaults={}, security=self.security))
        return self._producer

    def fits(self, letter: DeadLetter) -> bool:
        r = letter.record
        return len(r.key or b"") + len(r.value or b"") + DEAD_LETTER_OVERHEAD <= self.limit

    async def send(self, letters: Sequence[DeadLetter]) -> list[DeadLetter]:
        """Produce every letter; returns those still not written after the attempts."""
        by_ref = {id(d) for d in letters if not self.fits(d)}
        pending = list(letters)
        for attempt in range(1, self.attempts + 1):
            failed: list[DeadLetter] = []
            too_large: list[DeadLetter] = []
            for d in pending:
                try:
                    self._produce(d, by_reference=id(d) in by_ref,
                                  on_error=_on_delivery(failed, too_large, d))
                except (KafkaException, BufferError, ValueError) as exc:
                    log.warning("dead letter of %s:%d:%d not produced (%s)", d.record.topic,
                                d.record.partition, d.record.offset, exc)
                    if _is_too_large(exc):
                        too_large.append(d)
                    else:
                        failed.append(d)
            while await asyncio.to_thread(self.producer.flush, 10):
                pass
            for d in too_large:  # the broker's limit is below what we read: by reference
                by_ref.add(id(d))
            pending = failed + too_large
            if not pending:
                return []
            await asyncio.sleep(min(0.2 * attempt, 1.0))
        return pending

    def _produce(self, d: DeadLetter, *, by_reference: bool,
                 on_error: Callable[[Any, Any], None]) -> None:
        r = d.record
        headers: list[tuple[str, str | bytes | None]] = [
                   ("sessionstream.reason", d.reason.encode()),
                   ("sessionstream.detail", d.detail.encode()),
                   ("sessionstream.source", f"{r.topic}:{r.partition}:{r.offset}".encode())]
        value = r.value or b""
        if by_reference:
            headers.append(("sessionstream.stored", b"reference"))
            value = reference_body(d)
        self.producer.produce(self.topic, key=r.key, value=value, headers=headers,
                              on_delivery=on_error)
        self.producer.poll(0)


def _is_too_large(exc: BaseException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() in (
        KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)


def _on_delivery(failed: list[DeadLetter], too_large: list[DeadLetter],
                 letter: DeadLetter) -> Callable[[Any, Any], None]:
    def callback(err: Any, _msg: Any) -> None:
        if err is None:
            return
        if isinstance(err, KafkaError) and err.code() in (
                KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
            too_large.append(letter)
        else:
            failed.append(letter)
    return callback
