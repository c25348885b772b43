"""The projection worker (faust subprocesses) against the real Kafka and Redis.

Every Redis view must equal the core's offline fold of the same log, whatever happens to
the workers: crashes, restarts, rebalances, redeliveries. The kafka engine runs over
both fold paths: ``kafka`` with the native fold (required where the extension is built,
as in CI) and ``kafka-python`` with ``SESSIONSTREAM_FOLD=python``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from sessionstream.core.events import make_event
from sessionstream.core.settings import Settings
from sessionstream.streams import fold_native
from tests.integration.procs import ROOT, WORKER, ProcessGroup
from tests.integration.streams_helpers import (
    caught_up,
    expected_views,
    fleet,
    interleave,
    produce,
    stored_views,
    wait_until,
    worker_env,
)

APP = "sessionstream.streams.app:app"
CLI = "sessionstream.cli.main"
ENGINES = pytest.mark.parametrize("engine", ["faust", "kafka", "kafka-python"])


def start_worker(procs: ProcessGroup, engine: str, env: dict[str, str]) -> Any:
    """The same worker behind either engine and fold path (the tests hold for all)."""
    if engine == "faust":
        return procs.start_faust_worker(APP, env)
    fold = "python" if engine == "kafka-python" else (
        "native" if fold_native.available() else "python")
    return procs.start_module(WORKER, env={**env, "SESSIONSTREAM_FOLD": fold},
                              name="kafka-worker")


@ENGINES
def test_every_view_equals_the_offline_fold_poison_goes_to_dlq_unknown_quarantines(
    engine: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup,
) -> None:
    """200 sessions; a poison record; one session with an unknown required event."""
    topic, dlq = unique_topic(4), unique_topic(4)
    logs = fleet(200)
    bad_sid = "sess-0007"
    bad = logs[bad_sid]
    alien = make_event(session_id=bad_sid, seq=len(bad), event_id="alien-1", time=1,
                       type="alien/thing", data={}, writer=bad[-1].writer,
                       prev_event_id=bad[-1].event_id)
    merged = interleave(logs)
    produce(settings.kafka_bootstrap, topic, merged[:3000],
            raw=[(b"sess-0001", b"\x00\x01poison")])
    produce(settings.kafka_bootstrap, topic, [*merged[3000:], alien])
    env = worker_env(settings, topic, dlq, consumer_group, redis_prefix)
    worker = start_worker(procs, engine, env)
    good = {s: ev for s, ev in logs.items() if s != bad_sid}
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, good), 90,
               "all sessions projected", alive=lambda: _alive(worker))
    for sid, events in good.items():
        seq, views, meta = stored_views(redis_client, redis_prefix, settings.tenant, sid)
        assert seq == events[-1].seq
        assert views == expected_views(events), sid
        assert meta["counts"] == {"admitted": len(events)}, "an event was applied twice"
    # the unknown event stops only its own session, with the reason stored
    def quarantined() -> bool:
        return stored_views(redis_client, redis_prefix, settings.tenant, bad_sid)[2].get(
            "quarantine") is not None
    wait_until(quarantined, 30, "the bad session quarantined")
    seq, views, meta = stored_views(redis_client, redis_prefix, settings.tenant, bad_sid)
    assert meta["quarantine"]["kind"] == "unknown_event"
    assert views["index"]["status"] == "quarantined"
    assert views["todo"] == expected_views(bad)["todo"]
    # the poison record is in the dead-letter topic with its reason
    letters = _consume_all(settings.kafka_bootstrap, dlq, 1)
    assert len(letters) == 1
    assert dict(letters[0].headers())["sessionstream.reason"] == b"corrupt"
    # online reads: the CLI shows the quarantine and lists sessions from the index
    env_cli = {**env}
    out = procs.run_module(CLI, "views", bad_sid, "--json", env=env_cli)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["quarantine"]["kind"] == "unknown_event"
    out = procs.run_module(CLI, "sessions", "--json", "--limit", "500",
                           env=env_cli)
    assert out.returncode == 0, out.stderr
    assert {row["session_id"] for row in json.loads(out.stdout)} == set(logs)
    # a replay generation equals the live one, and readers switch to it
    worker.stop()
    if engine != "faust":  # the fold path the worker ran
        want = "native" if engine == "kafka" and fold_native.available() else "python"
        assert f"fold: {want}" in worker.log_path.read_text(errors="replace")
    else:  # faust kept its data dir where the settings said, not in the working directory
        assert (procs.faust_datadir / consumer_group / "v1").is_dir()
        assert not (ROOT / f"{consumer_group}-data").exists()
    out = procs.run_module(CLI, "replay", "--json", env=env_cli, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["equals_live"] and report["switched"]
    # the replay folded natively when the extension is built (CI builds it)
    assert report["fold"] == ("native" if fold_native.available() else "python")
    assert report["equal"] == 200 and report["not_comparable"] == []
    assert int(redis_client.get(f"{redis_prefix}:{{{settings.tenant}}}:generation")) == \
        report["generation"]


@ENGINES
def test_sigkill_mid_batch_and_restart_gives_identical_state(
    engine: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup,
) -> None:
    topic = unique_topic(4)
    logs = fleet(60, seed=5, turns=3)
    events = interleave(logs)
    env = worker_env(settings, topic, unique_topic(1), consumer_group, redis_prefix,
                     SESSIONSTREAM_BATCH_MAX="50")
    worker = start_worker(procs, engine, env)
    feeder = threading.Thread(target=_produce_slowly,
                              args=(settings.kafka_bootstrap, topic, events), daemon=True)
    feeder.start()
    wait_until(lambda: _sessions_started(redis_client, redis_prefix, settings.tenant) >= 20, 60,
               "some sessions projected", alive=lambda: _alive(worker))
    worker.kill()
    assert not caught_up(redis_client, redis_prefix, settings.tenant, logs)(), \
        "worker finished before the kill; the test proves nothing"
    feeder.join(60)
    worker = start_worker(procs, engine, env)
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, logs), 90,
               "all sessions projected after restart", alive=lambda: _alive(worker))
    for sid, evs in logs.items():
        _, views, meta = stored_views(redis_client, redis_prefix, settings.tenant, sid)
        assert views == expected_views(evs), sid
        assert meta["counts"] == {"admitted": len(evs)}, "an event was applied twice"


@ENGINES
def test_two_workers_with_a_rebalance_in_the_middle_equal_one_worker(
    engine: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup,
) -> None:
    topic = unique_topic(6)
    logs = fleet(60, seed=9, turns=3)
    events = interleave(logs)
    env = worker_env(settings, topic, unique_topic(1), consumer_group, redis_prefix,
                     SESSIONSTREAM_BATCH_MAX="50")
    first = start_worker(procs, engine, env)
    feeder = threading.Thread(target=_produce_slowly,
                              args=(settings.kafka_bootstrap, topic, events), daemon=True)
    feeder.start()
    wait_until(lambda: _sessions_started(redis_client, redis_prefix, settings.tenant) >= 10, 60,
               "first worker started projecting", alive=lambda: _alive(first))
    start_worker(procs, engine, env)  # joins the group: rebalance mid-stream
    feeder.join(60)
    wait_until(caught_up(redis_client, redis_prefix, settings.tenant, logs), 90,
               "all sessions projected by two workers",
               alive=lambda: None)
    for sid, evs in logs.items():
        _, views, meta = stored_views(redis_client, redis_prefix, settings.tenant, sid)
        assert views == expected_views(evs), sid
        assert meta["counts"] == {"admitted": len(evs)}, "an event was applied twice"


def _alive(worker: object) -> None:
    if not worker.running():  # type: ignore[attr-defined]
        raise AssertionError(f"worker exited:\n{worker.log_tail()}")  # type: ignore[attr-defined]


def _produce_slowly(bootstrap: str, topic: str, events: list) -> None:  # type: ignore[type-arg]
    for i in range(0, len(events), 200):
        produce(bootstrap, topic, events[i:i + 200])
        time.sleep(0.1)


def _sessions_started(r: redis.Redis, prefix: str, tenant: str) -> int:
    return int(r.zcard(f"{prefix}:{{{tenant}}}:sessions:g1"))


def _consume_all(bootstrap: str, topic: str, expect: int, timeout: float = 20) -> list:  # type: ignore[type-arg]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                  "enable.auto.commit": False, "log_level": 3})
    meta = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expect and time.monotonic() < deadline:
        out.extend(m for m in c.consume(100, timeout=0.5) if m.error() is None)
    c.close()
    return out


@ENGINES
def test_a_missing_dead_letter_topic_fails_at_start_with_a_clear_message(
    engine: str, settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_prefix: str, procs: ProcessGroup,
) -> None:
    topic = unique_topic(1)
    env = worker_env(settings, topic, f"{topic}.no-such-dlq", consumer_group, redis_prefix)
    worker = start_worker(procs, engine, env)
    deadline = time.monotonic() + 60
    while worker.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker.running(), "the worker kept running without its dead-letter topic"
    assert worker.proc.returncode == 78
    assert "sessionstream topics ensure" in worker.log_tail()


@pytest.mark.skipif(not fold_native.available(), reason="the overlap is the native fold's")
async def test_a_rebalance_while_a_batch_write_is_in_flight_loses_and_repeats_nothing(
    settings: Settings, unique_topic: Callable[..., str], consumer_group: str,
    redis_client: redis.Redis, redis_prefix: str, procs: ProcessGroup,
) -> None:
    """The kafka engine folds batch N+1 while N's write is in flight (ADR 0014). Here a
    second worker joins while a write of this (in-process) worker is held in flight:
    the revoke only queues the partitions, the write finishes before their sessions are
    dropped, and the batch consumed with the revoke loses its records of the moved
    partitions (the new owner reads them from the progress). Every view equals the
    offline fold and no event is applied twice."""
    import asyncio
    import os

    from sessionstream.streams.engine_kafka import KafkaEngine
    from sessionstream.streams.worker import WorkerConfig, build_processor

    topic = unique_topic(4)
    logs = fleet(40, seed=13, turns=3)
    produce(settings.kafka_bootstrap, topic, interleave(logs))
    env = worker_env(settings, topic, unique_topic(1), consumer_group, redis_prefix,
                     SESSIONSTREAM_BATCH_MAX="50")
    cfg = WorkerConfig.from_settings(Settings.from_env({**os.environ, **env}))
    engine = KafkaEngine(cfg, build_processor(cfg))
    assert engine.overlaps
    loop = asyncio.get_running_loop()
    revoked, seen = asyncio.Event(), asyncio.Event()
    on_revoke = engine._on_revoke

    def revoking(consumer: Any, parts: Any) -> None:
        loop.call_soon_threadsafe(revoked.set)
        on_revoke(consumer, parts)
    engine._on_revoke = revoking  # type: ignore[method-assign]
    sink: Any = engine.processor.sink
    write_batch = sink.write_batch

    async def held(*args: Any) -> Any:
        # each write waits in flight (up to 1 s) until a revoke came while it waited
        if not seen.is_set():
            try:
                await asyncio.wait_for(revoked.wait(), 1.0)
                seen.set()
            except TimeoutError:
                pass
        return await write_batch(*args)
    sink.write_batch = held
    run = asyncio.create_task(engine.run())
    try:
        deadline = time.monotonic() + 60
        while not engine.ready():
            assert time.monotonic() < deadline and not run.done(), "never assigned"
            await asyncio.sleep(0.05)
        other = start_worker(procs, "kafka", env)  # joins the group: rebalance
        while not seen.is_set():
            assert time.monotonic() < deadline and not run.done(), \
                "no revoke came while a write was in flight"
            _alive(other)
            await asyncio.sleep(0.05)
        done = caught_up(redis_client, redis_prefix, settings.tenant, logs)
        while not await asyncio.to_thread(done):
            assert time.monotonic() < deadline + 60 and not run.done(), "not caught up"
            _alive(other)
            await asyncio.sleep(0.2)
    finally:
        engine.stop()
        await asyncio.wait_for(run, 30)
    for sid, evs in logs.items():
        _, views, meta = stored_views(redis_client, redis_prefix, settings.tenant, sid)
        assert views == expected_views(evs), sid
        assert meta["counts"] == {"admitted": len(evs)}, "an event was applied twice"
