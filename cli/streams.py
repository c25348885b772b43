"""CLI commands of the read side: ``worker``, ``views``, ``sessions``, ``replay``, ``lag``.

``register(group)`` adds them to the ``sessionstream`` click group. Clients are built
inside the commands, so the rest of the CLI starts without Kafka, Redis or faust.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from sessionstream.cli.compactor import compactor_cmd
from sessionstream.cli.context import bad_input, command_errors, settings, unreachable
from sessionstream.core.settings import ENGINES, Env

T = TypeVar("T")


def _with_redis(fn: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``fn`` with an asyncio Redis client of the settings (closed after), its errors
    mapped as every command's (cli.context.command_errors)."""
    from sessionstream import redisconn

    s = settings()

    async def run() -> T:
        redis = redisconn.from_settings(s, asyncio=True, decode_responses=True)
        try:
            return await fn(redis)
        finally:
            await redis.aclose()

    with command_errors():
        return asyncio.run(run())


@click.command("worker")
@click.option("--loglevel", "-l", default="info",
              type=click.Choice(["crit", "error", "warn", "info", "debug"]))
@click.option("--engine", default=None, type=click.Choice(list(ENGINES)),
              help="kafka: a confluent-kafka consumer loop on the native fold when built; "
                   "faust: the faust-streaming worker (same processor and guarantees, about "
                   "a third of the throughput; docs/adr/0003-faust-limits.md); "
                   f"default: {Env.ENGINE} or kafka")
def worker_cmd(loglevel: str, engine: str | None) -> None:
    """Run the projection processor for the tenant's events topic."""
    s = settings()
    if (engine or s.engine) == "kafka":
        levels = {"crit": "critical", "warn": "warning"}
        from sessionstream.streams.engine_kafka import main

        main(dataclasses.replace(s, log_level=levels.get(loglevel, loglevel)))
        return
    import importlib.util

    if importlib.util.find_spec("faust") is None:
        raise bad_input("the faust engine needs the faust extra: pip install "
                        f"'sessionstream[faust]' (or use the default engine: --engine kafka, "
                        f"{Env.ENGINE}=kafka)")
    os.execvp(sys.executable, [sys.executable, "-m", "faust", "--loop", faust_loop(),
                               "-A", "sessionstream.streams.app:app", "worker", "--without-web",
                               "-l", loglevel])


def faust_loop() -> str:
    """The faust worker's event loop: uvloop when installed (in the faust extra off Windows;
    ~1.7x the fold rate of asyncio's loop in bench_streams, ADR 0003), else asyncio's."""
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "aio"


@click.command("views")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--view", "only", multiple=True, help="Only these views (repeatable).")
def views_cmd(session_id: str, as_json: bool, only: tuple[str, ...]) -> None:
    """Every projection of SESSION_ID, read from Redis at one as_of_seq."""
    from sessionstream.governance.wiring import row_cipher
    from sessionstream.streams.read import read_views

    s = settings()
    keys = s.keys
    tenant = keys.tenant
    rows = row_cipher(s)
    snap = _with_redis(lambda r: read_views(r, keys, session_id, rows=rows))
    if snap is None:
        raise click.ClickException(
            f"no projections for session {session_id!r} of tenant {tenant!r}: is the worker "
            "running (`sessionstream worker`) and the id right (`sessionstream sessions`)?")
    out = snap.to_json()
    if only:
        out["views"] = {k: v for k, v in out["views"].items() if k in only}
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True, ensure_ascii=False))
        return
    click.echo(f"session {session_id}  as_of_seq {snap.as_of_seq}  generation {snap.generation}")
    if snap.quarantine:
        click.echo(f"QUARANTINED at seq {snap.quarantine['seq']}: {snap.quarantine['reason']}")
    for key, view in out["views"].items():
        click.echo(f"\n[{key}]")
        click.echo(json.dumps(view, indent=2, sort_keys=True, ensure_ascii=False))


@click.command("sessions")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--limit", default=50, show_default=True, help="At most this many, newest first.")
def sessions_cmd(as_json: bool, limit: int) -> None:
    """Sessions by last activity, from the session index (never reads a log)."""
    from sessionstream.streams.read import list_sessions

    keys = settings().keys
    rows = _with_redis(lambda r: list_sessions(r, keys, limit=limit))
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    click.echo(f"{'session':<40} {'status':<12} {'seq':>6} {'turns':>5} {'part':>4}  last activity")
    for row in rows:
        when = (datetime.fromtimestamp(row["last_time"] / 1000).isoformat(timespec="seconds")
                if row["last_time"] else "-")
        status = row["status"] or "-"
        click.echo(f"{row['session_id']:<40} {status:<12} {row['as_of_seq']:>6} "
                   f"{row['turns'] or 0:>5} {row['partition']!s:>4}  {when}")


@click.command("replay")
@click.option("--from", "from_", default="earliest", show_default=True,
              type=click.Choice(["earliest"]), help="Rewind to the beginning of the topic.")
@click.option("--from-time", "from_time", default=None,
              help="Rewind to this time (ISO 8601 or epoch ms): a partial generation for "
                   "inspection; readers are not switched to it.")
@click.option("--no-switch", is_flag=True,
              help="Build and compare, but keep readers where they are.")
@click.option("--json", "as_json", is_flag=True, help="Print the final report as JSON.")
def replay_cmd(from_: str, from_time: str | None, no_switch: bool, as_json: bool) -> None:
    """Rebuild all projections from the events topic into a new generation and switch to it.

    Never executes a tool: replay only folds the logged events into projections.
    """
    from sessionstream.governance.wiring import key_store, reader_pipeline, row_cipher
    from sessionstream.streams.replay import ReplayReport, replay

    s = settings()
    store = key_store(s)  # one key cache for opening events and sealing rows
    topic = s.events_topic
    ms = _parse_time(from_time) if from_time else None

    def show(r: ReplayReport) -> None:
        click.echo(f"replay g{r.generation}: {r.events} events, {r.rate:,.0f} events/s", err=True)

    report = _with_redis(lambda redis: replay(
        bootstrap=s.kafka_bootstrap, redis=redis, keys=s.keys, topic=topic,
        from_time_ms=ms, switch=not no_switch, progress=show,
        pipeline=reader_pipeline(s, store), rows=row_cipher(s, store), fold=s.fold,
        security=s.kafka_security()))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    click.echo(f"generation {report.generation} built from {report.start}: {report.events} "
               f"events in {report.seconds:.1f}s ({report.rate:,.0f}/s), "
               f"{report.sessions} sessions ({report.fold} fold)")
    click.echo(f"compared with live generation {report.live_generation}: {report.equal} equal, "
               f"{len(report.different)} different, {len(report.not_comparable)} at another seq")
    click.echo("readers switched to the new generation" if report.switched
               else "readers NOT switched")
    if report.different:
        raise click.ClickException(f"{len(report.different)} sessions differ from the live "
                                   "generation; inspect them with `sessionstream views`")


def _parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither epoch milliseconds nor ISO 8601 "
                                 "(e.g. 2026-07-01T12:00:00+00:00)") from None


@click.command("lag")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def lag_cmd(as_json: bool) -> None:
    """Consumer lag of the projections per partition, in offsets and in as_of_seq.

    Measured from Kafka and Redis alone (the worker's consumer group progress), so it
    answers whether or not a worker runs; definitions in docs/operations.md.
    """
    from confluent_kafka import KafkaException

    from sessionstream.core.pipeline import ReaderPipeline
    from sessionstream.registry import reader_decode
    from sessionstream.streams.lag import probe_from_settings
    from sessionstream.streams.sink import RedisSink, Retry

    s = settings()
    default = ReaderPipeline.default()
    pipeline = ReaderPipeline(default.registry, default.catalog, decode=reader_decode(s))

    async def measure(redis: Any) -> Any:
        probe = probe_from_settings(s, RedisSink(redis, s.keys, retry=Retry(attempts=3)),
                                    pipeline)
        try:
            return await probe.measure()
        finally:
            probe.close()

    try:
        lags = _with_redis(measure)
    except KafkaException as exc:
        raise unreachable(f"cannot read the events topic {s.events_topic} on "
                          f"{s.kafka_bootstrap} ({exc}); start Kafka with `sessionstream up` "
                          f"or set {Env.KAFKA_BOOTSTRAP}") from exc
    if not lags:
        raise bad_input(f"the events topic {s.events_topic} does not exist on "
                        f"{s.kafka_bootstrap}: create it with `sessionstream topics ensure` "
                        f"(or set {Env.EVENTS_TOPIC})")
    rows = [dataclasses.asdict(lag) for lag in lags]
    if as_json:
        click.echo(json.dumps({"topic": s.events_topic, "group": s.streams_group,
                               "partitions": rows}))
        return
    click.echo(f"topic {s.events_topic}, group {s.streams_group}")
    click.echo(f"{'partition':>9} {'high':>10} {'progress':>10} {'lag offsets':>11} "
               f"{'lag seq':>8}")
    for r in rows:
        seq = "-" if r["seq"] is None else r["seq"]
        click.echo(f"{r['partition']:>9} {r['high']:>10} {r['progress']:>10} "
                   f"{r['offsets']:>11} {seq:>8}")


def register(group: click.Group) -> None:
    for cmd in (worker_cmd, views_cmd, sessions_cmd, replay_cmd, compactor_cmd, lag_cmd):
        group.add_command(cmd)
