"""``sessionstream dashboard``: serve the web dashboard over the Redis projections.

``register(group)`` adds the command; aiohttp and redis are imported inside it, so the
rest of the CLI starts without them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sessionstream.cli.context import CommandError, redis_refusal, refused, unreachable
from sessionstream.cli.context import settings as process_settings
from sessionstream.core.settings import Env

if TYPE_CHECKING:
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
    config = DashboardConfig(redis_url=settings.redis_url, redis_cluster=settings.redis_cluster,
                             keys=settings.keys,
                             timeline=TimelineSource(settings.kafka_bootstrap,
                                                     settings.events_topic,
                                                     settings.kafka_security(),
                                                     reader_decode(settings)),
                             rows=row_cipher(settings), auth=auth)
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


def register(group: click.Group) -> None:
    group.add_command(dashboard_cmd)
