"""Shared helpers of the stream-processor integration tests: fleets, producing, waiting."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable
from typing import Any

import redis
from confluent_kafka import Consumer, Producer, TopicPartition

from sessionstream.core.codec import encode
from sessionstream.core.events import Event
from sessionstream.core.pipeline import Record
from sessionstream.core.projections import Registry, default_registry
from sessionstream.core.rows import KeySpace, SessionRow
from sessionstream.core.settings import Settings
from sessionstream.core.simulate import simulate_session
from sessionstream.governance.rows import RowCipher, open_fields
from sessionstream.governance.wiring import row_cipher
from sessionstream.producers.kafka_clients import PRODUCER_DEFAULTS


def fleet(n: int, seed: int = 11, turns: int = 2, prefix: str = "sess") -> dict[str, list[Event]]:
    rng = random.Random(seed)
    return {f"{prefix}-{i:04d}": simulate_session(rng, f"{prefix}-{i:04d}", turns=turns,
                                                  compact_every=2)
            for i in range(n)}


def interleave(logs: dict[str, list[Event]], seed: int = 3) -> list[Event]:
    rng = random.Random(seed)
    cursors = dict.fromkeys(logs, 0)
    out: list[Event] = []
    live = [s for s in logs if logs[s]]
    while live:
        s = rng.choice(live)
        k = rng.randrange(1, 8)
        out.extend(logs[s][cursors[s]:cursors[s] + k])
        cursors[s] += k
        if cursors[s] >= len(logs[s]):
            live.remove(s)
    return out


def produce(bootstrap: str, topic: str, events: list[Event],
            raw: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    # The writers' own producer settings (idempotent, lz4 batches): the worker must read
    # exactly what SessionWriter produces.
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, "log_level": 3})
    for ev in events:
        p.produce(topic, key=ev.session_id.encode(), value=encode(ev))
        p.poll(0)
    for key, value in raw:
        p.produce(topic, key=key, value=value)
    assert p.flush(30) == 0


def expected_views(events: list[Event], registry: Registry | None = None) -> dict[str, Any]:
    snap = (registry or default_registry()).fold(events)
    return json.loads(json.dumps(snap.views()))


def stored_views(r: redis.Redis, prefix: str, tenant: str, sid: str, gen: int = 1
                 ) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """A session's row as readers see it: views sealed by a worker (whose key store is
    the settings' one, like this process's) are opened first."""
    h = r.hgetall(KeySpace(tenant, prefix).session_row(sid, gen))
    h = open_fields(_row_cipher(tenant), sid, h, SessionRow.VIEW, SessionRow.STATE)
    views = SessionRow.views(h)
    return int(h.get("as_of_seq", -1)), views, json.loads(h.get("meta", "{}"))


_CIPHERS: dict[str, RowCipher] = {}


def _row_cipher(tenant: str) -> RowCipher:
    if tenant not in _CIPHERS:
        settings = Settings.from_env()
        _CIPHERS[tenant] = row_cipher(dataclasses.replace(settings, tenant=tenant))
    return _CIPHERS[tenant]


def wait_until(cond: Callable[[], bool], timeout: float, what: str,
               alive: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if alive:
            alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def caught_up(r: redis.Redis, prefix: str, tenant: str, logs: dict[str, list[Event]],
              gen: int = 1) -> Callable[[], bool]:
    def check() -> bool:
        with r.pipeline(transaction=False) as pipe:
            for sid in logs:
                pipe.hget(KeySpace(tenant, prefix).session_row(sid, gen), "as_of_seq")
            got = pipe.execute()
        return all(g is not None and int(g) == logs[s][-1].seq
                   for s, g in zip(logs, got, strict=True))
    return check


def worker_env(settings: Any, topic: str, dlq: str, group: str, prefix: str,
               **extra: str) -> dict[str, str]:
    """A worker's environment on the test's own topics, group and key prefix.

    The dead-letter topic is explicit: the worker refuses to start without one, and a
    test must not depend on the tenant's default topics existing on the broker.
    """
    return {"SESSIONSTREAM_EVENTS_TOPIC": topic, "SESSIONSTREAM_DLQ_TOPIC": dlq,
            "SESSIONSTREAM_STREAMS_GROUP": group, "SESSIONSTREAM_KEY_PREFIX": prefix,
            "SESSIONSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "SESSIONSTREAM_REDIS_URL": settings.redis_url,
            "SESSIONSTREAM_TENANT": settings.tenant, **extra}


def read_topic(bootstrap: str, topic: str, n: int, timeout_s: float = 60) -> list[Record]:
    """The first ``n`` records of ``topic`` as processor input, in (partition, offset) order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "log_level": 3,
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(out)} of {n} records in {topic} after "
                                     f"{timeout_s:.0f}s")
            for m in c.consume(1000, timeout=1):
                if m.error() is None:
                    out.append(Record(topic, m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))
