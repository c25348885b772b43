"""``sessionstream cluster up|down|status|env``: the local cluster profile.

Three KRaft Kafka nodes and a six-node Redis Cluster on 127.0.0.1, beside the single-node
stack (other ports, ``<state dir>/cluster``); ``--secure`` is its secure profile (SASL/SCRAM
and ACLs on the brokers, ACL users only on Redis; ``<state dir>/cluster-secure``, the same
ports). See :mod:`sessionstream.localstack.cluster`.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from sessionstream.cli.context import command_errors

if TYPE_CHECKING:
    from sessionstream.localstack.cluster import LocalCluster

_SECURE_HELP = ("The secure cluster profile (SCRAM + ACLs on the brokers, a Redis Cluster "
                "with ACL users and no anonymous user; <state dir>/cluster-secure, the same "
                "ports) instead of the open one.")


def _cluster(secure: bool) -> LocalCluster:
    from sessionstream.core.settings import Settings
    from sessionstream.localstack.cluster import ClusterConfig, LocalCluster

    return LocalCluster(ClusterConfig.from_settings(Settings.from_env(), secure=secure),
                        click.echo)


@click.group("cluster")
def cluster_group() -> None:
    """The local cluster profile: 3 KRaft brokers (RF=3, min.insync.replicas=2) and a
    Redis Cluster (3 masters + 3 replicas) on 127.0.0.1."""


@cluster_group.command("up")
@click.option("--fresh", is_flag=True, help="Stop, wipe the cluster's data, then start.")
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
def up_cmd(fresh: bool, secure: bool) -> None:
    """Start every node that is not running; then print the settings that use it."""
    with command_errors():
        cluster = _cluster(secure)
        if fresh:
            cluster.down()
            cluster.wipe()
        cluster.up()
    click.echo("\nuse it with:")
    for k, v in cluster.cfg.settings_env().items():
        click.echo(f"  export {k}={shlex.quote(v)}")
    if secure:
        click.echo(f"\nno anonymous client: the admin's password is in "
                   f"{cluster.cfg.admin_secret_file} (0600). A tenant's principals:\n"
                   "  sessionstream acl apply --tenant T --local-cluster\n"
                   "  eval \"$(sessionstream acl env --tenant T --role R --local-cluster)\"\n"
                   "as the admin (e.g. `topics ensure`): "
                   "eval \"$(sessionstream cluster env --secure --admin)\"")


@cluster_group.command("down")
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
def down_cmd(secure: bool) -> None:
    """Stop the cluster's nodes (only those `cluster up` started)."""
    with command_errors():
        stopped = _cluster(secure).down()
    click.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@cluster_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
def status_cmd(as_json: bool, secure: bool) -> None:
    """Each node: running or not, its port, pid and log."""
    rows = _cluster(secure).status()
    if as_json:
        click.echo(json.dumps(rows))
        return
    for r in rows:
        state = f"running (pid {r['pid']})" if r["pid"] else "stopped"
        click.echo(f"{r['name']:12} {state:20} port {r['port']}  log {r['log']}")


@cluster_group.command("env")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--secure", is_flag=True, help=_SECURE_HELP)
@click.option("--admin", is_flag=True,
              help="With --secure: as the profile's admin, its password included (pipe it "
                   "into a shell, not into a log); tenants' processes take theirs from "
                   "`acl env --local-cluster`.")
def env_cmd(as_json: bool, secure: bool, admin: bool) -> None:
    """Print the environment settings that point every process at the cluster."""
    from sessionstream.core.settings import Settings
    from sessionstream.localstack.cluster import ClusterConfig

    cfg = ClusterConfig.from_settings(Settings.from_env(), secure=secure)
    if admin and not secure:
        raise click.UsageError("--admin is for the secure profile: add --secure")
    if admin and not cfg.admin_secret_file.is_file():
        raise click.UsageError("the secure cluster has not been started: run "
                               "`sessionstream cluster up --secure` first")
    env = cfg.settings_env(admin=admin)
    if as_json:
        click.echo(json.dumps(env))
    else:
        for k, v in env.items():
            click.echo(f"export {k}={shlex.quote(v)}")
