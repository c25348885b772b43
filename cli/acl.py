"""``sessionstream acl apply|env``: a tenant's access scopes on Kafka and Redis.

``apply`` creates the tenant's principals (SCRAM users, Redis ACL users) and their ACLs
(docs/operations.md, "Access scopes"); ``env`` prints the settings one role's process
needs. Clients are imported inside the commands.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import click

from sessionstream.cli.context import bad_input, command_error, command_errors, settings
from sessionstream.core.access import KAFKA_ROLES, REDIS_ROLES, ROLES, principal
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.settings import Env, Settings


@click.group("acl")
def acl_group() -> None:
    """Access scopes: per-tenant Kafka principals and ACLs, Redis ACL users."""


def _secure(s: Settings) -> Any:
    """The local secure profile, started (its admin password exists)."""
    from sessionstream.localstack.stack import secure_stack

    cfg = secure_stack(s)
    if not cfg.admin_secret_file.is_file():
        raise bad_input("the secure profile has not been started: run "
                        "`sessionstream up --secure` first")
    return cfg


def _secure_cluster(s: Settings) -> Any:
    """The local secure cluster profile, started (its admin password exists)."""
    from sessionstream.localstack.cluster import ClusterConfig

    cfg = ClusterConfig.from_settings(s, secure=True)
    if not cfg.admin_secret_file.is_file():
        raise bad_input("the secure cluster profile has not been started: run "
                        "`sessionstream cluster up --secure` first")
    return cfg


_LOCAL_CLUSTER_HELP = ("Talk to the local secure cluster (`cluster up --secure`: its three "
                       "brokers and its Redis Cluster) as its admin.")


def _local(local_secure: bool, local_cluster: bool) -> None:
    if local_secure and local_cluster:
        raise click.UsageError("--local-secure and --local-cluster name two profiles: "
                               "choose one")


def _admin_security(s: Settings, local_secure: bool,
                    local_cluster: bool = False) -> tuple[str, dict[str, str]]:
    if local_cluster:
        cluster = _secure_cluster(s)
        return cluster.bootstrap, cluster.client_security()
    if local_secure:
        from sessionstream.localstack.stack import secure_stack

        cfg = secure_stack(s)
        if not cfg.admin_secret_file.is_file():
            raise bad_input("the secure Kafka profile has not been started: run "
                            "`sessionstream up --secure` first")
        return cfg.bootstrap, cfg.client_security()
    return s.kafka_bootstrap, s.kafka_security()


@acl_group.command("apply")
@click.option("--tenant", help=f"Tenant (default: {Env.TENANT} or 'default').")
@click.option("--kafka/--no-kafka", default=True, show_default=True,
              help="Create the SCRAM users and ACLs on Kafka.")
@click.option("--redis/--no-redis", default=True, show_default=True,
              help="Create the Redis ACL users.")
@click.option("--local-secure", is_flag=True,
              help="Talk to the local secure Kafka (`up --secure`) as its admin; otherwise "
                   f"to {Env.KAFKA_BOOTSTRAP} with the {Env.KAFKA_SASL_USERNAME} principal.")
@click.option("--local-cluster", is_flag=True, help=_LOCAL_CLUSTER_HELP)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def acl_apply_cmd(tenant: str | None, kafka: bool, redis: bool, local_secure: bool,
                  local_cluster: bool, as_json: bool) -> None:
    """Create (or re-apply) the tenant's principals and their ACLs.

    Passwords are generated once per tenant into <state dir>/secrets/<tenant>.json
    (0600, with the dashboard token) and reused on every apply; they are never printed
    (`sessionstream acl env --role R` prints one role's settings)."""
    from sessionstream.governance.access import (
        AccessError,
        TenantSecrets,
        apply_kafka,
        apply_redis,
        apply_redis_cluster,
    )

    _local(local_secure, local_cluster)
    s = settings()
    if tenant:
        with command_errors():
            s = dataclasses.replace(s, tenant=tenant)
    report: dict[str, Any] = {"tenant": s.tenant}
    try:
        secrets = TenantSecrets.load_or_create(s.state_dir, s.tenant)
        report["secrets_file"] = str(TenantSecrets.path(s.state_dir, s.tenant))
        if kafka:
            from sessionstream.producers.topics import admin_client

            bootstrap, security = _admin_security(s, local_secure, local_cluster)
            admin = admin_client(bootstrap, security)
            report["kafka"] = {"bootstrap": bootstrap, **apply_kafka(
                admin, s.tenant, secrets.passwords, dlq_topic=s.dlq_topic)}
            if not s.streams_group.startswith(f"sessionstream.{s.tenant}."):
                # A shared group name would let one tenant's worker join (and disturb)
                # another's group: the ACLs grant only groups under the tenant's prefix.
                report["warnings"] = [
                    f"{Env.STREAMS_GROUP}={s.streams_group!r} is not under the tenant's "
                    f"prefix: the worker is allowed only groups sessionstream.{s.tenant}.*; "
                    f"set {Env.STREAMS_GROUP}=sessionstream.{s.tenant}.projections"]
        if redis:
            from sessionstream import redisconn

            # On a Redis Cluster the users are created on every node (ACLs are per node).
            target = s
            if local_secure:  # the secure Redis as its admin (it has no anonymous user)
                target = dataclasses.replace(s, redis_url=_secure(s).admin_redis_url(),
                                             redis_cluster=False)
            if local_cluster:  # every node of the secure Redis Cluster, as its admin
                target = dataclasses.replace(
                    s, redis_url=_secure_cluster(s).admin_redis_url(), redis_cluster=True)
            client = redisconn.from_settings(target, socket_timeout=10)
            try:
                apply = apply_redis_cluster if target.redis_cluster else apply_redis
                report["redis"] = apply(client, s.keys, secrets.passwords)
            finally:
                client.close()
    except (AccessError, SessionStreamError) as exc:
        raise command_error(exc) from exc
    except Exception as exc:  # a client library's own error: name the server, no trace
        raise command_error(exc, f"applying access scopes failed: {type(exc).__name__}: "
                                 f"{exc}") from exc
    if as_json:
        click.echo(json.dumps(report))
        return
    click.echo(f"tenant {s.tenant}: credentials in {report['secrets_file']} (0600)")
    for acl in report.get("kafka", {}).get("acls", []):
        click.echo(f"  kafka allow {acl}")
    for user, rules in report.get("redis", {}).get("users", {}).items():
        click.echo(f"  redis user {user}: {' '.join(rules)}")
    if "redis" in report:
        click.echo("  redis users saved to the server's ACL file (a restart keeps them)"
                   if report["redis"].get("persisted") else
                   "  redis users in the server's memory only (no aclfile): apply again "
                   "after a restart")
    if report.get("redis", {}).get("nodes"):
        click.echo(f"  redis users set on every cluster node: "
                   f"{', '.join(report['redis']['nodes'])}")
    for warning in report.get("warnings", []):
        click.echo(f"warning: {warning}", err=True)


@acl_group.command("env")
@click.option("--tenant", help=f"Tenant (default: {Env.TENANT} or 'default').")
@click.option("--role", type=click.Choice(list(ROLES)), required=True)
@click.option("--local-secure", is_flag=True,
              help="Point Kafka and Redis at the local secure profile, data keys in its "
                   "Redis, the tenant key ring in the environment.")
@click.option("--local-cluster", is_flag=True,
              help="The same for the local secure cluster (`cluster up --secure`).")
def acl_env_cmd(tenant: str | None, role: str, local_secure: bool,
                local_cluster: bool) -> None:
    """Print the environment of one role's process (shell `export` lines, secrets
    included: pipe it into the process's environment, not into a log)."""
    from sessionstream.governance.access import TenantSecrets, redis_url_for

    _local(local_secure, local_cluster)
    s = settings()
    tenant = tenant or s.tenant
    path = TenantSecrets.path(s.state_dir, tenant)
    if not path.is_file():
        raise bad_input(f"no credentials for tenant {tenant!r} yet: run "
                        f"`sessionstream acl apply --tenant {tenant}`")
    secrets = TenantSecrets.load_or_create(s.state_dir, tenant)
    env = {Env.TENANT: tenant}
    secure = _secure(s) if local_secure else None
    cluster = _secure_cluster(s) if local_cluster else None
    profile = secure or cluster
    if cluster is not None:
        env[Env.REDIS_CLUSTER] = "true"
        env[Env.REPLICATION_FACTOR] = "3"
    if role in KAFKA_ROLES:
        if profile is not None:
            env[Env.KAFKA_BOOTSTRAP] = profile.bootstrap
        env[Env.KAFKA_SECURITY_PROTOCOL] = "SASL_PLAINTEXT"
        env[Env.KAFKA_SASL_MECHANISM] = "SCRAM-SHA-512"
        env[Env.KAFKA_SASL_USERNAME] = principal(tenant, role)
        env[Env.KAFKA_SASL_PASSWORD] = secrets.passwords[role]
    if role in REDIS_ROLES:
        base = s.redis_url
        if secure is not None:
            base = f"redis://127.0.0.1:{secure.redis_port}/0"
        if cluster is not None:
            base = cluster.redis_url
        env[Env.REDIS_URL] = redis_url_for(base, principal(tenant, role),
                                           secrets.passwords[role])
    if profile is not None and role in REDIS_ROLES:
        # This tenant's key material only: data keys in the secure Redis (behind the ACL
        # user above), the tenant key ring in the environment, no shared key directory.
        from sessionstream.governance.keys import TenantKeys
        from sessionstream.localstack.stack import secure_tenant_key_dir
        ring = TenantKeys(secure_tenant_key_dir(profile)).ring(tenant, create=True)
        assert ring is not None
        env[Env.KEY_STORE] = "redis"
        env[Env.TENANT_KEY] = ",".join(
            f"{v}:{base64.b64encode(k).decode()}"
            for v, k in sorted(ring.versions.items(), key=lambda vk: vk[0] != ring.current))
        env[Env.TENANT_KEY_DIR] = str(profile.state_dir / "no-tenant-keys" / tenant)
    if role == "reader":
        env[Env.DASHBOARD_TOKEN] = f"{tenant}:{secrets.dashboard_token}"
    for name, value in env.items():
        click.echo(f"export {name}='{value}'")


@acl_group.command("redis-file")
@click.option("--tenant", help=f"Tenant (default: {Env.TENANT} or 'default').")
@click.option("--admin", is_flag=True,
              help="Also an admin user (all keys and commands); its password is asked for "
                   "on the terminal, never taken from a command line.")
def acl_redis_file_cmd(tenant: str | None, admin: bool) -> None:
    """Print an ACL file for a Redis started with `aclfile` (deploy/compose, deploy/k8s):
    `user default off` and the tenant's users, passwords as SHA-256 hashes."""
    from sessionstream.governance.access import (
        TenantSecrets,
        acl_password_hash,
        redis_acl_lines,
    )

    s = settings()
    tenant = tenant or s.tenant
    if not TenantSecrets.path(s.state_dir, tenant).is_file():
        raise bad_input(f"no credentials for tenant {tenant!r} yet: run "
                        f"`sessionstream acl apply --tenant {tenant} --no-kafka --no-redis`")
    secrets = TenantSecrets.load_or_create(s.state_dir, tenant)
    lines = ["user default off"]
    if admin:
        password = click.prompt("admin password", hide_input=True,
                                confirmation_prompt=True, err=True)
        lines.append(f"user admin on {acl_password_hash(password)} ~* &* +@all")
    lines += redis_acl_lines(dataclasses.replace(s, tenant=tenant).keys, secrets.passwords)
    click.echo("\n".join(lines))


def register(cli_group: click.Group) -> None:
    cli_group.add_command(acl_group)
