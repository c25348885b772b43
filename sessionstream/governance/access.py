"""Apply a tenant's access scopes (``sessionstream.core.access``) to Kafka and Redis.

Kafka: SCRAM-SHA-512 users through ``AdminClient.alter_user_scram_credentials`` and ALLOW
ACLs through ``create_acls`` (the broker's StandardAuthorizer denies everything else).
Redis: one ``ACL SETUSER`` per role, then ``ACL SAVE`` when the server keeps its users in
an ACL file (``aclfile``: a restart keeps them; the secure profile's Redis does). Both
are idempotent: applying again re-sets the same passwords and bindings.
:func:`redis_acl_lines` writes the same users as ACL file lines (passwords as SHA-256
hashes) for a deployment that provisions the file from its secret store.

Passwords are generated once per tenant and kept in ``<state dir>/secrets/<tenant>.json``
(0600) with the dashboard token; nothing here logs or prints them unless asked.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionstream.core.access import (
    KAFKA_ROLES,
    REDIS_ROLES,
    ROLES,
    KafkaAcl,
    kafka_acls,
    principal,
    redis_acl_rules,
)
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Env

SCRAM_ITERATIONS = 8192


class AccessError(SessionStreamError):
    """Applying access scopes failed; the message names the server, the principal, why."""


@dataclass
class TenantSecrets:
    """A tenant's principals' passwords and its dashboard token (kept 0600 on disk)."""

    tenant: str
    passwords: dict[str, str] = field(default_factory=dict)
    dashboard_token: str = ""

    @staticmethod
    def path(state_dir: Path, tenant: str) -> Path:
        return state_dir / "secrets" / f"{tenant}.json"

    @classmethod
    def load_or_create(cls, state_dir: Path, tenant: str) -> TenantSecrets:
        """The tenant's secrets; the missing ones are generated and the file rewritten."""
        path = cls.path(state_dir, tenant)
        data: dict[str, Any] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except ValueError as exc:
                raise AccessError(f"{path} is not JSON ({exc}); move it away to "
                                  "generate new credentials") from exc
        out = cls(tenant, dict(data.get("passwords") or {}), str(data.get("dashboard_token")
                                                                 or ""))
        changed = False
        for role in ROLES:
            if not out.passwords.get(role):
                out.passwords[role] = secrets.token_urlsafe(24)
                changed = True
        if not out.dashboard_token:
            out.dashboard_token = secrets.token_urlsafe(32)
            changed = True
        if changed or not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"tenant": tenant, "passwords": out.passwords,
                           "dashboard_token": out.dashboard_token}, fh, indent=2)
            os.replace(tmp, path)
        return out


# --- Kafka --------------------------------------------------------------------------------


def _binding(acl: KafkaAcl) -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(
        ResourceType[acl.resource.upper()], acl.name,
        ResourcePatternType[acl.pattern.upper()], f"User:{acl.principal}", "*",
        AclOperation[acl.operation.upper()], AclPermissionType.ALLOW)


def apply_kafka(admin: Any, tenant: str, passwords: dict[str, str], *,
                dlq_topic: str | None = None, groups: tuple[str, ...] = (),
                timeout: float = 30.0) -> dict[str, Any]:
    """Upsert the tenant's SCRAM users and create its ACLs; returns what was applied."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    users = [principal(tenant, r) for r in KAFKA_ROLES]
    upserts = [UserScramCredentialUpsertion(
        principal(tenant, r), ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                  SCRAM_ITERATIONS),
        passwords[r].encode()) for r in KAFKA_ROLES]
    acls = kafka_acls(tenant, dlq_topic=dlq_topic, groups=groups)
    try:
        for _user, fut in admin.alter_user_scram_credentials(
                upserts, request_timeout=timeout).items():
            fut.result()
        for _, fut in admin.create_acls([_binding(a) for a in acls],
                                        request_timeout=timeout).items():
            fut.result()
    except KafkaException as exc:
        err = exc.args[0]
        raise AccessError(
            f"Kafka refused the access scopes of tenant {tenant!r}: {err.name()}: {err.str()}"
            f" — run as the cluster's admin (a super user: set {Env.KAFKA_SASL_USERNAME} and "
            f"{Env.KAFKA_SASL_PASSWORD}, or use --local-secure for `sessionstream up --secure`)"
        ) from exc
    return {"users": users, "acls": [a.describe() for a in acls]}


# --- Redis --------------------------------------------------------------------------------


def acl_password_hash(password: str) -> str:
    """A password as an ACL file keeps it: ``#`` and its SHA-256 in hex."""
    return "#" + hashlib.sha256(password.encode("utf-8")).hexdigest()


def redis_acl_lines(keys: KeySpace, passwords: dict[str, str]) -> list[str]:
    """The tenant's Redis users as ACL file lines (``user <name> on #<sha256> …``): the
    rules of :func:`apply_redis`, with hashed passwords (the file opens nothing)."""
    lines = []
    for role in REDIS_ROLES:
        rules = [r for r in redis_acl_rules(keys, role, passwords[role]) if r != "reset"]
        rules = [acl_password_hash(r[1:]) if r.startswith(">") else r for r in rules]
        lines.append(" ".join(["user", principal(keys.tenant, role), *rules]))
    return lines


def save_redis_acl(client: Any) -> bool:
    """``ACL SAVE``: True when the server keeps its users in an ACL file (a restart
    keeps them), False when it has none (they live in its memory only)."""
    import redis

    try:
        client.execute_command("ACL", "SAVE")
    except redis.ResponseError as exc:
        if "ACL file" in str(exc) or "aclfile" in str(exc).lower():
            return False
        raise AccessError(f"Redis refused ACL SAVE: {exc}") from exc
    return True


def apply_redis(client: Any, keys: KeySpace, passwords: dict[str, str]) -> dict[str, Any]:
    """``ACL SETUSER`` for each Redis role of the tenant, then ``ACL SAVE`` if the server
    has an ACL file; returns users and rules (no passwords) and ``persisted``."""
    import redis

    applied: dict[str, list[str]] = {}
    for role in REDIS_ROLES:
        user = principal(keys.tenant, role)
        rules = redis_acl_rules(keys, role, passwords[role])
        try:
            client.execute_command("ACL", "SETUSER", user, *rules)
        except redis.ResponseError as exc:
            raise AccessError(
                f"Redis refused ACL SETUSER {user}: {exc} — connect as a Redis user allowed "
                "to run ACL (the default user of the local stack is)") from exc
        applied[user] = [r for r in rules if not r.startswith(">")]
    return {"users": applied, "persisted": save_redis_acl(client)}


def apply_redis_cluster(client: Any, keys: KeySpace, passwords: dict[str, str]
                        ) -> dict[str, Any]:
    """:func:`apply_redis` on every node of a Redis Cluster, masters and replicas (ACL
    users are per node, and a failover promotes a replica). ``client``: a
    ``redis.cluster.RedisCluster``; the nodes come from ``CLUSTER NODES``, reached with
    the client's own credentials. A node that is down is an error naming it (its users
    would be missing after it returns). Returns the users, their rules and the nodes."""
    import redis

    listed = client.cluster_nodes()
    nodes = sorted(addr.split("@")[0] for addr, info in listed.items()
                   if "noaddr" not in str(info.get("flags", "")))
    if not nodes:
        raise AccessError("the Redis Cluster lists no node: check the Redis URL")
    kwargs = {k: v for k, v in client.nodes_manager.connection_kwargs.items()
              if k in ("username", "password", "socket_timeout", "socket_connect_timeout",
                       "ssl", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")}
    applied: dict[str, Any] = {}
    for addr in nodes:
        host, _, port = addr.rpartition(":")
        conn = redis.Redis(host=host, port=int(port), **kwargs)
        try:
            applied = apply_redis(conn, keys, passwords)
        except AccessError as exc:
            raise AccessError(f"on Redis node {addr}: {exc}") from exc
        except redis.RedisError as exc:
            raise AccessError(f"Redis node {addr} did not take the users ({exc}): bring it "
                              "back and apply again") from exc
        finally:
            conn.close()
    return {**applied, "nodes": nodes}


def redis_url_for(base_url: str, user: str, password: str) -> str:
    """``base_url`` with ``user:password@`` put in front of its host."""
    scheme, sep, rest = base_url.partition("://")
    if not sep or scheme not in ("redis", "rediss"):
        raise AccessError(f"cannot put credentials into {base_url!r}: use redis:// or "
                          "rediss:// URLs")
    rest = rest.rpartition("@")[2]
    from urllib.parse import quote

    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{rest}"
