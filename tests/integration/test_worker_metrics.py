"""A real kafka-engine worker exposes Prometheus metrics and readiness after folding events."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis as AsyncRedis

from sessionstream.core import codec
from sessionstream.core.events import Writer, make_event
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.streams.lag import PartitionLag, probe_from_settings
from sessionstream.streams.sink import RedisSink
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.streams_helpers import (
    caught_up,
    fleet,
    interleave,
    produce,
    read_topic,
    wait_until,
    worker_env,
)
from tests.integration.test_streams_worker import ENGINES, start_worker

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@ENGINES
def test_a_worker_of_either_engine_serves_metrics_that_count_what_it_folded_and_turns_ready(
    engine: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_prefix: str, redis_client: redis.Redis, procs: ProcessGroup,
) -> None:
    topic, dlq = unique_topic(3), unique_topic(3)
    logs = fleet(4, seed=5, turns=1)
    events = interleave(logs)
    port = _free_port()
    env = worker_env(settings, topic, dlq, consumer_group, redis_prefix,
                     SESSIONSTREAM_METRICS_PORT=str(port))
    worker = start_worker(procs, engine, env)
    base = f"http://127.0.0.1:{port}"
    worker.wait_for(lambda: _get(f"{base}/healthz")[0] == 200, 60, "/healthz")
    worker.wait_for(lambda: _get(f"{base}/readyz")[0] == 200, 60, "/readyz (an assignment)")
    produce(settings.kafka_bootstrap, topic, events, raw=[(b"bad", b"not avro")])
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, logs), 60,
               "the worker to fold every event")

    def counted() -> bool:
        got = _samples(_get(f"{base}/metrics")[1])
        return got.get(("sessionstream_worker_records_total",
                        (("tenant", settings.tenant),)), 0) >= len(events) + 1
    wait_until(counted, 30, "the records counter")
    status, text = _get(f"{base}/metrics")
    assert status == 200
    got = _samples(text)
    tenant = (("tenant", settings.tenant),)
    assert got[("sessionstream_worker_records_total", tenant)] == len(events) + 1
    assert got[("sessionstream_worker_dead_letters_total", tenant)] == 1
    assert got[("sessionstream_worker_assigned_partitions", tenant)] == 3
    # one observation per batch: at least one batch, and never more than the records
    batches = got[("sessionstream_worker_batch_duration_seconds_count", tenant)]
    assert 0 < batches <= len(events) + 1
    assert got[("sessionstream_worker_rejections_total",
                (("tenant", settings.tenant), ("verdict", "stale_epoch")))] == 0
    for op in ("session_writes", "tenant_write"):  # the sink's Redis calls, timed
        assert got[("sessionstream_worker_redis_duration_seconds_count",
                    (("op", op), ("tenant", settings.tenant)))] >= 1

    def lags(name: str) -> dict[str, float]:
        got = _samples(_get(f"{base}/metrics")[1])
        return {dict(k[1])["partition"]: v for k, v in got.items() if k[0] == name}

    drained = {"0": 0, "1": 0, "2": 0}
    wait_until(lambda: lags("sessionstream_worker_consumer_lag_seq") == drained, 30,
               "the as_of_seq lag of every partition to be exported as 0")
    wait_until(lambda: lags("sessionstream_worker_consumer_lag_offsets") == drained, 30,
               "the offsets lag of every partition to be exported as 0")
    # Tenant as a label, never a session id or content.
    assert not any(sid in text for sid in logs)


def test_a_worker_counts_a_zombie_writers_refused_event_by_verdict_and_its_lag_drains_to_0(
    settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_prefix: str, redis_client: redis.Redis, procs: ProcessGroup,
) -> None:
    topic, dlq = unique_topic(2), unique_topic(1)
    logs = fleet(3, seed=7, turns=1)
    events = interleave(logs)
    sid, other = list(logs)[:2]
    # A zombie (an old writer that missed its fencing) appends at a seq already taken,
    # and, after an heir with a newer epoch took the other session, with its old epoch.
    zombie = make_event(session_id=sid, seq=3, event_id="zombie", time=1, type="todo/add",
                        data={"id": "z", "text": "zombie"}, writer=Writer("old", 0))
    last = logs[other][-1].seq
    heir = make_event(session_id=other, seq=last + 1, event_id="heir", time=2,
                      type="todo/add", data={"id": "h", "text": "heir"},
                      writer=Writer("heir", 7), prev_event_id=logs[other][-1].event_id)
    stale = make_event(session_id=other, seq=last + 2, event_id="stale", time=3,
                       type="todo/add", data={"id": "s", "text": "stale"},
                       writer=Writer("old", 0), prev_event_id="heir")
    produce(settings.kafka_bootstrap, topic, events)
    logs[other] = [*logs[other], heir]  # admitted: a newer epoch continuing the history
    produce(settings.kafka_bootstrap, topic, [zombie, heir, stale, events[0]])
    port = _free_port()
    env = worker_env(settings, topic, dlq, consumer_group, redis_prefix,
                     SESSIONSTREAM_METRICS_PORT=str(port))
    worker = procs.start_module(WORKER, env=env, name="kafka-worker")
    base = f"http://127.0.0.1:{port}"
    worker.wait_for(lambda: _get(f"{base}/readyz")[0] == 200, 60, "/readyz (an assignment)")
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, logs), 60,
               "the worker to fold every event")
    tenant = settings.tenant

    def verdict(name: str) -> float:
        got = _samples(_get(f"{base}/metrics")[1])
        return got.get(("sessionstream_worker_rejections_total",
                        (("tenant", tenant), ("verdict", name))), -1)

    def drained() -> bool:
        got = _samples(_get(f"{base}/metrics")[1])
        lags = {k: v for k, v in got.items()
                if k[0] == "sessionstream_worker_consumer_lag_offsets"}
        return len(lags) == 2 and all(v == 0 for v in lags.values())

    wait_until(lambda: verdict("stale_epoch") == 1, 30, "the stale_epoch counter")
    wait_until(drained, 30, "the lag gauge of both partitions to reach 0")
    assert verdict("seq_conflict") == 1  # the zombie's event at a taken seq
    assert verdict("duplicate") == 1  # the redelivered copy of an admitted event
    assert verdict("seq_gap") == 0  # every verdict is exported, zero until seen
    text = _get(f"{base}/metrics")[1]
    assert not any(s in text for s in (sid, other, "zombie"))


def test_the_compactor_serves_its_outcome_counters_and_turns_ready_after_a_step(
    settings: Settings, unique_topic: Callable[..., str], redis_prefix: str,
    procs: ProcessGroup,
) -> None:
    port = _free_port()
    env = {"SESSIONSTREAM_KEY_PREFIX": redis_prefix, "SESSIONSTREAM_METRICS_PORT": str(port),
           "SESSIONSTREAM_EVENTS_TOPIC": unique_topic(1),
           "SESSIONSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "SESSIONSTREAM_REDIS_URL": settings.redis_url}
    proc = procs.start_module("sessionstream.cli.main", "compactor", env=env, name="compactor")
    base = f"http://127.0.0.1:{port}"
    proc.wait_for(lambda: _get(f"{base}/readyz")[0] == 200, 60, "/readyz (one feed step)")
    got = _samples(_get(f"{base}/metrics")[1])
    for outcome in ("compacted", "not_needed", "skipped", "failed"):
        key = ("sessionstream_compactor_compactions_total",
               (("outcome", outcome), ("tenant", settings.tenant)))
        assert got[key] == 0, outcome


def test_the_as_of_seq_lag_counts_unseen_events_while_the_worker_is_stopped_and_is_0_after(
    settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_prefix: str, redis_client: redis.Redis, procs: ProcessGroup,
) -> None:
    topic, dlq = unique_topic(2), unique_topic(1)
    logs = fleet(4, seed=9, turns=2)
    first = {sid: log[: len(log) // 2] for sid, log in logs.items()}
    rest = {sid: log[len(log) // 2:] for sid, log in logs.items()}
    produce(settings.kafka_bootstrap, topic, interleave(first))
    port = _free_port()
    env = worker_env(settings, topic, dlq, consumer_group, redis_prefix,
                     SESSIONSTREAM_METRICS_PORT=str(port))
    worker = procs.start_module(WORKER, env=env, name="kafka-worker")
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, first), 60,
               "the worker to fold the first half of every session")
    assert worker.stop() == 0
    later = interleave(rest)
    produce(settings.kafka_bootstrap, topic, later)

    # What the worker measures, measured with no worker running: the newest record of
    # each partition, its seq against the as_of_seq readers see for its session.
    records = read_topic(settings.kafka_bootstrap, topic, len(interleave(first)) + len(later))
    expected_seq: dict[int, int] = {}
    expected_offsets: dict[int, int] = {}
    for r in records:
        ev = codec.decode(r.value or b"")
        expected_seq[r.partition] = ev.seq - first[ev.session_id][-1].seq  # newest wins
        if any(e.event_id == ev.event_id for e in later):
            expected_offsets[r.partition] = expected_offsets.get(r.partition, 0) + 1

    async def measure() -> list[PartitionLag]:
        aredis = AsyncRedis.from_url(settings.redis_url, decode_responses=True)
        probe = probe_from_settings(settings, RedisSink(aredis, KeySpace(settings.tenant,
                                                                         redis_prefix)),
                                    ReaderPipeline.default(), topic, consumer_group)
        try:
            return await probe.measure()
        finally:
            probe.close()
            await aredis.aclose()

    stopped = asyncio.run(measure())
    assert {lag.partition: lag.seq for lag in stopped} == expected_seq
    assert all(v > 0 for v in expected_seq.values())
    assert {lag.partition: lag.offsets for lag in stopped} == expected_offsets
    # the operator's view of the same, with no worker running
    cli = procs.run_module("sessionstream.cli.main", "lag", "--json", env=env, timeout=60)
    assert cli.returncode == 0, cli.stderr
    rows = json.loads(cli.stdout)["partitions"]
    assert {r["partition"]: (r["seq"], r["offsets"]) for r in rows} == {
        p: (expected_seq[p], expected_offsets[p]) for p in expected_seq}
    missing = procs.run_module("sessionstream.cli.main", "lag",
                               env={**env, "SESSIONSTREAM_EVENTS_TOPIC": f"{topic}.none"})
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr

    procs.start_module(WORKER, env=env, name="kafka-worker-2")
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, logs), 60,
               "the restarted worker to fold every event")
    base = f"http://127.0.0.1:{port}"

    def exported(name: str) -> dict[str, float]:
        got = _samples(_get(f"{base}/metrics")[1])
        return {dict(k[1])["partition"]: v for k, v in got.items() if k[0] == name}

    wait_until(lambda: exported("sessionstream_worker_consumer_lag_seq") == {"0": 0, "1": 0},
               30, "the exported as_of_seq lag of both partitions to reach 0")
    assert exported("sessionstream_worker_consumer_lag_offsets") == {"0": 0, "1": 0}
    after = asyncio.run(measure())
    assert [(lag.seq, lag.offsets) for lag in after] == [(0, 0), (0, 0)]
