"""``log import`` / ``log export`` (offline) and ``log publish`` / ``log fetch`` (fleet).

Import reads a provider request body (OpenAI Chat, OpenAI Responses, Anthropic) and
writes a session log; export builds the provider body of a session's next request.
What a format cannot carry is printed as ``note:`` lines on stderr (or listed under
``report`` with ``--json``), never dropped silently. Bad input exits 2 naming the file
and the place; other failures exit 1.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import click

from sessionstream.cli.context import ExitCode, command_errors, die, settings
from sessionstream.cli.paths import output_option
from sessionstream.core.errors import LogFileError, SessionStreamError
from sessionstream.core.jsonvalue import MAX_DEPTH
from sessionstream.core.providers.common import APIS

BAD_INPUT = ExitCode.BAD_INPUT

_API = click.Choice(APIS)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _notes(notes: Any, as_json: bool) -> list[dict[str, Any]]:
    out = [n.to_json() for n in notes]
    if not as_json:
        for n in out:
            seqs = f" (seq {','.join(map(str, n['seqs']))})" if n.get("seqs") else ""
            click.echo(f"note: {n['path'] or '/'}: {n['note']}{seqs}", err=True)
    return out


def _read_json(file: Path) -> Any:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        die(f"{file}: cannot read the file: {exc}", BAD_INPUT)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        die(f"{file}:{exc.lineno}: not valid JSON: {exc.msg} at column {exc.colno}",
             BAD_INPUT)
    except RecursionError:  # the parser recurses per level: far deeper than a log stores
        die(f"{file}: the JSON is nested too deeply to read (a session log stores at most "
            f"{MAX_DEPTH} levels)", BAD_INPUT)


def _load(file: Path) -> Any:
    from sessionstream.core.jsonl import read_jsonl

    try:
        return read_jsonl(file)
    except LogFileError as exc:
        die(str(exc), BAD_INPUT)


@click.command("import")
@click.option("--from", "api", type=_API, required=True, help="The provider format of FILE.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@output_option("Write the session log (JSONL) here, atomically; default: standard output.")
@click.option("--session-id", default=None, help="Session id (default: a new uuid).")
@click.option("--tenant", default="default", show_default=True, help="Tenant in session/start.")
@_JSON
def import_cmd(api: str, file: Path, output: Path | None, session_id: str | None,
               tenant: str, as_json: bool) -> None:
    """Import a provider conversation (a request body, or a list of its messages).

    System prompt, tools, model and other parameters are kept in session/start
    (``imported``); each assistant message becomes a step, each tool result a
    tool/call + tool/result. Fields the log has no place for are reported; a field of
    the wrong type or a body nested too deep exits 2 naming the JSON pointer.
    """
    from sessionstream.core.jsonl import dumps_line, write_jsonl
    from sessionstream.core.providers.convert import import_conversation
    from sessionstream.core.providers.errors import ConversationImportError

    body = _read_json(file)
    try:
        imported = import_conversation(api, body, session_id=session_id or str(uuid.uuid4()),
                                       source=str(file), tenant=tenant)
    except ConversationImportError as exc:
        die(str(exc), BAD_INPUT)
    except SessionStreamError as exc:  # a rule of the session refused the conversation
        die(f"{file}: cannot be written as a session: {exc}", BAD_INPUT)
    events = list(imported.events)
    if output is not None:
        write_jsonl(events, output)
    elif not as_json:
        for e in events:
            click.echo(dumps_line(e))
    report = _notes(imported.report, as_json)
    if as_json:
        summary: dict[str, Any] = {"session_id": events[0].session_id, "events": len(events),
                                   "output": None if output is None else str(output),
                                   "report": report}
        if output is None:
            summary["log"] = [e.to_json() for e in events]
        _print_json(summary)
    elif output is not None:
        click.echo(f"imported {len(events)} events as session {events[0].session_id}: "
                   f"wrote {output}")


@click.command("export")
@click.option("--to", "api", type=_API, required=True, help="The provider format to write.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@output_option("Write the request body (JSON) here, atomically; default: standard output.")
@_JSON
def export_cmd(api: str, file: Path, output: Path | None, as_json: bool) -> None:
    """Export FILE's session as the provider request body of its next model request."""
    from sessionstream.core.jsonl import atomic_write
    from sessionstream.core.providers.convert import export_session

    events = _load(file)
    try:
        built, notes = export_session(api, events)
    except SessionStreamError as exc:
        die(f"{file}: {exc}", BAD_INPUT)
    text = json.dumps(built.body, ensure_ascii=False, indent=2)
    if output is not None:
        with atomic_write(output) as out:
            out.write(text + "\n")
    report = _notes(notes, as_json)
    if as_json:
        _print_json({"api": api, "output": None if output is None else str(output),
                     "body": built.body if output is None else None, "report": report})
    elif output is None:
        click.echo(text)
    else:
        click.echo(f"exported session {events[0].session_id} as {api}: wrote {output}")


@click.command("publish")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--session-id", default=None, help="Session id in the fleet (default: new).")
@_JSON
def publish_cmd(file: Path, session_id: str | None, as_json: bool) -> None:
    """Write FILE's session to Kafka through a fenced writer, flushed before it returns."""
    from sessionstream.producers.transfer import publish
    from sessionstream.producers.writer import WriterConfig

    events = _load(file)

    def progress(done: int, total: int) -> None:
        if not as_json:
            click.echo(f"published {done}/{total} events", err=True)

    with command_errors():
        result = publish(WriterConfig.from_settings(settings()), events,
                         session_id=session_id, progress=progress)
    if as_json:
        _print_json(result.to_json())
        return
    for n in result.notes:
        click.echo(f"note: {n}", err=True)
    click.echo(f"published {result.events} events as session {result.session_id} "
               f"(epoch {result.epoch}, partition {result.partition}), flushed")


@click.command("fetch")
@click.argument("session")
@output_option("Write the session log (JSONL) here, atomically; default: standard output.")
@_JSON
def fetch_cmd(session: str, output: Path | None, as_json: bool) -> None:
    """Read SESSION back from Kafka through the admission rule, as a JSONL log."""
    from sessionstream.core.jsonl import dumps_line, write_jsonl
    from sessionstream.producers.transfer import fetch
    from sessionstream.producers.writer import WriterConfig

    with command_errors():
        events, rejected = fetch(WriterConfig.from_settings(settings()), session)
    if output is not None:
        write_jsonl(events, output)
    if as_json:
        _print_json({"session_id": session, "events": len(events), "rejected": rejected,
                     "output": None if output is None else str(output)})
        return
    if output is None:
        for e in events:
            click.echo(dumps_line(e))
    else:
        click.echo(f"fetched {len(events)} events of {session} ({rejected} rejected by the "
                   f"admission rule): wrote {output}")


def explain_provider(events: Any, api: str, as_json: bool) -> None:
    """``explain --provider``: every part of the built body and where it came from."""
    from sessionstream.core.providers.convert import export_session

    built, notes = export_session(api, events)
    if as_json:
        _print_json({"api": api, "parts": built.explain(),
                     "notes": [n.to_json() for n in notes]})
        return
    for part in built.explain():
        path = part.pop("path")
        click.echo(f"{path:28s} <- {json.dumps(part, ensure_ascii=False, sort_keys=True)}")
    _notes(notes, False)


def register(log_group: click.Group) -> None:
    for cmd in (import_cmd, export_cmd, publish_cmd, fetch_cmd):
        log_group.add_command(cmd)
