"""``sessionstream diagnose``: read a session's facts, hand them to the pure diagnosis.

Live (``SESSION``): the admitted log and its rejections from Kafka (``read_log``, the
same admission rule every reader applies), the projection row, its unit state
versions and quarantine, the session index and the writer's lease/offset index from
Redis. Offline (``--file FILE``): the log, surface and request checks only.
Exit 0: no problem; 1: a problem found; 2: bad input; 3: a server unreachable.
Output names ids, seqs, types and counts, never message content.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from sessionstream import redisconn
from sessionstream.cli.context import (
    CommandError,
    ExitCode,
    command_errors,
    redis_refusal,
    refused,
    settings,
    unreachable,
)
from sessionstream.core.diagnosis import (
    MATRIX,
    DiagnosisFacts,
    Finding,
    RejectedEvent,
    Status,
    StoredProjection,
    diagnose,
    exit_code,
    implicated,
)
from sessionstream.core.rows import KeySpace, MetaFields, SessionRow, generation_of
from sessionstream.core.settings import Settings

BAD_INPUT = ExitCode.BAD_INPUT
_MARK = {Status.OK: "ok     ", Status.WARNING: "WARNING", Status.PROBLEM: "PROBLEM"}


def offline_facts(file: Path) -> DiagnosisFacts:
    """The facts a JSONL file holds: the events only (no rejections, no projections)."""
    from sessionstream.core.jsonl import read_jsonl

    events = read_jsonl(file)
    return DiagnosisFacts(events[0].session_id, events, source=str(file))


def live_facts(settings: Settings, session_id: str, *, prefix: str | None = None,
               topic: str | None = None, timeout: float = 30.0) -> DiagnosisFacts | None:
    """Read everything the diagnosis needs from Kafka and Redis; None: unknown session."""
    import redis

    from sessionstream.core.projections import default_registry
    from sessionstream.producers.writer import WriterConfig, read_log

    prefix = prefix or settings.key_prefix
    keys = KeySpace(settings.tenant, prefix)
    cfg = WriterConfig.from_settings(settings, key_prefix=prefix,
                                     topic=topic or settings.events_topic)
    rb = read_log(cfg, session_id, timeout=timeout)
    if not rb.admitted and not rb.rejections and not rb.corrupt:
        return None
    r = redisconn.from_settings(settings, decode_responses=True)
    try:
        gen = generation_of(r.get(keys.generation()))
        row: dict[str, str] = r.hgetall(keys.session_row(session_id, gen))
        stored = None
        if row:
            meta = SessionRow.meta(row)
            stored = StoredProjection(
                generation=gen, as_of_seq=SessionRow.as_of_seq(row),
                state_versions=SessionRow.state_versions(row),
                quarantine=meta.get(MetaFields.QUARANTINE),
                in_session_index=r.zscore(keys.sessions_index(gen), session_id) is not None,
            )
        log_index = bool(r.exists(keys.log_index(session_id)))
        lease_held = bool(r.exists(keys.lease(session_id)))
    except redis.RedisError as exc:
        from sessionstream.producers.errors import redacted_url

        at = f" at {redacted_url(settings.redis_url)}"
        if refused(exc) is not None:  # it answered: a credential or a permission
            raise CommandError(redis_refusal(exc, at)) from exc
        raise unreachable(f"cannot read Redis{at}: {exc}") from exc
    finally:
        r.close()
    return DiagnosisFacts(
        session_id, rb.admitted,
        rejections=[RejectedEvent(x.seq, x.event_id, x.writer_id, x.epoch, x.verdict.value,
                                  x.offset) for x in rb.rejections],
        corrupt_offsets=[off for off, _ in rb.corrupt],
        projections_checked=True, stored=stored, code_versions=default_registry().versions(),
        log_index=log_index, lease_held=lease_held, unopened=rb.unopened,
    )


def report_json(facts: DiagnosisFacts, findings: list[Finding]) -> dict[str, Any]:
    return {
        "session_id": facts.session_id, "source": facts.name,
        "projections_checked": facts.projections_checked,
        "exit": exit_code(findings), "findings": [f.to_json() for f in findings],
        "matrix": [{"key": k, "symptom": MATRIX[k][0], "root_causes": MATRIX[k][1],
                    "first_evidence": MATRIX[k][2]} for k in implicated(findings)],
    }


def render_text(facts: DiagnosisFacts, findings: list[Finding]) -> list[str]:
    lines = [f"session {facts.session_id} ({facts.source or 'live'})"]
    layer = None
    for f in findings:
        if f.layer is not layer:
            layer = f.layer
            lines.append(f"\n{layer.value}")
        lines.append(f"  {_MARK[f.status]} {f.check}: {f.summary}")
        if f.status is not Status.OK and f.next:
            lines.append(f"          next: {f.next}")
    if not facts.projections_checked:
        lines.append("\nprojections\n  (not checked offline: run `sessionstream diagnose "
                     "SESSION` against the servers)")
    hits = implicated(findings)
    if hits:
        lines.append("\nfailure matrix (docs/operations.md)")
        for k in hits:
            symptom, causes, _ = MATRIX[k]
            lines.append(f"  - {symptom}: {causes}")
    problems = sum(f.status is Status.PROBLEM for f in findings)
    warnings = sum(f.status is Status.WARNING for f in findings)
    lines.append(f"\n{problems} problem(s), {warnings} warning(s)")
    return lines


@click.command("diagnose")
@click.argument("session_id", required=False)
@click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Diagnose a JSONL session file offline (log, surface and request checks).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def diagnose_cmd(session_id: str | None, file: Path | None, as_json: bool) -> None:
    """Walk a session through the failure-diagnosis order and report each check.

    Raw events (readback, rejections, open tail, format) → surface (tool pairing,
    compaction evidence) → request (header, context snapshots) → projections
    (watermark, state versions, quarantine, indexes). Each check is ok, warning or
    problem, with its evidence and the next command. Exit 0: no problem; 1: problems;
    2: bad input; 3: a server unreachable. Prints ids, seqs, types and counts, never
    message content.
    """
    if (session_id is None) == (file is None):
        click.echo("error: give exactly one of SESSION or --file FILE", err=True)
        sys.exit(BAD_INPUT)
    with command_errors():
        if file is not None:
            facts = offline_facts(file)
        else:
            assert session_id is not None
            found = live_facts(settings(), session_id)
            if found is None:
                click.echo(f"error: session {session_id!r} has no records in tenant "
                           f"{settings().tenant!r}'s events topic "
                           "(`sessionstream sessions` lists known ids)", err=True)
                sys.exit(BAD_INPUT)
            facts = found
    findings = diagnose(facts)
    if as_json:
        click.echo(json.dumps(report_json(facts, findings), indent=2, ensure_ascii=False))
    else:
        for line in render_text(facts, findings):
            click.echo(line)
    sys.exit(exit_code(findings))


def register(group: click.Group) -> None:
    group.add_command(diagnose_cmd)
