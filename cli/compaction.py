"""Compaction options shared by the CLI, and the offline ``compact-file`` command.

``compact-file`` needs no server, so it belongs to the core CLI; the online
``compact`` and ``compactor`` commands (producers/) reuse the same options and report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from sessionstream.cli.context import bad_input, command_errors, settings
from sessionstream.cli.paths import output_option

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
    with command_errors():
        session = Session.from_events(read_jsonl(file))
        before = token_estimate(session.derive_messages())
        read_seq = session.next_seq
        appended = compact_session(session, trigger=None if trigger == "auto" else trigger,
                                   budget=b)
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


@click.group("compaction")
def compaction_group() -> None:
    """Inspect compaction attempts: the six questions each one answers
    (docs/compaction.md, "The six questions")."""


@compaction_group.command("report")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one object per attempt.")
def report_cmd(target: str, as_json: bool) -> None:
    """Answer the six questions for every compaction attempt of SESSION or FILE.

    TARGET is a JSONL session file (offline) or a session id, whose admitted log is read
    from the tenant's events topic (the same admission rule every reader applies; the
    read-back uses the writer's offset index in Redis). For each attempt: why it was
    triggered, the surface range, the shadowed nodes and tokens, the summarizer, the
    surface after it, what was kept meanwhile, and the gate's per-category counts, each
    with the seqs of its evidence. Exit 0 (also with no attempt); 2: bad input or
    unknown session; 1: a runtime failure; 3: a server unreachable.
    """
    from sessionstream.core.compaction.report import compaction_report
    from sessionstream.core.jsonl import read_jsonl

    path = Path(target)
    with command_errors():
        if path.is_file():
            events, source = read_jsonl(path), str(path)
        else:
            events, source = _live_log(target), "live"
    attempts = compaction_report(events)
    session_id = events[0].session_id
    if as_json:
        click.echo(json.dumps({"session_id": session_id, "source": source,
                               "attempts": [a.to_json() for a in attempts]},
                              indent=2, ensure_ascii=False))
        return
    click.echo(f"session {session_id} ({source}): {len(attempts)} compaction attempt(s)")
    for a in attempts:
        click.echo("")
        for line in a.lines():
            click.echo(line)


def _live_log(session_id: str) -> list[Any]:
    """The session's admitted log from Kafka; exits 2 when the topic holds none of it."""
    from sessionstream.producers.writer import WriterConfig, read_log

    s = settings()
    cfg = WriterConfig.from_settings(s, key_prefix=s.key_prefix, topic=s.events_topic)
    rb = read_log(cfg, session_id)
    if not rb.admitted:
        raise bad_input(f"{session_id!r} is neither a file nor a session with records in "
                        f"tenant {s.tenant!r}'s events topic {s.events_topic} "
                        "(`sessionstream sessions` lists known ids)")
    return list(rb.admitted)
