"""Kafka edges of the processor that faust does not provide: log read-back and dead letters.

Both use confluent-kafka in a worker thread so the event loop keeps running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from producers.readback import scan_session
from sessionstream.core.pipeline import Record
from streams.ports import DeadLetter


def missing_topics(bootstrap: str, topics: Sequence[str], timeout: float = 30.0) -> list[str]:
    """The topics of ``topics`` the cluster does not have (checked once at worker start)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    have = admin.list_topics(timeout=timeout).topics
    return [t for t in topics if t not in have or have[t].error is not None]


class KafkaLogReader:
    """Reads one session's records back from its partition (state_version rebuilds).

    The reading itself is ``producers.readback.scan_session``, shared with the writer's
    resume and confirm: one reader, one error (``ReadBackError``), one timeout policy.
    """

    def __init__(self, bootstrap: str, *, timeout: float = 60.0) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout

    async def read_session(self, topic: str, partition: int, from_offset: int,
                           upto_offset: int, session_id: str) -> list[Record]:
        if upto_offset < from_offset:
            return []
        scan = await asyncio.to_thread(
            scan_session, self.bootstrap, topic, session_id, partition=partition,
            start=from_offset, end=upto_offset + 1, timeout=self.timeout)
        return scan.records


class KafkaDeadLetters:
    """Produces undecodable records to the dead-letter topic, with the reason in headers."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "log_level": 3})

    async def send(self, letters: Sequence[DeadLetter]) -> None:
        """Returns once every letter is acknowledged; failed deliveries are produced again."""
        pending = list(letters)
        while pending:
            failed: list[DeadLetter] = []
            for d in pending:
                r = d.record
                self.producer.produce(
                    self.topic, key=r.key, value=r.value or b"",
                    headers=[("sessionstream.reason", d.reason.encode()),
                             ("sessionstream.detail", d.detail.encode()),
                             ("sessionstream.source",
                              f"{r.topic}:{r.partition}:{r.offset}".encode())],
                    on_delivery=_on_delivery(failed, d),
                )
                self.producer.poll(0)
            while await asyncio.to_thread(self.producer.flush, 10):
                pass
            pending = failed


def _on_delivery(failed: list[DeadLetter], letter: DeadLetter) -> Callable[[Any, Any], None]:
    def callback(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(letter)
    return callback
