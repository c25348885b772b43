"""``sessionstream compactor``: the automatic compaction trigger (see ``compaction_watch``).

Registered by ``streams.cli.register`` (with the other change-feed readers); clients
are imported inside the command.
Honours the key prefix and events topic settings like the worker.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import click

from sessionstream import redisconn
from sessionstream.cli.context import command_errors, settings
from sessionstream.core.settings import Env, Settings


@click.command("compactor")
@click.option("--budget", type=int, default=None,
              help="Context budget in estimated tokens (pressure at 80%); default "
                   f"{Env.CONTEXT_BUDGET} or 32000, the line the dashboard draws.")
@click.option("--keep-recent", default=4, show_default=True,
              help="Surface nodes at the end that are never shadowed.")
@click.option("--cooldown", default=30.0, show_default=True,
              help="Seconds between two attempts on one session.")
@click.option("--once", is_flag=True,
              help="Process what is in the change feed now, print a summary and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def compactor_cmd(budget: int | None, keep_recent: int, cooldown: float, once: bool,
                  as_json: bool) -> None:
    """Follow the tenant's change feed and compact sessions under token pressure.

    Resumes after the last feed entry it processed (kept in Redis). At most one attempt
    per session per as_of_seq. Exit 0, or 1 with --once when an attempt failed.
    """
    from sessionstream.core.compaction import Budget

    if budget is None:
        with command_errors():
            budget = settings().context_budget
    try:
        b = Budget(tokens=budget, keep_recent=keep_recent)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if cooldown < 0:
        raise click.BadParameter("must be >= 0", param_hint="--cooldown")
    with command_errors():
        summary = asyncio.run(_run(settings(), b, cooldown, once))
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(f"sessions seen {summary['sessions']}  compacted {summary['compacted']}  "
                   f"not needed {summary['not_needed']}  skipped {summary['skipped']}  "
                   f"failed {summary['failed']}")
    if once and summary["failed"]:
        raise SystemExit(1)


async def _run(settings: Settings, budget: Any, cooldown: float, once: bool
               ) -> dict[str, Any]:
    from sessionstream.producers.writer import WriterConfig
    from sessionstream.streams.compaction_watch import AttemptLedger, CompactionWatcher

    # Settings carry the key prefix and topic the worker uses: the watcher reads the feed
    # the worker writes and takes leases under the same prefix.
    cfg = WriterConfig.from_settings(settings)
    redis = redisconn.from_settings(settings, asyncio=True, decode_responses=True)
    watcher = CompactionWatcher(cfg, budget=budget, keys=cfg.keys, redis=redis,
                                ledger=AttemptLedger(cooldown_s=cooldown))
    try:
        if once:
            return (await watcher.drain()).to_json()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if settings.metrics_port is None:
            return (await watcher.run(stop)).to_json()
        from sessionstream.streams.metrics import CompactorMetrics, start_server

        metrics = CompactorMetrics(settings.tenant)
        runner = await start_server(metrics, settings.metrics_port, metrics.ready)
        try:
            return (await watcher.run(stop, on_step=metrics.observe_step)).to_json()
        finally:
            await runner.cleanup()
    finally:
        await redis.aclose()
