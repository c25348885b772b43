"""``sessionstream cluster up|down|status|env``: the local cluster profile.

Three KRaft Kafka nodes and a six-node Redis Cluster on 127.0.0.1, beside the single-node
stack (other ports, ``<state dir>/cluster``). See :mod:`sessionstream.localstack.cluster`.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from sessionstream.cli.context import command_errors

if TYPE_CHECKING:
    from sessionstream.localstack.cluster import LocalCluster


def _cluster() -> LocalCluster:
    from sessionstream.core.settings import Settings
    from sessionstream.localstack.cluster import ClusterConfig, LocalCluster

    return LocalCluster(ClusterConfig.from_settings(Settings.from_env()), click.echo)


@click.group("cluster")
def cluster_group() -> None:
    """The local cluster profile: 3 KRaft brokers (RF=3, min.insync.replicas=2) and a
    Redis Cluster (3 masters + 3 replicas) on 127.0.0.1."""


@cluster_group.command("up")
@click.option("--fresh", is_flag=True, help="Stop, wipe the cluster's data, then start.")
def up_cmd(fresh: bool) -> None:
    """Start every node that is not running; then print the settings that use it."""
    with command_errors():
        cluster = _cluster()
        if fresh:
            cluster.down()
            cluster.wipe()
        cluster.up()
    click.echo("\nuse it with:")
    for k, v in cluster.cfg.settings_env().items():
        click.echo(f"  export {k}={shlex.quote(v)}")


@cluster_group.command("down")
def down_cmd() -> None:
    """Stop the cluster's nodes (only those `cluster up` started)."""
    with command_errors():
        stopped = _cluster().down()
    click.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@cluster_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(as_json: bool) -> None:
    """Each node: running or not, its port, pid and log."""
    rows = _cluster().status()
    if as_json:
        click.echo(json.dumps(rows))
        return
    for r in rows:
        state = f"running (pid {r['pid']})" if r["pid"] else "stopped"
        click.echo(f"{r['name']:12} {state:20} port {r['port']}  log {r['log']}")


@cluster_group.command("env")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def env_cmd(as_json: bool) -> None:
    """Print the environment settings that point every process at the cluster."""
    from sessionstream.core.settings import Settings
    from sessionstream.localstack.cluster import ClusterConfig

    env = ClusterConfig.from_settings(Settings.from_env()).settings_env()
    if as_json:
        click.echo(json.dumps(env))
    else:
        for k, v in env.items():
            click.echo(f"export {k}={shlex.quote(v)}")
