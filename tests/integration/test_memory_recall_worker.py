"""The projection worker folds a session's logged memory recalls (a sealed part of class
``memory`` under the memory's key): the surface view holds the recalled memory as a
context message, on the native fold (which hands such a record to the Python fold) and
on the Python one, and after the memory is forgotten the rebuilt surface reads
``[content deleted]``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest
import redis

from sessionstream.core.memory import Actor, Role
from sessionstream.core.settings import Settings
from sessionstream.governance.wiring import key_store
from sessionstream.integrations.memory import FleetBackend, MemoryClient
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig
from sessionstream.streams import fold_native
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.streams_helpers import stored_views, wait_until, worker_env

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fold", ["native", "python"])
def test_the_worker_folds_a_sealed_recall_into_the_surface(
        fold: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
        redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup) -> None:
    if fold == "native" and not fold_native.available():
        pytest.skip("the native extension is not built")
    topic, dlq = unique_topic(2), unique_topic(2)
    s = dataclasses.replace(settings, events_topic_override=topic,
                            memory_topic_override=unique_topic(2), key_prefix=redis_prefix)
    store = key_store(s)
    cfg = WriterConfig.from_settings(s)
    assert cfg.cipher is not None and cfg.cipher.enabled  # the sealed path is the test
    # one key store for the writer and the memory backend (another process's store sees
    # a shred within its feed check, 2 s)
    cfg = dataclasses.replace(cfg, cipher=dataclasses.replace(cfg.cipher, store=store))
    mem = MemoryClient(FleetBackend(s, store, encryption=True),
                       Actor(Role.AGENT, "bot", user="ada"))
    v = mem.propose("Canary-5150 prefers the aisle", kind="preference")
    sessions = FleetStore(cfg)
    h = sessions.open("recall-1")
    h.append("user/message", {"content": "book a seat"})
    mem.recall(h, "aisle")
    h.append("user/message", {"content": "thanks"})
    last = h.events()[-1].seq
    env = worker_env(s, topic, dlq, consumer_group, redis_prefix, SESSIONSTREAM_FOLD=fold)
    procs.start_module(WORKER, env=env, name="kafka-worker")

    def at(seq: int) -> Callable[[], bool]:
        return lambda: stored_views(redis_client, redis_prefix, s.tenant, "recall-1")[0] \
            >= seq

    wait_until(at(last), 90, "the session projected")
    _, views, meta = stored_views(redis_client, redis_prefix, s.tenant, "recall-1")
    texts = [m["content"] for m in views["surface"]["messages"]]
    assert texts == ["book a seat", "Canary-5150 prefers the aisle", "thanks"], views
    assert meta.get("quarantine") is None
    # forgotten: the next refold of the session reads the placeholder
    mem.forget([v.ref.id])
    from sessionstream.producers.resume import read_log

    logged = [e for e in read_log(cfg, "recall-1").admitted if e.type == "memory/recall"]
    assert logged[0].data["content"] == "[content deleted]"
    assert "Canary-5150" not in json.dumps([e.data for e in logged])
    sessions.close()
