"""The ``sessionstream`` command: the composition root (edges are imported lazily).

The offline commands work on a JSONL session file and need no server. Bad input
prints ``FILE:LINE: what is wrong`` on stderr and exits 2; other errors exit 1, an
unreachable server 3 (one map for every command: ``sessionstream.cli.context``);
nothing is written unless the command succeeds (outputs are written atomically).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from sessionstream._version import __version__
from sessionstream.cli.context import ExitCode, GuardedGroup, command_errors, die
from sessionstream.cli.paths import output_option
from sessionstream.core.errors import LogFileError
from sessionstream.core.events import Event
from sessionstream.core.providers.common import APIS

BAD_INPUT = ExitCode.BAD_INPUT

_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
_OUT = output_option(
    "Write the resulting JSONL log here (atomically) instead of standard output; "
    "the folder must exist.")


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sessionstream")
def main() -> None:
    """sessionstream: the session store for fleets of AI agents.

    The offline commands below read a JSONL session file (one event envelope per
    line, seq 0, 1, 2…) and need no Kafka or Redis.
    """


def _load(file: Path) -> list[Event]:
    from sessionstream.core.jsonl import read_jsonl

    return read_jsonl(file)


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _write_log(events: list[Event], output: Path | None) -> None:
    from sessionstream.core.jsonl import dumps_line, write_jsonl

    if output is None:
        for event in events:
            click.echo(dumps_line(event))
    else:
        write_jsonl(events, output)


# -- log ----------------------------------------------------------------------------------

@main.group("log")
def log_group() -> None:
    """Check and convert session log files."""


@log_group.command("validate")
@_FILE
@_JSON
def validate_cmd(file: Path, as_json: bool) -> None:
    """Check every line of FILE: JSON, envelope, data, catalog, seqs and session rules.

    Exit 0 when the log is valid, 2 with FILE:LINE: reason at the first problem.
    """
    from sessionstream.core.jsonl import read_jsonl

    try:
        events = read_jsonl(file)
    except LogFileError as exc:
        if as_json:
            _print_json({"file": str(file), "ok": False, "line": exc.line, "reason": exc.reason})
        die(str(exc), BAD_INPUT)
    types: dict[str, int] = {}
    for e in events:
        types[e.type] = types.get(e.type, 0) + 1
    summary = {"file": str(file), "ok": True, "session_id": events[0].session_id,
               "events": len(events), "last_seq": events[-1].seq, "types": types}
    if as_json:
        _print_json(summary)
    else:
        click.echo(f"{file}: ok, session {events[0].session_id}, {len(events)} events "
                   f"(seq 0..{events[-1].seq})")


# -- reading commands ---------------------------------------------------------------------

@main.command("messages")
@_FILE
@_JSON
def messages_cmd(file: Path, as_json: bool) -> None:
    """Print the model messages derive_messages() builds from FILE, with their source seqs."""
    from sessionstream.core.session import Session

    with command_errors():
        messages = Session.from_events(_load(file)).derive_messages()
    if as_json:
        _print_json([m.to_json() for m in messages])
        return
    for m in messages:
        seqs = ",".join(str(s) for s in m.seqs)
        head = f"[{seqs}] {m.role.value} ({m.kind.value})"
        if m.call_id is not None:
            head += f" call {m.call_id} {m.status}"
        out = m.to_json()
        content = out["content"]
        click.echo(f"{head}: {content if isinstance(content, str) else _compact(content)}")
        for call in out.get("tool_calls", ()):
            click.echo(f"    -> {call['call_id']} {call['name']}({_compact(call['arguments'])})")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@main.command("projections")
@_FILE
@_JSON
@click.option("--key", "keys", multiple=True, help="Only this projection (repeatable).")
def projections_cmd(file: Path, as_json: bool, keys: tuple[str, ...]) -> None:
    """Fold FILE through every projection unit and print the views (one as_of_seq)."""
    from sessionstream.core.projections import default_registry

    with command_errors():
        snapshot = default_registry().fold(_load(file))
        views = snapshot.views()
    unknown = [k for k in keys if k not in views]
    if unknown:
        die(f"error: unknown projection {', '.join(unknown)} "
             f"(known: {', '.join(views)})", BAD_INPUT)
    if keys:
        views = {k: views[k] for k in keys}
    if as_json:
        _print_json({"as_of_seq": snapshot.as_of_seq, "views": views})
        return
    click.echo(f"as_of_seq {snapshot.as_of_seq}")
    for key, view in views.items():
        click.echo(f"{key}: {json.dumps(view, ensure_ascii=False, sort_keys=True)}")


@main.command("explain")
@_FILE
@_JSON
@click.option("--scope", default=None, help="Agent scope of the request (default: global).")
@click.option("--provider", "provider", default=None,
              type=click.Choice(APIS),
              help="Explain the provider request body instead: every JSON path of the body "
                   "and its source, plus what the format could not carry.")
def explain_cmd(file: Path, as_json: bool, scope: str | None, provider: str | None) -> None:
    """Explain the next model request built from FILE: where every part comes from.

    The header is the last request/header of the log; messages are the surface with
    their seqs; context snapshots are named by id, and a compaction summary lists
    the seqs it replaced. No prompt sections are registered offline, so the system
    prompt is empty (an imported session's is in its session/start). With
    --provider the body of that API is built and each of its parts explained.
    """
    if provider is not None:
        from sessionstream.cli.harness import explain_provider

        with command_errors():
            explain_provider(_load(file), provider, as_json)
        return
    from sessionstream.core.privacy import reconstructability
    from sessionstream.core.request import (
        PromptRegistry,
        assemble,
        context_snapshot_ids,
        explain,
        header_from_event,
        replaced_seqs,
    )
    from sessionstream.core.session import Session

    with command_errors():
        events = _load(file)
        header = next((e for e in reversed(events) if e.type == "request/header"), None)
        if header is None:
            die(f"{file}: no request/header in the log, so nothing says how the next "
                 "request is routed; append one first", BAD_INPUT)
        request = assemble(
            Session.from_events(events).derive_messages(), PromptRegistry(), scope,
            header=header_from_event(header),
            snapshot_ids=context_snapshot_ids(events),
            replaced=replaced_seqs(events),
        )
        parts = explain(request)
        lost = reconstructability(events)
        if lost.lost:  # seed §4.6.1: say honestly what can no longer be rebuilt
            parts.append({"part": "reconstructability", **lost.to_json()})
    if as_json:
        _print_json(parts)
        return
    for part in parts:
        if part["part"] == "reconstructability":
            by_class = sorted({x["data_class"] for x in part["lost"]})
            click.echo(f"NOT fully reconstructable: {len(part['lost'])} source(s) deleted "
                       f"({', '.join(by_class)}; seqs "
                       f"{','.join(str(x['seq']) for x in part['lost'][:20])}); the surface "
                       "above rebuilds with placeholders")
            continue
        click.echo(_explain_line(part))


def _explain_line(part: dict[str, Any]) -> str:
    """One part of explain() as a line; messages name their seqs (and what they replace)."""
    if part["part"] != "message":
        rest = {k: v for k, v in part.items() if k != "part"}
        return f"{part['part']:8s} {_compact(rest)}"
    seqs = ",".join(map(str, part["seqs"]))
    line = f"message  #{part['index']} {part['role']} ({part['kind']}) from seq {seqs}"
    if part.get("replaces") is not None:
        line += f", replaces seqs {','.join(map(str, part['replaces']))}"
    if part.get("snapshot_id") is not None:
        line += f", snapshot {part['snapshot_id']}"
    if part.get("tool_calls"):
        line += f", calls {','.join(part['tool_calls'])}"
    if part.get("call_id") is not None:
        line += f", result of {part['call_id']}"
    return line


# -- writing commands ---------------------------------------------------------------------

@main.command("recover")
@_FILE
@_OUT
@_JSON
def recover_cmd(file: Path, output: Path | None, as_json: bool) -> None:
    """Close what a crash left open in FILE: print the repair events, or write the log.

    Repairs are only what can be proven (turn/end interrupted, compaction/end
    abandoned); a tool result is never invented. With -o, OUT gets the whole
    log with the repairs appended.
    """
    from sessionstream.core.recovery import recover
    from sessionstream.core.session import Session

    with command_errors():
        events = _load(file)
        session = Session.from_events(events)
        for draft in recover(session):
            session.append(draft)
        repairs = list(session.events[len(events):])
        if output is not None:
            _write_log(list(session.events), output)
    if as_json:
        _print_json({"repairs": [e.to_json() for e in repairs], "output": _name(output)})
    elif output is not None or not repairs:
        _report(repairs, output)
    else:
        for e in repairs:
            click.echo(json.dumps(e.to_json(), ensure_ascii=False))


def _report(repairs: list[Event], output: Path | None) -> None:
    if not repairs:
        click.echo("nothing to repair: no open turn, step, tool call or compaction")
    for e in repairs:
        click.echo(f"seq {e.seq} {e.type} {json.dumps(e.to_json()['data'], sort_keys=True)}")
    if output is not None:
        click.echo(f"wrote {output}")


def _name(path: Path | None) -> str | None:
    return None if path is None else str(path)


@main.command("fork")
@_FILE
@click.option("--at", "at", type=click.IntRange(min=1), default=None,
              help="Seed length: the child starts from the parent's events with seq < AT. "
                   "Default: the longest stable prefix (no open turn or compaction).")
@click.option("--child-id", default=None, help="Session id of the child "
              "(default: <parent>-fork-<AT>).")
@_OUT
@_JSON
def fork_cmd(file: Path, at: int | None, child_id: str | None, output: Path | None,
             as_json: bool) -> None:
    """Fork FILE's session from a stable prefix into a new child session log.

    The child's session/start records parent_session, seed_length and
    delegation_depth. Without -o the child log is printed as JSONL.
    """
    from sessionstream.core.fork import fork, stable_tail

    with command_errors():
        events = _load(file)
        seed = at if at is not None else stable_tail(events)
        child = fork(events, child_id or f"{events[0].session_id}-fork-{seed}", at=seed)
        child_events = list(child.events)
        if output is None and not as_json:
            _write_log(child_events, None)
            return
        if output is not None:
            _write_log(child_events, output)
    summary = {"child_id": child.session_id, "parent": events[0].session_id,
               "seed_length": seed, "events": len(child_events), "output": _name(output)}
    if as_json:
        _print_json(summary)
    else:
        click.echo(f"forked {summary['parent']} at seed length {seed} into "
                   f"{child.session_id} ({len(child_events)} events): wrote {output}")


def _register_offline_extras() -> None:
    from sessionstream.cli.compaction import compact_file_cmd, compaction_group
    from sessionstream.cli.harness import register as register_harness

    main.add_command(compact_file_cmd)
    main.add_command(compaction_group)
    register_harness(log_group)


def _register_edges() -> None:
    """Add the commands that talk to servers; their modules import clients lazily."""
    from sessionstream.cli import acl as cli_acl
    from sessionstream.cli import dashboard as dashboard_cli
    from sessionstream.cli import diagnose as diagnose_cli
    from sessionstream.cli import fleet as producers_cli
    from sessionstream.cli import governance as cli_governance
    from sessionstream.cli import infra as cli_infra
    from sessionstream.cli import memory as cli_memory
    from sessionstream.cli import streams as streams_cli

    cli_infra.register(main)
    cli_governance.register(main)
    cli_acl.register(main)
    producers_cli.register(main)
    streams_cli.register(main)
    dashboard_cli.register(main)
    diagnose_cli.register(main)
    cli_memory.register(main)


_register_offline_extras()
_register_edges()

if __name__ == "__main__":
    main()
