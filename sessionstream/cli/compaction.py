"""Compaction options shared by the CLI, and the offline ``compact-file`` command.

``compact-file`` needs no server, so it belongs to the core CLI; the online
``compact`` and ``compactor`` commands (producers/) reuse the same options and report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from sessionstream.cli.paths import output_option
from sessionstream.core.errors import SessionStreamError

_TRIGGERS = ("auto", "manual", "pressure", "overflow")


def budget_option(budget: int, keep_recent: int) -> Any:
    from sessionstream.core.compaction import Budget

    try:
        return Budget(tokens=budget, keep_recent=keep_recent)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def compaction_options(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    f = click.option("--keep-recent", default=4, show_default=True,
                     help="Surface nodes at the end that are never shadowed.")(f)
    f = click.option("--trigger", type=click.Choice(_TRIGGERS), default="manual",
                     show_default=True,
                     help="Why compact; 'auto' lets the policy decide from the budget.")(f)
    f = click.option("--budget", default=32_000, show_default=True,
                     help="Context budget in estimated tokens (pressure at 80%).")(f)
    return f


def echo_report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    rng = (report.get("attempt") or {}).get("range") or {}
    where = (f" positions {rng['first_position']}..{rng['last_position']} "
             f"({len(rng['shadowed_seqs'])} nodes)" if rng else "")
    click.echo(f"{report['outcome']}:{where} surface tokens {report['surface_tokens_before']}"
               f" -> {report['surface_tokens_after']}"
               + (f"  reason: {report['reason']}" if report.get("reason") else ""))


@click.command("compact-file")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@output_option("Write the compacted JSONL log here (default: standard output); "
               "the folder must exist.")
@compaction_options
def compact_file_cmd(file: Path, output: Path | None, budget: int, trigger: str,
                     keep_recent: int, as_json: bool) -> None:
    """Compact a JSONL session file offline: appends the lifecycle to the log.

    With --json the report goes to standard output (so use -o for the log).
    """
    from sessionstream.core.compaction import compact_session
    from sessionstream.core.jsonl import dumps_line, read_jsonl, write_jsonl
    from sessionstream.core.session import Session
    from sessionstream.core.surface import token_estimate

    b = budget_option(budget, keep_recent)
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
        echo_report(report, as_json)
    if report["outcome"] in ("failed", "abandoned"):
        raise SystemExit(1)
