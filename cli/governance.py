"""CLI of data governance: ``delete``, ``hold``, ``retention run``, ``keys rotate|retire``.

Every command works on the tenant of the settings and records their principal as who
acted. Exit codes (``sessionstream.cli.context``): 0 done, 1 refused or failed (a legal
hold, a deletion not yet complete), 2 bad arguments or an unknown session, 3 Redis or
Kafka unreachable.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from sessionstream.cli.context import ExitCode, command_errors, die, settings
from sessionstream.core.settings import Env

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
_REASON = click.option("--reason", default="", help="Why (recorded in the audit event).")


def _governance() -> Any:
    from sessionstream import redisconn
    from sessionstream.governance.service import Governance
    from sessionstream.governance.wiring import content_cipher, key_store
    from sessionstream.producers.audit import WriterAuditLog
    from sessionstream.producers.writer import WriterConfig

    s = settings()
    client = redisconn.from_settings(s, decode_responses=True)
    store = key_store(s, client)
    # Deletion and holds open sessions as writers: the cipher is needed even for a tenant
    # that opted out of encryption (older sealed content), and it seals nothing new here.
    cfg = WriterConfig.from_settings(s, cipher=content_cipher(s, store))
    return Governance(cfg, store, client, audit=WriterAuditLog(cfg), principal=s.principal,
                      retention=s.retention, memory=_memory_cascade(s, store, client))


def _memory_cascade(s: Any, store: Any, client: Any) -> Any:
    """Long-term memory's part of a deletion (docs/adr/0030): over the tenant's memory
    topic, when it exists (a tenant that never ran `topics ensure` since has none)."""
    from sessionstream.integrations.memory import FleetBackend, LineageCascade

    return LineageCascade(FleetBackend(s, store, encryption=s.encryption))


def _print(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


@click.command("delete")
@click.argument("session")
@click.option("--class", "classes", multiple=True, default=("all",), show_default=True,
              type=click.Choice(["raw", "surface", "business", "reasoning", "all"]),
              help="Which data classes to delete (repeatable).")
@click.option("--complete", is_flag=True,
              help="Then run `keys retire`: no copy of the keys taken before (a backup, "
                   "an AOF, an RDB) opens anything afterwards.")
@_REASON
@_JSON
def delete_cmd(session: str, classes: tuple[str, ...], complete: bool, reason: str,
               as_json: bool) -> None:
    """Delete a session's content: crypto-shred its data keys, purge Redis and blobs.

    The log stays (it is immutable): order, ids, pairing and the audit trail remain
    readable; the content of the chosen classes reads as "[content deleted]" everywhere,
    in every replica and backup once the deletion is complete (`--complete`, or the
    next `keys retire` / `retention run`). Refused under a legal hold. Does not undo
    side effects of the session's tools in other systems.
    """
    from sessionstream.governance.service import parse_classes

    with command_errors():
        report = _governance().delete(session, parse_classes(classes), reason=reason,
                                      complete=complete)
    if as_json:
        _print(report.to_json())
        if report.retirement is not None and not report.retirement.complete:
            sys.exit(ExitCode.FAILED)
        return
    click.echo(f"deleted {', '.join(report.classes)} of session {session}: "
               f"audit event at seq {report.audit_seq}; {report.redis_keys_deleted} Redis "
               f"keys, {report.feed_entries_deleted} change-feed entries and "
               f"{report.attachments_deleted} attachments purged")
    if report.memory is not None and (report.memory.forgotten or report.memory.narrowed):
        click.echo(f"long-term memory: {len(report.memory.forgotten)} version(s) derived "
                   f"only from it forgotten, {len(report.memory.narrowed)} no longer cite "
                   f"it, in {len(report.memory.namespaces)} namespace(s)")
    if report.operation_ids:
        click.echo(f"operation ids to follow up: {', '.join(report.operation_ids)}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"note: {report.note}")
    if report.retirement is None:
        click.echo("deletion complete at the next `sessionstream keys retire` (or "
                   "`retention run`); until then a copy of the keys taken before opens it")
    else:
        _echo_retirement(report.retirement)
        if not report.retirement.complete:
            sys.exit(ExitCode.FAILED)


@click.group("hold")
def hold_group() -> None:
    """Legal holds: while one applies, deletion and retention of the session refuse."""


@hold_group.command("place")
@click.argument("session", required=False)
@click.option("--tenant", "tenant_wide", is_flag=True, help="Hold the whole tenant.")
@click.option("--reason", required=True, help="Why (case number, request).")
@_JSON
def hold_place(session: str | None, tenant_wide: bool, reason: str, as_json: bool) -> None:
    """Place a hold on SESSION (audited in its log) or on the whole tenant."""
    if (session is None) == (not tenant_wide):
        die("error: name a SESSION or pass --tenant (one of them)", 2)
    with command_errors():
        hold = _governance().place_hold(None if tenant_wide else session, reason=reason)
    if as_json:
        _print(hold.to_json())
    else:
        click.echo(f"hold placed on {hold.scope}")


@hold_group.command("release")
@click.argument("session", required=False)
@click.option("--tenant", "tenant_wide", is_flag=True, help="Release the tenant's hold.")
@_REASON
@_JSON
def hold_release(session: str | None, tenant_wide: bool, reason: str, as_json: bool) -> None:
    """Release a hold (audited in the session's log)."""
    if (session is None) == (not tenant_wide):
        die("error: name a SESSION or pass --tenant (one of them)", 2)
    with command_errors():
        hold = _governance().release_hold(None if tenant_wide else session, reason=reason)
    if hold is None:
        die("error: no hold to release there")
    if as_json:
        _print(hold.to_json())
    else:
        click.echo(f"hold released on {hold.scope}")


@hold_group.command("list")
@_JSON
def hold_list(as_json: bool) -> None:
    """The tenant's holds."""
    with command_errors():
        gov = _governance()
        holds = gov.store.holds(gov.tenant)
    if as_json:
        _print([h.to_json() for h in holds])
        return
    for h in holds:
        click.echo(f"{h.scope}: {h.reason} (by {h.principal})")


@click.group("retention")
def retention_group() -> None:
    """Retention per data class (the retention setting, e.g. raw=30d,surface=365d)."""


@retention_group.command("run")
@click.option("--dry-run", is_flag=True, help="Report what would be shredded; change nothing.")
@_JSON
def retention_run(dry_run: bool, as_json: bool) -> None:
    """Shred the data keys whose class retention expired (held sessions are skipped)."""
    with command_errors():
        gov = _governance()
        if not gov.retention:
            die(f"error: no retention configured: set {Env.RETENTION}, "
                 "e.g. raw=30d,surface=365d", ExitCode.BAD_INPUT)
        report = gov.run_retention(dry_run=dry_run)
    if as_json:
        _print(report.to_json())
        return
    click.echo(f"{report.checked} data keys checked{' (dry run)' if dry_run else ''}")
    for item in report.items:
        detail = f" {item.detail}" if item.detail else ""
        click.echo(f"{item.action}: {item.session_id} {item.data_class} "
                   f"({item.age_ms // 86_400_000} days old){detail}")
    if report.retirement is not None:
        _echo_retirement(report.retirement)


def _echo_retirement(done: Any) -> None:
    destroyed = ", ".join(map(str, done.destroyed)) or "none"
    click.echo(f"tenant key version {done.version}: {done.rewrapped} data keys rewrapped, "
               f"versions destroyed: {destroyed}")
    if done.complete:
        click.echo("every deletion so far is complete: no copy of a destroyed key opens")
    else:
        pending = ", ".join(map(str, done.pending))
        click.echo(f"NOT complete: tenant key versions {pending} wrapped destroyed keys and "
                   f"come from {Env.TENANT_KEY}: "
                   + ("put a new version first in it on every node, run `keys retire`, then "
                      if done.version in done.pending else "")
                   + f"remove versions {pending} from it on every node", err=True)


@click.group("keys")
def keys_group() -> None:
    """The tenant's key-encryption key."""


@keys_group.command("rotate")
@_JSON
def keys_rotate(as_json: bool) -> None:
    """Add a new tenant key version and rewrap every data key with it (Kafka untouched)."""
    with command_errors():
        gov = _governance()
        count = gov.store.rotate(gov.tenant)
        ring = gov.store.tenant_keys.ring(gov.tenant)
    version = ring.current if ring else None
    if as_json:
        _print({"tenant": gov.tenant, "version": version, "rewrapped": count})
    else:
        click.echo(f"tenant {gov.tenant}: key version {version}, {count} data keys rewrapped")


@keys_group.command("retire")
@_JSON
def keys_retire(as_json: bool) -> None:
    """Complete every deletion of the tenant: rewrap the live data keys with a new tenant
    key version, destroy the versions that wrapped destroyed keys (docs/operations.md,
    "When a deletion is complete"). Exit 1 while versions held in the environment must
    still be removed by hand."""
    with command_errors():
        done = _governance().retire()
    if as_json:
        _print(done.to_json())
    else:
        _echo_retirement(done)
    if not done.complete:
        sys.exit(ExitCode.FAILED)


def register(group: click.Group) -> None:
    for command in (delete_cmd, hold_group, retention_group, keys_group):
        group.add_command(command)
