"""CLI commands for the local servers and topics: ``up``, ``down``, ``status``, ``logs``,
``topics ensure``, ``demo``. ``register(group)`` adds them to the ``sessionstream`` group.

Kafka/Redis clients and the demo are imported inside the commands, so the rest of the
CLI starts without them.
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sessionstream.cli.context import command_errors, settings
from sessionstream.core.settings import Env

if TYPE_CHECKING:
    from sessionstream.localstack.stack import StackConfig


def _echo(msg: str) -> None:
    click.echo(msg)


def _stack(secure: bool = False) -> StackConfig:
    from sessionstream.localstack.stack import StackConfig, secure_stack

    return secure_stack(settings()) if secure else StackConfig.from_settings(settings())


_SECURE_HELP = ("The separate secure profile (Kafka with SASL/SCRAM + ACLs, Redis with ACL "
                "users only; its own ports and state dir) instead of the plaintext stack.")


@click.command("up")
@click.option("--fresh", is_flag=True, help="Stop, wipe Kafka and Redis data, then start.")
@click.option("--started-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the names of the services this call started (one per line).")
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
def up_cmd(fresh: bool, started_file: Path | None, secure: bool) -> None:
    """Start the local Kafka (KRaft) and Redis; does nothing for those already running.

    With --secure, start the secure profile's Kafka and Redis (docs/operations.md, "Access
    scopes"); the plaintext stack is left as it is."""
    from sessionstream.localstack import stack as localstack

    started: list[str] = []
    try:
        with command_errors():
            services = list(localstack.SERVICES)
            localstack.up(_stack(secure), _echo, fresh=fresh, started=started,
                          services=services)
    finally:
        if started_file is not None:
            started_file.write_text("".join(f"{s}\n" for s in started))


@click.command("down")
@click.argument("services", nargs=-1, type=click.Choice(["kafka", "redis"]))
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
def down_cmd(services: tuple[str, ...], secure: bool) -> None:
    """Stop the servers that `up` started (all, or the SERVICES named)."""
    from sessionstream.localstack import stack as localstack

    with command_errors():
        localstack.down(_stack(secure), _echo, services or localstack.SERVICES)


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--check", is_flag=True, help="Exit 3 unless both servers are running.")
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
def status_cmd(as_json: bool, check: bool, secure: bool) -> None:
    """Show whether the local Kafka and Redis are running, their ports and pids."""
    from sessionstream.localstack import stack as localstack

    with command_errors():
        rows = localstack.status(_stack(secure))
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows]))
    else:
        for r in rows:
            state = f"running (pid {r.pid})" if r.running else "stopped"
            click.echo(f"{r.name:5}  {state:20}  port {r.port}  log {r.log}")
    if check and not all(r.running for r in rows):
        raise SystemExit(3)


@click.command("logs")
@click.option("-n", "--lines", default=40, show_default=True, help="Lines per log.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C stops).")
def logs_cmd(lines: int, follow: bool) -> None:
    """Print the tail of the Kafka and Redis logs."""
    from sessionstream.localstack import stack as localstack

    with command_errors(), suppress(KeyboardInterrupt):
        localstack.logs(_stack(), _echo, lines=lines, follow=follow)


@click.group("topics")
def topics_group() -> None:
    """Manage the tenant's Kafka topics."""


@topics_group.command("ensure")
@click.option("--tenant", help=f"Tenant (default: {Env.TENANT} or 'default').")
@click.option("--partitions", type=int,
              help=f"Partitions (default: {Env.PARTITIONS} or 12).")
@click.option("--replication-factor", type=int,
              help=f"Replicas (default: {Env.REPLICATION_FACTOR} or 1).")
@click.option("--bootstrap",
              help=f"Kafka bootstrap servers (default: {Env.KAFKA_BOOTSTRAP}).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def topics_ensure_cmd(tenant: str | None, partitions: int | None,
                      replication_factor: int | None, bootstrap: str | None,
                      as_json: bool) -> None:
    """Create the events and dead-letter topics, or check that existing ones are safe."""
    import dataclasses

    from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics

    with command_errors():
        base = settings()
        overrides: dict[str, object] = {}
        if tenant:
            overrides["tenant"] = tenant
        if partitions:
            overrides["partitions"] = partitions
        if replication_factor:
            overrides["replication_factor"] = replication_factor
        if bootstrap:
            overrides["kafka_bootstrap"] = bootstrap
        chosen = dataclasses.replace(base, **overrides)  # type: ignore[arg-type]
        results = ensure_topics(admin_client(chosen.kafka_bootstrap, chosen.kafka_security()),
                               tenant_topics(chosen))
    if as_json:
        click.echo(json.dumps([{**asdict(r), "config": dict(r.config)} for r in results]))
    else:
        for r in results:
            click.echo(f"{r.name}: {r.action}, {r.partitions} partitions, "
                       + ", ".join(f"{k}={v}" for k, v in r.config.items()))


@click.command("demo")
@click.option("--agents", default=4, show_default=True, help="Agent processes.")
@click.option("--sessions", default=12, show_default=True, help="Simulated sessions.")
@click.option("--turns", default=3, show_default=True, help="Turns per session.")
@click.option("--crash-rate", default=0.1, show_default=True,
              help="Probability that an agent process dies mid-turn (its session is resumed).")
@click.option("--seed", default=0, show_default=True, help="Random seed of the simulation.")
@click.option("--timeout", "timeout_s", default=180.0, show_default=True,
              help="Seconds to wait for the projections to catch up.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def demo_cmd(agents: int, sessions: int, turns: int, crash_rate: float, seed: int,
             timeout_s: float, as_json: bool) -> None:
    """End to end: a simulated agent fleet writes sessions to Kafka, the projection
    worker folds them into Redis, and the projections are read back from Redis.

    Needs the local servers (`sessionstream up`); `make demo` starts them.
    """
    import json

    from sessionstream.cli.memory import DemoHarnessMemory
    from sessionstream.streams.demo import run_demo

    if not 0.0 <= crash_rate < 1.0:
        raise click.BadParameter("must be in [0, 1)", param_hint="--crash-rate")
    with command_errors():
        s = settings()
        result = run_demo(s, agents=agents, sessions=sessions, turns=turns,
                          crash_rate=crash_rate, seed=seed, timeout_s=timeout_s,
                          echo=_echo, memory=DemoHarnessMemory(s, _echo))
    if as_json:
        click.echo(json.dumps({"fleet": result.fleet, "sessions": result.sessions,
                               "caught_up_seconds": result.caught_up_seconds,
                               "compaction": result.compaction,
                               "deletion": result.deletion}, indent=2))
        return
    click.echo(f"\nprojections read back from Redis ({len(result.sessions)} sessions, "
               f"caught up {result.caught_up_seconds:.1f}s after the fleet finished):")
    click.echo(f"{'session':<18} {'seq':>5} {'status':<11} {'turns':<28} {'tools':>5} "
               f"{'surface':>7} {'tokens':>7} {'rejected':>8}  compactions")
    for row in result.sessions:
        turns_text = ",".join(f"{k}={v}" for k, v in sorted(row["turns"].items()))
        click.echo(f"{row['session_id']:<18} {row['as_of_seq']:>5} {row['status'] or '-':<11} "
                   f"{turns_text:<28} {row['tool_results']:>5} {row['surface_messages']:>7} "
                   f"{row['surface_tokens'] or 0:>7} {row['rejections']:>8}  "
                   + (",".join(f"{k}={v}" for k, v in sorted(row["compactions"].items()))
                      or "-"))
    click.echo("\nmore: `sessionstream sessions`, `sessionstream views <session>`, "
               "`sessionstream diagnose <session>`, `sessionstream dashboard`")


COMMANDS: tuple[click.Command, ...] = (
    up_cmd, down_cmd, status_cmd, logs_cmd, topics_group, demo_cmd,
)


def register(cli_group: click.Group) -> None:
    """Add the infrastructure commands to ``cli_group`` (the ``sessionstream`` group)."""
    from sessionstream.cli.cluster import cluster_group
    from sessionstream.cli.registry import registry_group

    for command in COMMANDS:
        cli_group.add_command(command)
    cli_group.add_command(cluster_group)
    cli_group.add_command(registry_group)
