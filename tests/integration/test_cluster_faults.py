"""Fault tests on the local cluster profile: 3 KRaft brokers (RF=3, min.insync.replicas=2)
and a Redis Cluster (3 masters + 3 replicas), real processes on loopback.

One cluster serves every test here (session-scoped, own state dir, ports picked free at run
time so it never collides with the shared single-node stack or another run). Each test runs
writers (one thread per session, a flush after every turn) and a real worker subprocess,
breaks something in the middle, and then checks:

- 0 confirmed events lost: every event whose flush() returned is admitted in the log;
- 0 duplicates admitted and 0 gaps: each session's admitted seqs are 0..n, event ids unique;
- the projections in the Redis Cluster equal an offline fold of the admitted log;
- writers' errors are typed, clear (they name what failed) and bounded: each writer is back
  to confirmed writes within ERROR_WINDOW_S of its first error.

Figures (events, confirmed, errors, longest error window, duplicates dropped) are printed
and, if ``SESSIONSTREAM_FAULT_REPORT`` names a file, appended to it as JSON lines.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sessionstream import redisconn
from sessionstream.core.rows import KeySpace
from sessionstream.localstack.cluster import ClusterConfig, LocalCluster
from sessionstream.producers.errors import ProducerError
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.streams_helpers import expected_views, stored_views, wait_until

pytestmark = pytest.mark.integration

SESSIONS = 6
TURNS = 14
#: The longest a writer may go from its first error to its next confirmed flush. Leader
#: election after a SIGKILL takes the broker session timeout (4 s) plus a metadata refresh;
#: a Redis failover the node timeout (2 s) plus a vote. Generous for a loaded 2-CPU box.
ERROR_WINDOW_S = 60.0
TENANT = "default"


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_ports() -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Free ports for 3 brokers, 3 controllers and 6 Redis nodes (whose port+10000 is free)."""
    rng = random.Random()
    taken: set[int] = set()

    def one(redis_bus: bool) -> int:
        for _ in range(1000):
            p = rng.randrange(20000, 30000)
            pair = {p, p + 10000} if redis_bus else {p}
            if not pair & taken and all(_free(q) for q in pair):
                taken.update(pair)
                return p
        raise RuntimeError("no free loopback ports")

    return (tuple(one(False) for _ in range(3)), tuple(one(False) for _ in range(3)),
            tuple(one(True) for _ in range(6)))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    kafka, controllers, redis_ports = pick_ports()
    cfg = ClusterConfig(state_dir=tmp_path_factory.mktemp("cluster"), kafka_ports=kafka,
                        controller_ports=controllers, redis_ports=redis_ports)
    local = LocalCluster(cfg, echo=lambda _: None)
    try:
        local.up()
        yield local
    finally:
        from sessionstream.producers.kafka import POOL

        POOL.close_all(1.0)  # the writers' pooled producers: they would dial the dead nodes
        local.down()


@dataclass
class WriterLog:
    """What one writer thread saw: confirmed event ids and timed errors."""

    session_id: str
    confirmed: list[str] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)  # (time, "Type: message")
    windows: list[float] = field(default_factory=list)  # first error -> next confirmed flush
    longest_flush: float = 0.0  # the longest one flush() blocked (a failover shows here)
    turns_done: int = 0
    failed: str | None = None


def _write_session(cfg: WriterConfig, out: WriterLog, turns: int, pause: float,
                   started: threading.Event) -> None:
    """Append ``turns`` tool turns, flushing after each; on an error resend and flush again."""
    w = SessionWriter.create(cfg, out.session_id)
    out.confirmed.extend(e.event_id for e in w.session.events)
    started.set()
    first_error: float | None = None
    deadline = time.monotonic() + 240
    try:
        n = 0
        while n < turns:
            if time.monotonic() > deadline:
                out.failed = f"gave up after 240 s at turn {n}"
                return
            try:
                if not w.unconfirmed():
                    _turn(w, n)
                else:
                    w.resend_unconfirmed()
                began = time.monotonic()
                w.flush(30)
                out.longest_flush = max(out.longest_flush, time.monotonic() - began)
            except ProducerError as exc:
                out.errors.append((time.monotonic(), f"{type(exc).__name__}: {exc}"[:300]))
                if first_error is None:
                    first_error = time.monotonic()
                time.sleep(0.5)
                continue
            out.confirmed = [e.event_id for e in w.session.events]
            if first_error is not None:
                out.windows.append(time.monotonic() - first_error)
                first_error = None
            n += 1
            out.turns_done = n
            time.sleep(pause)
        w.close(30)
    except Exception as exc:  # reported by the test, with the writer's own words
        out.failed = f"{type(exc).__name__}: {exc}"[:500]


def _turn(w: SessionWriter, n: int) -> None:
    w.append("turn/start", {})
    w.append("user/message", {"content": f"question {n}"})
    w.append("step/start", {})
    w.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": f"c{n}-{w.next_seq}", "name": "ls", "arguments": {"n": n}}
    w.append("assistant/message", {"content": "", "tool_calls": [call]})
    w.append("tool/call", call)
    w.append("tool/result", {"call_id": call["call_id"], "status": "ok", "content": f"r{n}"})
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})


class _Count(logging.Handler):
    """Counts the writers' degraded-mode warnings (Redis unreachable: index, hand-off)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


class Scenario:
    """Topics, a worker subprocess and writer threads on the shared cluster, then checks."""

    def __init__(self, cluster: LocalCluster, procs: ProcessGroup, tmp_path: Path,
                 name: str) -> None:
        self.cluster = cluster
        self.name = name
        tag = uuid.uuid4().hex[:8]
        self.topic = f"sessionstream.fault{tag}.events"
        self.dlq = f"sessionstream.fault{tag}.dlq"
        self.prefix = f"ssfault{tag}"
        admin = AdminClient({"bootstrap.servers": cluster.cfg.bootstrap})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=3, replication_factor=3,
                      config={"min.insync.replicas": "2", "cleanup.policy": "delete",
                              "retention.ms": "-1"}) for t in (self.topic, self.dlq)])
        for fut in futures.values():
            fut.result(60)
        cluster.wait_in_sync([self.topic, self.dlq])
        self.cfg = WriterConfig(
            bootstrap=cluster.cfg.bootstrap, topic=self.topic, redis_url=cluster.cfg.redis_url,
            redis_cluster=True, tenant=TENANT, key_prefix=self.prefix,
            attachment_dir=tmp_path / "att", lease_ttl_ms=20_000)
        env = {**cluster.cfg.settings_env(), "SESSIONSTREAM_EVENTS_TOPIC": self.topic,
               "SESSIONSTREAM_DLQ_TOPIC": self.dlq, "SESSIONSTREAM_KEY_PREFIX": self.prefix,
               "SESSIONSTREAM_STREAMS_GROUP": f"fault-{tag}", "SESSIONSTREAM_TENANT": TENANT}
        self.worker = procs.start_module(WORKER, env=env, name=f"worker-{name}")
        self.logs = [WriterLog(f"{name}-{tag}-{i}") for i in range(SESSIONS)]
        self.threads: list[threading.Thread] = []
        self.total_turns = 0
        self.t0 = time.monotonic()
        self.warnings = _Count()
        logging.getLogger("sessionstream.producers.writer").addHandler(self.warnings)

    def start_writers(self, turns: int = TURNS, pause: float = 0.15) -> None:
        self.total_turns = turns * len(self.logs)
        for log in self.logs:
            started = threading.Event()
            t = threading.Thread(target=_write_session, args=(self.cfg, log, turns, pause,
                                                              started), daemon=True)
            t.start()
            started.wait(60)
            self.threads.append(t)

    def progress(self) -> int:
        """Turns confirmed so far, summed over the writers."""
        return sum(max(0, len(log.confirmed) - 1) // 9 for log in self.logs)

    def wait_progress(self, turns: int, timeout: float = 120) -> None:
        """Until ``turns`` turns are confirmed (or every writer's last one, if fewer)."""
        turns = min(turns, self.total_turns)
        wait_until(lambda: self.progress() >= turns, timeout, f"{turns} confirmed turns",
                   alive=self._worker_alive)

    def _worker_alive(self) -> None:
        assert self.worker.running(), self.worker.log_tail()

    def finish(self) -> dict[str, Any]:
        """Join the writers, wait for the worker, check every invariant; return the figures."""
        for t in self.threads:
            t.join(300)
        logging.getLogger("sessionstream.producers.writer").removeHandler(self.warnings)
        failed = {log.session_id: log.failed for log in self.logs if log.failed}
        assert not failed, f"writers failed: {failed}"
        stuck = [t.name for t in self.threads if t.is_alive()]
        assert not stuck, f"writer threads still running after 300 s: {stuck}"
        short = {log.session_id: log.turns_done for log in self.logs
                 if log.turns_done != self.total_turns // len(self.logs)}
        assert not short, f"writers that did not finish their turns: {short}"
        admitted: dict[str, list[Any]] = {}
        dropped_duplicates = 0
        for log in self.logs:
            rb = read_log(self.cfg, log.session_id, use_index=False, timeout=60)
            events = list(rb.admitted)
            admitted[log.session_id] = events
            ids = [e.event_id for e in events]
            # 0 gaps, 0 duplicates admitted, 0 confirmed events lost.
            assert [e.seq for e in events] == list(range(len(events))), log.session_id
            assert len(set(ids)) == len(ids), log.session_id
            lost = set(log.confirmed) - set(ids)
            assert not lost, f"{log.session_id}: {len(lost)} confirmed events lost"
            dropped_duplicates += sum(1 for r in rb.rejections if r.verdict == "duplicate")
            assert not [r for r in rb.rejections if r.verdict != "duplicate"], rb.rejections
        r = redisconn.sync_redis(self.cluster.cfg.redis_url, cluster=True,
                                 decode_responses=True)
        try:
            def caught_up() -> bool:
                for sid, events in admitted.items():
                    got = r.hget(KeySpace(TENANT, self.prefix).session_row(sid, 1), "as_of_seq")
                    if got is None or int(got) != events[-1].seq:
                        return False
                return True

            try:
                wait_until(caught_up, 120, "the worker to fold every admitted event",
                           alive=self._worker_alive)
            except AssertionError as exc:  # say which sessions lag and what the worker did
                rows = KeySpace(TENANT, self.prefix)
                lag = {sid: (r.hget(rows.session_row(sid, 1), "as_of_seq"), events[-1].seq)
                       for sid, events in admitted.items()}
                raise AssertionError(f"{exc}; (folded as_of_seq, last admitted seq) per "
                                     f"session: {lag}; worker log:\n"
                                     f"{self.worker.log_tail(80)}") from None
            for sid, events in admitted.items():
                # Opened as readers see them (the worker seals content-bearing fields).
                _, views, _ = stored_views(r, self.prefix, TENANT, sid, 1)
                assert views == expected_views(events), f"{sid}: Redis differs from the fold"
        finally:
            r.close()
        errors = [e for log in self.logs for e in log.errors]
        windows = [w for log in self.logs for w in log.windows]
        # Errors are typed and say what failed; each writer recovered within the window.
        assert all(": " in msg and len(msg) > 20 for _, msg in errors), errors
        assert max(windows, default=0.0) < ERROR_WINDOW_S, windows
        figures = {
            "scenario": self.name,
            "sessions": len(self.logs),
            "events_admitted": sum(len(v) for v in admitted.values()),
            "events_confirmed": sum(len(log.confirmed) for log in self.logs),
            "confirmed_lost": 0, "duplicates_admitted": 0, "gaps": 0,
            "duplicate_records_dropped_by_readers": dropped_duplicates,
            "writer_errors": len(errors),
            "error_kinds": sorted({msg.split(":", 1)[0] for _, msg in errors}),
            "longest_error_window_s": round(max(windows, default=0.0), 2),
            "longest_flush_s": round(max(log.longest_flush for log in self.logs), 2),
            "writer_degraded_warnings": self.warnings.n,
            "worker_redis_retries": self.worker.log_tail(100000).count("retry "),
            "seconds": round(time.monotonic() - self.t0, 1),
        }
        print(f"\nfault figures: {json.dumps(figures)}")
        report = os.environ.get("SESSIONSTREAM_FAULT_REPORT")
        if report:
            with open(report, "a") as fh:
                fh.write(json.dumps(figures) + "\n")
        return figures


@pytest.fixture
def scenario(cluster: LocalCluster, procs: ProcessGroup, tmp_path: Path
             ) -> Callable[[str], Scenario]:
    def make(name: str) -> Scenario:
        return Scenario(cluster, procs, tmp_path, name)
    return make


def _restore(cluster: LocalCluster, topics: list[str]) -> None:
    """Bring every node back, so the next test starts on a whole cluster."""
    for node in cluster.kafka:
        if node.pid() is None:
            cluster.start_kafka(node.node_id, wait=False)
    cluster.wait_kafka()
    cluster.wait_in_sync(topics)


def test_sigkill_of_the_partition_leader_during_appends_and_folds_loses_nothing(
    cluster: LocalCluster, scenario: Callable[[str], Scenario]
) -> None:
    s = scenario("leaderkill")
    s.start_writers()
    s.wait_progress(SESSIONS * 3)
    # The leader of the partition holding the first session (and so its writes and folds).
    from sessionstream.producers.partition import partition_for

    part = partition_for(s.logs[0].session_id, 3)
    leader = cluster.partition_leader(s.topic, part)
    assert cluster.kafka[leader - 1].kill()
    killed_at = s.progress()
    s.wait_progress(killed_at + SESSIONS * 2, timeout=180)  # writes go on with 2 of 3 brokers
    new_leader = cluster.partition_leader(s.topic, part)
    assert new_leader not in (leader, -1)
    cluster.start_kafka(leader)
    figures = s.finish()
    _restore(cluster, [s.topic])
    assert figures["events_admitted"] >= SESSIONS * (1 + 9 * TURNS)


def test_a_rolling_restart_of_every_broker_loses_nothing(
    cluster: LocalCluster, scenario: Callable[[str], Scenario]
) -> None:
    s = scenario("rolling")
    s.start_writers(turns=TURNS + 6)
    s.wait_progress(SESSIONS * 2)
    for node in cluster.kafka:
        assert node.stop()  # SIGTERM: a controlled shutdown moves leadership away first
        cluster.start_kafka(node.node_id)
        cluster.wait_in_sync([s.topic])
    figures = s.finish()
    assert figures["events_admitted"] >= SESSIONS * (1 + 9 * (TURNS + 6))


def test_a_killed_redis_master_fails_over_to_its_replica_and_loses_nothing(
    cluster: LocalCluster, scenario: Callable[[str], Scenario]
) -> None:
    s = scenario("redisfail")
    s.start_writers()
    s.wait_progress(SESSIONS * 3)
    row = KeySpace(TENANT, s.prefix).session_row(s.logs[0].session_id, 1)
    victim = cluster.redis_master_for(row)
    assert victim.kill()
    killed_at = s.progress()
    # A replica takes over the victim's slots: the cluster is whole again without it.
    cluster.wait_failover(victim.port, timeout=60)
    assert list(cluster.redis_roles().values()).count("master") == 3
    s.wait_progress(killed_at + SESSIONS, timeout=120)
    figures = s.finish()
    cluster.start_redis(victim.port)  # rejoins as a replica of the promoted node
    cluster.wait_redis(timeout=60)
    assert cluster.redis_roles()[victim.port] == "slave"
    assert figures["events_admitted"] >= SESSIONS * (1 + 9 * TURNS)
