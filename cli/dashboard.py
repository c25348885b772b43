"""``sessionstream dashboard``: serve the web dashboard over the Redis projections.

``register(group)`` adds the command; aiohttp and redis are imported inside it, so the
rest of the CLI starts without them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sessionstream.cli.context import (
    CommandError,
    bad_input,
    redis_refusal,
    refused,
    unreachable,
)
from sessionstream.cli.context import settings as process_settings
from sessionstream.core.settings import Env

if TYPE_CHECKING:
    from sessionstream.core.series import Prices
    from sessionstream.core.settings import Settings
    from sessionstream.dashboard.auth import TokenAuth


def _redacted(url: str) -> str:
    """The Redis URL without credentials, for messages (a cluster's list of nodes too)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "…"
    return f"{scheme}://{rest.rpartition('@')[2]}"


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; the default serves this machine only.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port).")
@click.option("--detach", is_flag=True,
              help="Start in the background (pid file and log in the state directory), "
                   "wait until it answers, print its URL and return.")
@click.option("--stop", is_flag=True, help="Stop the dashboard started with --detach.")
@click.option("--login-url", is_flag=True,
              help="Print the login URL (it holds the tenant's dashboard token) and exit; "
                   "nothing else prints or logs the token.")
def dashboard_cmd(host: str, port: int, detach: bool, stop: bool, login_url: bool) -> None:
    """Serve the dashboard: sessions, turns, tools, surface, usage, compaction, rejections.

    Reads only Redis (the projections the worker writes), in the generation readers
    use; updates live from the tenant's change feed.
    """
    settings = process_settings()
    if login_url:
        click.echo(_login_url(settings, host, port))
        return
    if detach or stop:
        _background(settings.state_dir, host, port, stop=stop)
        return
    import redis
    from aiohttp import web

    from sessionstream import redisconn
    from sessionstream.dashboard.app import DashboardConfig, create_app
    from sessionstream.dashboard.series import SeriesConfig
    from sessionstream.dashboard.timeline import TimelineSource

    prefix = settings.key_prefix
    try:
        redisconn.from_settings(settings, socket_connect_timeout=3).ping()
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        cause = refused(exc)
        if cause is not None:  # it answered: the credentials are the problem
            raise CommandError(redis_refusal(cause, f" at {_redacted(settings.redis_url)}")
                               ) from exc
        raise unreachable(
            f"cannot reach Redis at {_redacted(settings.redis_url)} ({exc}); start it with "
            f"`sessionstream up` or set {Env.REDIS_URL}") from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from sessionstream.governance.wiring import row_cipher
    from sessionstream.registry import reader_decode

    auth, local = _auth(settings)
    source = TimelineSource(settings.kafka_bootstrap, settings.events_topic,
                            settings.kafka_security(), reader_decode(settings))
    rows = row_cipher(settings)
    config = DashboardConfig(redis_url=settings.redis_url, redis_cluster=settings.redis_cluster,
                             keys=settings.keys, timeline=source, rows=rows, auth=auth,
                             series=SeriesConfig(source, rows=rows, prices=load_prices(settings),
                                                 budget=settings.context_budget),
                             streams_group=settings.streams_group)
    del local  # never printed: the banner says how to get the login URL
    click.echo(f"dashboard on http://{host}:{port}/  (tenant {settings.tenant}, key "
               f"prefix {prefix}, Redis {_redacted(settings.redis_url)}); {LOGIN_HINT}; "
               "Ctrl-C stops it", err=True)
    from sessionstream.dashboard.auth import RedactedAccessLogger

    try:
        web.run_app(create_app(config), host=host, port=port, print=None, shutdown_timeout=10,
                    access_log_class=RedactedAccessLogger)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); is another dashboard "
            "running? pass --port") from exc


LOGIN_HINT = "log in with the URL `sessionstream dashboard --login-url` prints"


def load_prices(settings: Settings) -> Prices:
    """The price table the settings name (none: no costs); a file that cannot be used is
    bad input, named with what is wrong."""
    from sessionstream.core.series import Prices, PricesError

    path = settings.prices_file
    if path is None:
        return Prices()
    try:
        data = json.loads(path.read_text())
        return Prices.parse(data, f"{Env.PRICES}={path}")
    except OSError as exc:
        raise bad_input(f"{Env.PRICES}={path}: cannot read it ({exc.strerror or exc})"
                        ) from exc
    except ValueError as exc:  # PricesError, or not JSON
        what = str(exc) if isinstance(exc, PricesError) else f"{Env.PRICES}={path}: {exc}"
        raise bad_input(what) from exc


def _login_url(settings: Settings, host: str, port: int) -> str:
    """The page's login URL for the settings' tenant (the detached one's address when
    one runs); the token is in it, so it goes to the terminal only."""
    from sessionstream.dashboard import background

    running = background.running_url(settings.state_dir)
    base = running or f"http://{host}:{port}/"
    auth, _ = _auth(settings)
    token = next((t for t, tenant in auth.tokens.items() if tenant == settings.tenant), None)
    if token is None:
        raise click.ClickException(
            f"{Env.DASHBOARD_TOKEN} has no token for tenant {settings.tenant!r}")
    return f"{base}?token={token}"


def _auth(settings: Settings) -> tuple[TokenAuth, str | None]:
    """The server's tokens: from settings, else the tenant's local token (the local
    stack's default, kept 0600 in the state dir); the second value is that local token."""
    from sessionstream.dashboard.auth import TokenAuth
    from sessionstream.governance.access import TenantSecrets

    if settings.dashboard_tokens:
        return TokenAuth(settings.tenant, dict(settings.dashboard_tokens)), None
    local = TenantSecrets.load_or_create(settings.state_dir, settings.tenant).dashboard_token
    return TokenAuth(settings.tenant, {local: settings.tenant}), local


def _background(state_dir: Path, host: str, port: int, *, stop: bool) -> None:
    from sessionstream.dashboard import background

    if stop:
        pid = background.stop(state_dir)
        click.echo(f"dashboard (pid {pid}) stopped" if pid else "no detached dashboard running")
        return
    try:
        d = background.start(state_dir, host, port)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    state = "already running" if d.already_running else "running"
    click.echo(f"dashboard {state} at {d.url}  (pid {d.pid}, log {d.log})")
    click.echo(LOGIN_HINT)
    click.echo("stop it with: make dashboard-stop   (or: sessionstream dashboard --stop)")


@click.command("series")
@click.argument("session_id", required=False)
@click.option("--tenant-wide", is_flag=True,
              help="The tenant's series instead of a session's: sessions active, events "
                   "per second, rejections and quarantines per bucket, the worker's lag now.")
@click.option("--window", default=900, show_default=True, type=click.IntRange(10, 6 * 3600),
              help="--tenant-wide: seconds back from now.")
@click.option("--buckets", default=60, show_default=True, type=click.IntRange(1, 600),
              help="--tenant-wide: buckets of the window.")
@click.option("--points", default=600, show_default=True, type=click.IntRange(1, 100_000),
              help="Context points at most (downsampled beyond; every drop kept).")
@click.option("--bars", default=500, show_default=True, type=click.IntRange(1, 20_000),
              help="Turn bars at most (consecutive turns grouped beyond).")
@click.option("--turn", type=click.IntRange(0), help="The waterfall's turn (default: the last).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: the "
              "dashboard's /api/sessions/{id}/series or /api/tenant/series body.")
def series_cmd(session_id: str | None, tenant_wide: bool, window: int, buckets: int,
               points: int, bars: int, turn: int | None, as_json: bool) -> None:
    """The numbers behind the dashboard's plots, for scripts.

    For SESSION: its context size over seq with each compaction's drop and the budget,
    tokens and cost per turn, and one turn's waterfall of steps and tool calls (folded
    from the session's log range, as the dashboard does). With --tenant-wide: the
    tenant's activity from its change feed."""
    import asyncio

    from sessionstream.cli.context import command_errors

    if tenant_wide == (session_id is not None):
        raise click.UsageError("give a SESSION_ID or --tenant-wide (one of them)")
    settings = process_settings()
    with command_errors():
        if tenant_wide:
            body = asyncio.run(_tenant_series(settings, window, buckets))
        else:
            assert session_id is not None
            body = asyncio.run(_session_series(settings, session_id, points, bars, turn))
    if as_json:
        click.echo(json.dumps(body))
    elif tenant_wide:
        _echo_tenant(body)
    else:
        _echo_session(body)


async def _session_series(settings: Settings, sid: str, points: int, bars: int,
                          turn: int | None) -> dict[str, Any]:
    from sessionstream import redisconn
    from sessionstream.dashboard.series import (
        SeriesConfig,
        SeriesReader,
        read_position,
        series_json,
    )
    from sessionstream.dashboard.timeline import TimelineSource
    from sessionstream.governance.wiring import row_cipher
    from sessionstream.registry import reader_decode

    redis = redisconn.async_redis(settings.redis_url, cluster=settings.redis_cluster,
                                  decode_responses=True)
    try:
        snap = await read_position(redis, settings.keys, sid)
    finally:
        await redis.aclose()
    if snap is None:
        raise bad_input(f"no projections for session {sid!r} of tenant {settings.tenant!r}: "
                        "check the id (`sessionstream sessions`) and that the worker has "
                        "reached it")
    source = TimelineSource(settings.kafka_bootstrap, settings.events_topic,
                            settings.kafka_security(), reader_decode(settings))
    reader = SeriesReader(SeriesConfig(source, rows=row_cipher(settings),
                                       prices=load_prices(settings),
                                       budget=settings.context_budget))
    fold, seconds = await reader.read(snap)
    return series_json(fold, snap, settings.context_budget, points=points, bars=bars,
                       turn=turn, seconds=seconds)


async def _tenant_series(settings: Settings, window: int, buckets: int) -> dict[str, Any]:
    from sessionstream import redisconn
    from sessionstream.dashboard.fleet import FleetSeries, LagSampler, lag_probe
    from sessionstream.dashboard.timeline import TimelineSource
    from sessionstream.registry import reader_decode

    redis = redisconn.async_redis(settings.redis_url, cluster=settings.redis_cluster,
                                  decode_responses=True)
    source = TimelineSource(settings.kafka_bootstrap, settings.events_topic,
                            settings.kafka_security(), reader_decode(settings))
    lag = LagSampler(lag_probe(source, redis, settings.keys, settings.streams_group))
    try:
        fleet = FleetSeries(redis, settings.keys, lag=lag)
        await lag.sample()  # one sample: the lag now
        state = await fleet.refresh()
        return fleet.to_json(state, window_s=window, buckets=buckets)
    finally:
        await lag.stop()
        await redis.aclose()


def _echo_session(body: dict[str, Any]) -> None:
    ctx, turns = body["context"], body["turns"]
    peak = max((t for _, t in ctx["points"]), default=0)
    click.echo(f"session {body['session_id']} at seq {body['as_of_seq']} (generation "
               f"{body['generation']})")
    click.echo(f"context: {ctx['tokens']:,} tokens now, peak {peak:,}, budget "
               f"{body['budget']:,}; {ctx['total_points']} changes "
               f"({len(ctx['points'])} points shown)")
    for c in body["compactions"]:
        drop = (f"{c['before']:,} -> {c['after']:,} tokens at seq {c['drop_seq']}"
                if c["drop_seq"] is not None else "no drop")
        click.echo(f"  compaction {c['compaction_id']} ({c['outcome'] or 'open'}): {drop}")
    totals = turns["totals"] or {}
    cost = totals.get("cost")
    click.echo(f"turns: {turns['total']}; tokens input {totals.get('input', 0):,} cached "
               f"{totals.get('cached', 0):,} output {totals.get('output', 0):,} reasoning "
               f"{totals.get('reasoning', 0):,}; cost "
               + (f"${cost:.4f}" if cost is not None else "- (no price for every model)"))
    fall = body["waterfall"]
    if fall:
        click.echo(f"turn {fall['turn']} ({fall['status']}, {fall['duration_ms']} ms):")
        for span in fall["spans"]:
            end = "…" if span["end"] is None else f"{span['end']} ms"
            click.echo(f"  {span['kind']:5} {span['label'][:40]:40} {span['start']} ms -> "
                       f"{end}  {span['status']}")
    if body.get("error"):
        click.echo(f"note: {body['error']}", err=True)


def _echo_tenant(body: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    t = body["totals"]
    click.echo(f"tenant {body['tenant']}, last {body['window_s']} s: "
               f"{t['sessions_active']} sessions active, {t['events']:,} events, "
               f"{t['rejections']} rejections, {t['quarantines']} quarantines")
    click.echo(f"{'bucket (UTC)':20} {'sessions':>8} {'events/s':>9} {'rejections':>10} "
               f"{'quarantines':>11}")
    for b in body["buckets"]:
        if not (b["writes"] or b["rejections"] or b["quarantines"]):
            continue
        at = datetime.fromtimestamp(b["start_ms"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{at:20} {b['sessions']:>8} {b['events_per_s']:>9} "
                   f"{b['rejections']:>10} {b['quarantines']:>11}")
    lag = body.get("lag") or {}
    if lag.get("samples"):
        now = lag["samples"][-1]
        parts = ", ".join(f"{p}: {n}" for p, n in sorted(now["offsets"].items(),
                                                          key=lambda kv: int(kv[0])))
        click.echo(f"worker lag now (records per partition): {parts}")
    elif lag.get("error"):
        click.echo(f"worker lag: unavailable ({lag['error']})", err=True)


def register(group: click.Group) -> None:
    group.add_command(dashboard_cmd)
    group.add_command(series_cmd)
