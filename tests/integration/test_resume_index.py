"""Resume through the session index's runs (real Kafka + Redis): it reads the session's
own records, falls back to a partition scan when the index is missing or contradicted,
and the history it resumes from is always the one a full scan admits."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from confluent_kafka import Producer

from sessionstream.core.rows import LogIndexFields
from sessionstream.core.settings import Settings
from sessionstream.producers.errors import Fenced
from sessionstream.producers.index import RUN_GAP, SessionIndex
from sessionstream.producers.kafka_clients import PRODUCER_DEFAULTS
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import tool_turn

pytestmark = pytest.mark.integration

#: Records of other sessions between two flushes: more than a run may bridge.
OTHERS = RUN_GAP * 3


@pytest.fixture
def cfg(settings: Settings, unique_topic: Callable[..., str], redis_prefix: str) -> WriterConfig:
    """One partition, so every session's records interleave with the others'."""
    return WriterConfig(bootstrap=settings.kafka_bootstrap, topic=unique_topic(1),
                        redis_url=settings.redis_url, key_prefix=redis_prefix,
                        lease_ttl_ms=10_000)


def others(cfg: WriterConfig, n: int = OTHERS) -> None:
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap, "log_level": 3})
    for i in range(n):
        p.produce(cfg.topic, b"not an event of the session", f"other-{i % 7}".encode())
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def index_of(cfg: WriterConfig, sid: str, client: redis.Redis) -> SessionIndex:
    return SessionIndex(client, cfg.key_prefix)


def full_scan_ids(cfg: WriterConfig, sid: str) -> list[str]:
    rb = read_log(cfg, sid, use_index=False)
    assert rb.via == "scan"
    return [e.event_id for e in rb.admitted]


def three_runs(cfg: WriterConfig) -> str:
    """A session written in three flushes with other sessions' records between them."""
    w = SessionWriter.create(cfg)
    for n in range(3):
        tool_turn(w, n)
        w.flush(10)
        others(cfg)
    w.close()
    return w.session_id


def test_resume_reads_the_index_runs_and_skips_the_records_between_them(
        cfg: WriterConfig, redis_client: redis.Redis) -> None:
    sid = three_runs(cfg)
    idx = index_of(cfg, sid, redis_client).get(cfg.tenant, sid)
    assert idx is not None and idx.clean and len(idx.runs) == 3
    expected = full_scan_ids(cfg, sid)
    w = SessionWriter.open(cfg, sid)
    assert w.read_via == "index"
    assert w.records_read < OTHERS  # its own records, not the 3 x OTHERS between them
    assert [e.event_id for e in w.session.events[:len(expected)]] == expected
    w.close()
    assert full_scan_ids(cfg, sid)[:len(expected)] == expected


def test_a_missing_index_falls_back_to_a_scan_and_is_rebuilt_for_the_next_resume(
        cfg: WriterConfig, redis_client: redis.Redis) -> None:
    sid = three_runs(cfg)
    index = index_of(cfg, sid, redis_client)
    index.delete(cfg.tenant, sid)
    w = SessionWriter.open(cfg, sid)
    assert w.read_via == "scan" and w.records_read >= 3 * OTHERS
    w.close()
    rebuilt = index.get(cfg.tenant, sid)
    # the three flushes, found by the scan, and the resume's own end-seed after them
    assert rebuilt is not None and len(rebuilt.runs) == 4
    again = SessionWriter.open(cfg, sid)
    assert again.read_via == "index"
    ids = [e.event_id for e in again.session.events]
    again.close()
    assert full_scan_ids(cfg, sid)[:len(ids)] == ids


def test_an_index_missing_a_middle_run_is_caught_and_the_history_stays_exact(
        cfg: WriterConfig, redis_client: redis.Redis) -> None:
    sid = three_runs(cfg)
    index = index_of(cfg, sid, redis_client)
    idx = index.get(cfg.tenant, sid)
    assert idx is not None
    # A stale index that still says clean: the middle flush's records are not in it.
    (lo1, hi1), _, (lo3, hi3) = idx.runs
    key = index.key(cfg.tenant, sid)
    f = LogIndexFields
    redis_client.hset(key, mapping={f.RUNS: f"{lo1}:{hi1} ", f.RUN_LO: lo3, f.RUN_HI: hi3})
    expected = full_scan_ids(cfg, sid)
    w = SessionWriter.open(cfg, sid)
    assert w.read_via == "scan"  # the read of two runs did not admit the last record
    assert [e.event_id for e in w.session.events[:len(expected)]] == expected
    w.close()
    repaired = index.get(cfg.tenant, sid)
    assert repaired is not None and len(repaired.runs) == 4  # with the resume's end-seed
    again = SessionWriter.open(cfg, sid)
    assert again.read_via == "index"
    again.close()


def test_an_index_of_offsets_the_partition_does_not_hold_falls_back_to_a_scan(
        cfg: WriterConfig, redis_client: redis.Redis) -> None:
    w = SessionWriter.create(cfg)
    tool_turn(w, 0)
    w.close()
    sid = w.session_id
    index = index_of(cfg, sid, redis_client)
    f = LogIndexFields
    # As if the topic had been recreated: the index names offsets beyond its end.
    redis_client.hset(index.key(cfg.tenant, sid), mapping={
        f.FIRST_OFFSET: 10_000, f.LAST_OFFSET: 10_020, f.RUN_LO: 10_000, f.RUN_HI: 10_020,
        f.RUNS: ""})
    expected = full_scan_ids(cfg, sid)
    r = SessionWriter.open(cfg, sid)
    assert r.read_via == "scan"
    assert [e.event_id for e in r.session.events[:len(expected)]] == expected
    r.close()
    fixed = index.get(cfg.tenant, sid)
    assert fixed is not None and fixed.last_offset < 10_000


def test_a_crashed_writers_unrecorded_flush_is_found_in_the_tail_and_recorded(
        cfg: WriterConfig, redis_client: redis.Redis) -> None:
    w = SessionWriter.create(cfg)
    tool_turn(w, 0)
    w.close()
    crashed = SessionWriter.open(cfg, w.session_id)
    tool_turn(crashed, 1)
    # Acknowledged by the broker (so admitted by readers) but never recorded in the
    # index: the process died between the broker's ack and flush's Redis half.
    crashed._sender.flush(10)
    assert crashed._sender.unconfirmed() == {}
    lost = [e.event_id for e in crashed.session.events[-9:]]
    crashed.abandon()
    others(cfg)
    index = index_of(cfg, w.session_id, redis_client)
    before = index.get(cfg.tenant, w.session_id)
    heir = SessionWriter.open(cfg, w.session_id, steal=True)
    assert heir.read_via == "index"  # runs + the tail after the last recorded offset
    ids = [e.event_id for e in heir.session.events]
    assert set(lost) <= set(ids)
    heir.close()
    assert full_scan_ids(cfg, w.session_id)[:len(ids)] == ids
    after = index.get(cfg.tenant, w.session_id)
    assert before is not None and after is not None and len(after.runs) > len(before.runs)


def test_a_refused_event_is_never_recorded_in_the_index(
        cfg: WriterConfig, redis_client: redis.Redis) -> None:
    short = WriterConfig(**{**cfg.__dict__, "lease_ttl_ms": 300})
    zombie = SessionWriter.create(short)
    tool_turn(zombie, 0)
    zombie.flush(10)
    heir = SessionWriter.open(short, zombie.session_id, steal=True)
    heir.append("user/message", {"content": "heir"})
    heir.flush(10)
    zombie._maybe_renew = lambda: None  # type: ignore[method-assign]
    z = zombie.append("user/message", {"content": "zombie"})
    with pytest.raises(Fenced):
        zombie.flush(10)
    idx = index_of(cfg, zombie.session_id, redis_client).get(cfg.tenant, zombie.session_id)
    assert idx is not None
    assert all(not lo <= zombie._offsets[z.event_id] <= hi for lo, hi in idx.runs)
    heir.close()


def test_the_native_and_the_python_decoder_read_back_the_same_log(
        cfg: WriterConfig) -> None:
    from sessionstream.producers.edges import WriterEdges
    from sessionstream.producers.readback import NativeDecoder

    if not NativeDecoder.available():
        pytest.skip("the native extension is not built")
    sid = three_runs(cfg)
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap, "log_level": 3})
    p.produce(cfg.topic, b"\xc3\x01 not avro", sid.encode())  # corrupt, under the key
    assert p.flush(30) == 0
    python_cfg = WriterConfig(**{**cfg.__dict__, "native_decode": False})
    for c, native_decoder in ((cfg, True), (python_cfg, False)):
        edges = WriterEdges(c)
        try:
            assert (edges.decode_many is not None) is native_decoder
        finally:
            edges.close()
    native, python = read_log(cfg, sid, use_index=False), read_log(python_cfg, sid,
                                                                   use_index=False)
    assert native.admitted == python.admitted and len(native.admitted) > 10
    assert native.offsets == python.offsets and native.rejections == python.rejections
    assert native.corrupt == python.corrupt and len(native.corrupt) == 1
    w = SessionWriter.open(python_cfg, sid)  # the Python path resumes through the index too
    assert w.read_via == "index"
    assert [e.event_id for e in w.session.events[:len(python.admitted)]] == [
        e.event_id for e in python.admitted]
    w.close()
