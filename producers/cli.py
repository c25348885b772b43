"""CLI commands of the producers package: ``fleet``, ``compact``, ``compact-file``.

``register(group)`` adds them to the ``sessionstream`` click group (the composition
root in ``sessionstream/cli.py`` calls it). Clients are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from producers.compaction_watch_cli import compactor_cmd
from sessionstream.errors import SessionStreamError


@click.command("fleet")
@click.option("--agents", "-n", default=4, show_default=True, help="Agent processes.")
@click.option("--sessions", "-m", default=20, show_default=True, help="Sessions to write.")
@click.option("--turns", "-t", default=3, show_default=True, help="Turns per session.")
@click.option("--crash-rate", "-r", default=0.0, show_default=True,
              help="Probability that a turn crashes its process mid-turn (0..1).")
@click.option("--seed", default=0, show_default=True, help="Random seed.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--no-progress", is_flag=True, help="No progress bar on stderr.")
def fleet_cmd(agents: int, sessions: int, turns: int, crash_rate: float, seed: int,
              as_json: bool, no_progress: bool) -> None:
    """Simulate a fleet of agents writing sessions; some crash and are resumed."""
    if not 0.0 <= crash_rate < 1.0:
        raise click.BadParameter("must be in [0, 1)", param_hint="--crash-rate")
    if agents < 1 or sessions < 1 or turns < 1:
        raise click.BadParameter("--agents, --sessions and --turns must be at least 1")
    from producers.fleet import run_fleet
    from producers.writer import WriterConfig
    from sessionstream.settings import Settings

    try:
        settings = Settings.from_env()
        _ensure_topics(settings)
        summary = run_fleet(
            WriterConfig.from_settings(settings), agents=agents, sessions=sessions,
            turns=turns, crash_rate=crash_rate, seed=seed, progress=not no_progress,
        )
    except SessionStreamError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
    else:
        click.echo(
            f"sessions {summary.sessions} (ok {summary.sessions_ok})  events appended "
            f"{summary.events_appended}, in log {summary.events_in_log}  rejections "
            f"{summary.rejections}  crashes {summary.crashes}  resumes {summary.resumes}  "
            f"{summary.seconds:.1f}s "
            f"({summary.events_appended / max(summary.seconds, 1e-9):.0f} events/s)"
        )
        for p in summary.problems[:20]:
            click.echo(f"problem: {p}", err=True)
    if summary.problems:
        raise SystemExit(1)


def _ensure_topics(settings: object) -> None:
    from producers.topics import admin_client, ensure_topics, tenant_topics

    ensure_topics(admin_client(settings.kafka_bootstrap), tenant_topics(settings))  # type: ignore[attr-defined, arg-type]


_TRIGGERS = ("auto", "manual", "pressure", "overflow")


def _budget(budget: int, keep_recent: int) -> Any:
    from sessionstream.compaction import Budget

    try:
        return Budget(tokens=budget, keep_recent=keep_recent)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _compaction_options(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    f = click.option("--keep-recent", default=4, show_default=True,
                     help="Surface nodes at the end that are never shadowed.")(f)
    f = click.option("--trigger", type=click.Choice(_TRIGGERS), default="manual",
                     show_default=True,
                     help="Why compact; 'auto' lets the policy decide from the budget.")(f)
    f = click.option("--budget", default=32_000, show_default=True,
                     help="Context budget in estimated tokens (pressure at 80%).")(f)
    return f


def _echo_report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    rng = (report.get("attempt") or {}).get("range") or {}
    where = (f" positions {rng['first_position']}..{rng['last_position']} "
             f"({len(rng['shadowed_seqs'])} nodes)" if rng else "")
    click.echo(f"{report['outcome']}:{where} surface tokens {report['surface_tokens_before']}"
               f" -> {report['surface_tokens_after']}"
               + (f"  reason: {report['reason']}" if report.get("reason") else ""))


@click.command("compact")
@click.argument("session_id")
@_compaction_options
def compact_cmd(session_id: str, budget: int, trigger: str, keep_recent: int,
                as_json: bool) -> None:
    """Run the compaction agent once on SESSION_ID (Kafka + Redis).

    Summarizes without the session's lease, then takes it only to append the
    lifecycle. Exit 0 when completed or not needed, 1 when failed or abandoned.
    """
    from producers.compactor import Compactor
    from producers.writer import WriterConfig
    from sessionstream.settings import Settings

    b = _budget(budget, keep_recent)
    try:
        cfg = WriterConfig.from_settings(Settings.from_env())
        report = Compactor(cfg, budget=b).compact(
            session_id, trigger=None if trigger == "auto" else trigger)
    except SessionStreamError as exc:
        raise click.ClickException(str(exc)) from exc
    _echo_report(report.to_json(), as_json)
    if report.outcome in ("failed", "abandoned"):
        raise SystemExit(1)


@click.command("compact-file")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the compacted JSONL log here (default: standard output).")
@_compaction_options
def compact_file_cmd(file: Path, output: Path | None, budget: int, trigger: str,
                     keep_recent: int, as_json: bool) -> None:
    """Compact a JSONL session file offline: appends the lifecycle to the log.

    With --json the report goes to standard output (so use -o for the log).
    """
    from sessionstream.compaction import compact_session
    from sessionstream.jsonl import dumps_line, read_jsonl, write_jsonl
    from sessionstream.session import Session
    from sessionstream.surface import token_estimate

    b = _budget(budget, keep_recent)
    try:
        session = Session.from_events(read_jsonl(file))
        before = token_estimate(session.derive_messages())
        read_seq = session.next_seq
        appended = compact_session(session, trigger=None if trigger == "auto" else trigger,
                                   budget=b)
    except SessionStreamError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    end = appended[-1].data if appended else {}
    summary = next((e.data for e in appended if e.type == "compaction/summary"), None)
    report = {
        "file": str(file), "outcome": end.get("outcome", "not-needed"),
        "reason": end.get("reason"), "read_seq": read_seq,
        "appended": [{"seq": e.seq, "type": e.type} for e in appended],
        "surface_tokens_before": before,
        "surface_tokens_after": token_estimate(session.derive_messages()),
        "attempt": None if summary is None else {"range": {
            "first_position": summary["first_position"],
            "last_position": summary["last_position"],
            "shadowed_seqs": list(summary["shadowed_seqs"])}},
    }
    if output is not None:
        write_jsonl(list(session.events), output)
    elif not as_json:
        for event in session.events:
            click.echo(dumps_line(event))
    if as_json or output is not None:
        _echo_report(report, as_json)
    if report["outcome"] in ("failed", "abandoned"):
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(fleet_cmd)
    group.add_command(compact_cmd)
    group.add_command(compact_file_cmd)
    group.add_command(compactor_cmd)
