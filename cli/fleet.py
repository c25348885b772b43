"""CLI commands of the producers package: ``fleet``, ``compact``, ``compactor``.

``register(group)`` adds them to the ``sessionstream`` click group (the composition
root in ``cli/main.py`` calls it). Clients are imported inside the commands.
"""

from __future__ import annotations

import json

import click

from sessionstream.cli.compaction import budget_option, compaction_options, echo_report
from sessionstream.cli.context import command_errors, settings
from sessionstream.core.settings import Settings


@click.command("fleet")
@click.option("--agents", "-n", default=4, show_default=True, help="Agent processes.")
@click.option("--sessions", "-m", default=20, show_default=True, help="Sessions to write.")
@click.option("--turns", "-t", default=3, show_default=True, help="Turns per session.")
@click.option("--crash-rate", "-r", default=0.0, show_default=True,
              help="Probability that a turn crashes its process mid-turn (0..1).")
@click.option("--start-crash-rate", default=0.0, show_default=True,
              help="Probability that a session's create() crashes its process (0..1).")
@click.option("--seed", default=0, show_default=True, help="Random seed.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--no-progress", is_flag=True, help="No progress bar on stderr.")
def fleet_cmd(agents: int, sessions: int, turns: int, crash_rate: float,
              start_crash_rate: float, seed: int, as_json: bool, no_progress: bool) -> None:
    """Simulate a fleet of agents writing sessions; some crash and are resumed."""
    if not 0.0 <= crash_rate < 1.0:
        raise click.BadParameter("must be in [0, 1)", param_hint="--crash-rate")
    if not 0.0 <= start_crash_rate <= 1.0:
        raise click.BadParameter("must be in [0, 1]", param_hint="--start-crash-rate")
    if agents < 1 or sessions < 1 or turns < 1:
        raise click.BadParameter("--agents, --sessions and --turns must be at least 1")
    from sessionstream.producers.fleet import run_fleet
    from sessionstream.producers.writer import WriterConfig

    with command_errors():
        s = settings()
        _ensure_topics(s)
        summary = run_fleet(
            WriterConfig.from_settings(s), agents=agents, sessions=sessions,
            turns=turns, crash_rate=crash_rate, start_crash_rate=start_crash_rate, seed=seed,
            progress=not no_progress,
        )
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
    else:
        click.echo(
            f"sessions {summary.sessions} (ok {summary.sessions_ok})  events appended "
            f"{summary.events_appended}, in log {summary.events_in_log}  rejections "
            f"{summary.rejections}  crashes {summary.crashes} (in create {summary.start_crashes})  "
            f"resumes {summary.resumes}  restarts {summary.restarts}  {summary.seconds:.1f}s "
            f"({summary.events_appended / max(summary.seconds, 1e-9):.0f} events/s)"
        )
        for p in summary.problems[:20]:
            click.echo(f"problem: {p}", err=True)
    if summary.problems:
        raise SystemExit(1)


def _ensure_topics(s: Settings) -> None:
    from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics

    ensure_topics(admin_client(s.kafka_bootstrap, s.kafka_security()), tenant_topics(s))


@click.command("compact")
@click.argument("session_id")
@compaction_options
def compact_cmd(session_id: str, budget: int, trigger: str, keep_recent: int,
                as_json: bool) -> None:
    """Run the compaction agent once on SESSION_ID (Kafka + Redis).

    Summarizes without the session's lease, then takes it only to append the
    lifecycle. Exit 0 when completed or not needed, 1 when failed or abandoned.
    """
    from sessionstream.producers.compactor import Compactor
    from sessionstream.producers.writer import WriterConfig

    b = budget_option(budget, keep_recent)
    with command_errors():
        cfg = WriterConfig.from_settings(settings())
        report = Compactor(cfg, budget=b).compact(
            session_id, trigger=None if trigger == "auto" else trigger)
    echo_report(report.to_json(), as_json)
    if report.outcome in ("failed", "abandoned"):
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(fleet_cmd)
    group.add_command(compact_cmd)
