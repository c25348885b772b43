"""``sessionstream registry up|down|status``: an optional local schema registry.

Apicurio Registry (in-memory) on 127.0.0.1, for the ``confluent`` wire.
See :mod:`sessionstream.localstack.registry`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from sessionstream.cli.context import command_errors

if TYPE_CHECKING:
    from sessionstream.localstack.registry import LocalRegistry

_PORT = click.option("--port", type=int, default=18081, show_default=True,
                     help="Loopback port of the registry's HTTP API.")
_MGMT = click.option("--management-port", type=int, default=18082, show_default=True,
                     help="Loopback port of its management (health) endpoints.")


def _registry(port: int, management_port: int) -> LocalRegistry:
    from sessionstream.core.settings import Settings
    from sessionstream.localstack.registry import LocalRegistry

    return LocalRegistry.from_settings(Settings.from_env(), port, management_port)


@click.group("registry")
def registry_group() -> None:
    """An optional local schema registry (Apicurio, in-memory; needs Java 21+)."""


@registry_group.command("up")
@_PORT
@_MGMT
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output on stdout (progress goes to stderr).")
def up_cmd(port: int, management_port: int, as_json: bool) -> None:
    """Start the registry unless it runs; then print the settings that use it."""
    from sessionstream.core.settings import Env

    def progress(line: str) -> None:
        click.echo(line, err=as_json)

    with command_errors():
        reg = _registry(port, management_port)
        started = reg.up(progress)
    if as_json:
        click.echo(json.dumps({**reg.status(), "started": started,
                               "env": {Env.WIRE: "confluent",
                                       Env.SCHEMA_REGISTRY_URL: reg.url}}))
        return
    if not started:
        click.echo(f"registry: already running (pid {reg.pid()})")
    click.echo(f"\nuse it with:\n  export {Env.WIRE}=confluent\n"
               f"  export {Env.SCHEMA_REGISTRY_URL}={reg.url}")


@registry_group.command("down")
@_PORT
@_MGMT
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def down_cmd(port: int, management_port: int, as_json: bool) -> None:
    """Stop the registry (only one `registry up` started); its schemas are lost."""
    reg = _registry(port, management_port)
    stopped = reg.down()
    if as_json:
        click.echo(json.dumps({"name": "registry", "stopped": stopped, "port": reg.port,
                               "url": reg.url}))
        return
    click.echo("stopped: registry" if stopped else "stopped: nothing was running")


@registry_group.command("status")
@_PORT
@_MGMT
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(port: int, management_port: int, as_json: bool) -> None:
    """Running or not, its pid, URL and log."""
    row = _registry(port, management_port).status()
    if as_json:
        click.echo(json.dumps(row))
        return
    state = f"running (pid {row['pid']})" if row["pid"] else "stopped"
    click.echo(f"registry     {state:20} {row['url']}  log {row['log']}")
