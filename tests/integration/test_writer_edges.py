"""SessionWriter at its edges: Kafka or Redis unreachable, resources given back on
failure, librdkafka logs through logging, one shared producer per process (fork-safe)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from sessionstream.producers.errors import (
    BrokerUnavailable,
    LeaseExpired,
    RedisUnavailable,
    SessionNotFound,
    TopicNotFound,
)
from sessionstream.producers.kafka import POOL
from sessionstream.producers.kafka_clients import LIBRDKAFKA_LOGGER, RateLimit, librdkafka_logger
from sessionstream.producers.lease import LeaseStore
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CLOSED = "127.0.0.1:1"  # nothing listens on port 1


def os_threads() -> int:
    """Native threads of this process (librdkafka's are invisible to `threading`)."""
    return len(os.listdir("/proc/self/task"))


def wait_threads(at_most: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while (n := os_threads()) > at_most and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def test_create_with_no_broker_raises_broker_unavailable_fast_and_leaks_nothing(
    writer_cfg: WriterConfig, capfd: pytest.CaptureFixture[str]
) -> None:
    cfg = replace(writer_cfg, bootstrap=CLOSED, max_message_bytes=1_000_000)
    before = os_threads()
    t0 = time.monotonic()
    with pytest.raises(BrokerUnavailable) as err:
        SessionWriter.create(cfg, "s-no-broker")
    assert time.monotonic() - t0 < 5
    msg = str(err.value)
    assert CLOSED in msg and "SESSIONSTREAM_KAFKA_BOOTSTRAP" in msg
    assert "sessionstream status" in msg
    # The producer that never reached a broker is closed (its threads end), not pooled.
    assert CLOSED not in POOL.bootstraps()
    assert wait_threads(before) <= before
    # Kafka is probed before the lease: nothing was taken in Redis.
    client = redis.Redis.from_url(cfg.redis_url)
    assert LeaseStore(client, cfg.key_prefix).current_epoch(cfg.tenant, "s-no-broker") == 0
    client.close()
    # librdkafka printed nothing raw on stderr.
    assert "|FAIL|" not in capfd.readouterr().err


def test_open_with_no_broker_raises_broker_unavailable(writer_cfg: WriterConfig) -> None:
    w = SessionWriter.create(writer_cfg)
    tool_turn(w, 0)
    w.close()
    cfg = replace(writer_cfg, bootstrap=CLOSED)
    with pytest.raises(BrokerUnavailable, match="sessionstream status"):
        SessionWriter.open(cfg, w.session_id)
    assert CLOSED not in POOL.bootstraps()


def test_librdkafka_logs_go_through_logging_rate_limited(
    writer_cfg: WriterConfig, caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    cfg = replace(writer_cfg, bootstrap=CLOSED, max_message_bytes=1_000_000,
                  connect_timeout_s=3)
    for f in librdkafka_logger().filters:
        if isinstance(f, RateLimit):
            f.reset()  # earlier tests of this process used up the window
    with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER), \
            pytest.raises(BrokerUnavailable):
        SessionWriter.create(cfg)
    lines = [r for r in caplog.records if r.name == LIBRDKAFKA_LOGGER]
    assert lines, "librdkafka's connection failures are logged"
    assert len(lines) <= 5  # rate-limited per facility (RateLimit.burst)
    assert all("Connection refused" in r.getMessage() for r in lines)
    assert "%3|" not in capfd.readouterr().err


def test_missing_topic_is_topic_not_found(writer_cfg: WriterConfig) -> None:
    cfg = replace(writer_cfg, topic="sstest.does-not-exist", connect_timeout_s=2,
                  producer_config={"allow.auto.create.topics": False})
    with pytest.raises(TopicNotFound, match="topics ensure"):
        SessionWriter.create(cfg)


def test_failed_open_gives_back_lease_and_producer(writer_cfg: WriterConfig) -> None:
    in_use = POOL.in_use()
    with pytest.raises(SessionNotFound):
        SessionWriter.open(writer_cfg, "never-written")
    assert POOL.in_use() == in_use
    # The lease was released: another writer takes it at once, no steal needed.
    client = redis.Redis.from_url(writer_cfg.redis_url)
    store = LeaseStore(client, writer_cfg.key_prefix)
    lease = store.acquire(writer_cfg.tenant, "never-written", "someone-else", 5000)
    assert lease.epoch == 2
    client.close()


def test_redis_down_at_create_and_open_raises_redis_unavailable(
    writer_cfg: WriterConfig,
) -> None:
    w = SessionWriter.create(writer_cfg)
    w.close()
    in_use = POOL.in_use()
    cfg = replace(writer_cfg, redis_url="redis://user:secret@127.0.0.1:1/0")
    for attempt in (lambda: SessionWriter.create(cfg),
                    lambda: SessionWriter.open(cfg, w.session_id)):
        t0 = time.monotonic()
        with pytest.raises(RedisUnavailable) as err:
            attempt()
        assert time.monotonic() - t0 < 5
        msg = str(err.value)
        assert "SESSIONSTREAM_REDIS_URL" in msg and "127.0.0.1:1" in msg
        assert "secret" not in msg
        assert POOL.in_use() == in_use  # the producer went back to the pool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test (append-only file: data survives a SIGKILL)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always",
             "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    r = PrivateRedis(tmp_path)
    r.start()
    try:
        yield r
    finally:
        r.kill()


def test_redis_lost_mid_session_writes_on_within_ttl_then_stops(
    writer_cfg: WriterConfig, private_redis: PrivateRedis
) -> None:
    ttl = 1500
    cfg = replace(writer_cfg, redis_url=private_redis.url, lease_ttl_ms=ttl)
    w = SessionWriter.create(cfg)
    tool_turn(w, 0)
    w.flush(10)
    private_redis.kill()
    time.sleep(ttl / 3000 + 0.05)  # due for a renewal, which fails
    # Within the TTL the lease is still ours: appends and the flush barrier go on
    # (the index is a hint; flush is about Kafka).
    w.append("turn/start", {})
    w.append("user/message", {"content": "while Redis is away"})
    w.flush(10)
    time.sleep(ttl / 1000)  # past the TTL since the last renewal
    before = w.next_seq
    with pytest.raises(LeaseExpired, match="sessionstream status"):
        w.append("turn/end", {"reason": "completed"})
    assert w.next_seq == before  # nothing appended, nothing produced
    # Redis comes back with its data: the lease is still ours, writing resumes.
    private_redis.start()
    time.sleep(0.6)  # past RENEW_RETRY_S
    w.append("turn/end", {"reason": "completed"})
    w.close()
    rb = read_log(cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == [e.event_id for e in w.session.events]


def test_writers_of_a_process_share_one_producer(writer_cfg: WriterConfig) -> None:
    w1 = SessionWriter.create(writer_cfg)
    w2 = SessionWriter.create(writer_cfg)
    assert w1._sender._entry is w2._sender._entry
    tool_turn(w1, 0)
    tool_turn(w2, 0)
    w1.flush(10)
    w2.flush(10)
    entry = w1._sender._entry
    w1.close()
    w2.close()
    # Kept for the next writer (a resume reuses the connected producer).
    w3 = SessionWriter.open(writer_cfg, w1.session_id)
    assert w3._sender._entry is entry
    w3.close()
    for w in (w1, w2):
        rb = read_log(writer_cfg, w.session_id)
        assert [e.seq for e in rb.admitted] == list(range(len(rb.admitted)))
        assert rb.rejections == []


def test_a_forked_child_builds_its_own_producer(writer_cfg: WriterConfig) -> None:
    parent = SessionWriter.create(writer_cfg)  # the pool now holds a live producer
    parent_entry = parent._sender._entry
    assert parent_entry is not None
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not touch the parent's librdkafka handle
        code = 1
        try:
            os.close(r)
            child = SessionWriter.create(writer_cfg)
            ok = child._sender._entry is not parent_entry
            ok = ok and child._sender._entry.pid == os.getpid()  # type: ignore[union-attr]
            tool_turn(child, 0)
            child.close()
            os.write(wfd, child.session_id.encode() if ok else b"")
            code = 0
        finally:
            POOL.close_all(5)
            os._exit(code)
    os.close(wfd)
    _, status = os.waitpid(pid, 0)
    sid = os.read(r, 200).decode()
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0 and sid
    # The parent's producer still works after the fork.
    tool_turn(parent, 0)
    parent.close()
    assert len(read_log(writer_cfg, sid).admitted) == 10
    assert len(read_log(writer_cfg, parent.session_id).admitted) == 10


def test_read_log_with_no_broker_fails_fast_like_the_writers_probe(
    writer_cfg: WriterConfig,
) -> None:
    """Bounded by librdkafka's "all brokers down", not by the (long) read timeout."""
    w = SessionWriter.create(writer_cfg)
    w.close()
    for use_index in (True, False):  # from the index's partition, or from the key hash
        t0 = time.monotonic()
        with pytest.raises(BrokerUnavailable, match=f"{CLOSED}.*no Kafka broker"):
            read_log(replace(writer_cfg, bootstrap=CLOSED), w.session_id,
                     use_index=use_index, timeout=120)
        assert time.monotonic() - t0 < 30  # a bound (the read timeout is 120 s), not a speed
