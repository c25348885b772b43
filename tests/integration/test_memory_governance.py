"""Deleting a session reaches long-term memory (docs/adr/0030): its unique text is found
nowhere afterwards — not in the memory views, the search, another session's logged recall,
a Redis dump, nor the memory topic's records — and what other sessions support stays."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from sessionstream.core.memory import Actor, Role
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.memory import MemorySealer
from sessionstream.governance.service import Governance
from sessionstream.integrations.memory import FleetBackend, LineageCascade, MemoryClient
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.audit import WriterAuditLog
from sessionstream.producers.memory_log import decode_op
from sessionstream.producers.resume import read_log
from sessionstream.producers.writer import WriterConfig
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CANARY = "Zephyr-4411"  # the deleted session's unique text


def _redis_bytes(r: redis.Redis, prefix: str) -> str:
    out = []
    for key in r.scan_iter(match=f"{prefix}*", count=1000):
        out.append(repr(r.dump(key)))
    return "".join(out)


def test_a_deleted_sessions_unique_text_is_found_nowhere_afterwards(
        writer_cfg: WriterConfig, settings: Settings, unique_topic: Callable[..., str],
        redis_prefix: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(store, "default"))
    mset = dataclasses.replace(settings, memory_topic_override=unique_topic(4),
                               key_prefix=redis_prefix)
    sessions = FleetStore(cfg)
    backend = FleetBackend(mset, store, encryption=True)
    mem = MemoryClient(backend, Actor(Role.AGENT, "bot", user="ada"))

    # s1 states a preference; s3 states something else that s1 also supports
    said = sessions.open("s1").append("user/message",
                                      {"content": f"My wifi password is {CANARY}"})
    sessions.open("s3").append("user/message", {"content": "I speak Italian"})
    secret = mem.propose(f"Wifi password is {CANARY}", kind="fact",
                         sources=[("s1", [said.seq])])
    shared = mem.propose("Speaks Italian", kind="fact", sources=[("s1", [0]), ("s3", [0])])
    # a later session showed the memory to a model: the recall is logged, sealed
    s2 = sessions.open("s2")
    s2.append("user/message", {"content": "what is my wifi password?"})
    assert next(h.version.ref for h in mem.recall(s2, "wifi password")) == secret.ref
    before = [e for e in read_log(cfg, "s2").admitted if e.type == "memory/recall"]
    assert before and CANARY in before[0].data["content"]

    gov = Governance(cfg, store, redis_client, audit=WriterAuditLog(cfg), principal="dpo",
                     memory=LineageCascade(FleetBackend(mset, store, encryption=True)))
    report = gov.delete("s1", reason="user request")
    assert report.memory is not None
    assert report.memory.forgotten == [str(secret.ref)]
    assert report.memory.narrowed == [str(shared.ref)]
    assert report.memory.keys_shredded >= 1

    # the memory views and search of any process
    reader = MemoryClient(FleetBackend(mset, store, encryption=True),
                          Actor(Role.AGENT, "bot", user="ada"))
    assert [v.content for v in reader.list()] == ["Speaks Italian"]
    assert [s.session_id for s in reader.list()[0].sources] == ["s3"]
    assert reader.search(CANARY) == [] and reader.search("wifi password") == []
    assert CANARY not in str(reader.show(secret.ref.id))
    # the other session's logged recall
    after = [e for e in read_log(cfg, "s2").admitted if e.type == "memory/recall"]
    assert after[0].data["content"] == DELETED_TEXT
    # the memory topic's records
    sealer = MemorySealer(store, "default")
    ns = mem.namespace()
    records = backend.log.read(backend.log.partition_of(ns), 0, 1 << 40)
    ops = [decode_op(v, sealer) for _, k, v in records if k == ns.key.encode()]
    assert ops and CANARY not in str([o.to_json() for o in ops])
    # a Redis dump (every key of the tenant, as DUMP serializes it)
    assert CANARY not in _redis_bytes(redis_client, redis_prefix)
    # a proposal citing s1 again is refused
    with pytest.raises(Exception, match="deleted"):
        mem.propose(f"Password {CANARY}", kind="fact", sources=[("s1", [0])])
    sessions.close()
    backend.close()
