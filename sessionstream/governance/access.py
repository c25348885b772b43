"""Access scopes per tenant and role: Redis ACL users and Kafka ACL bindings.

Principals (seed §4.13 "who may read the raw log, the projections, the transcript"):

========== ============================================================================
role       may
========== ============================================================================
writer     a tenant's agent writers and its worker: read and write the tenant's keys
           (leases, indexes, projection rows, key store), run the Lua scripts; produce
           to and consume the tenant's topics
reader     dashboards and services: read the tenant's projection rows and feeds, no
           writes; Kafka: none (projections are Redis)
auditor    the raw log: read (consume) the tenant's topics; Redis: read only
admin      everything (operators)
========== ============================================================================

Redis: one ACL user per tenant and role, restricted to the tenant's hash-tagged key
prefix (``<prefix>:{<tenant>/*`` for its sessions, ``<prefix>:{<tenant>}:*`` for the
tenant's own keys) — a tag cannot fake another tenant's, the tenant name allows no
brace or slash. Kafka: prefixed ACLs on ``sessionstream.<tenant>.`` topics and
``sessionstream-<tenant>`` consumer groups, for a SASL/SCRAM principal
``User:<tenant>-<role>``. Passwords come from settings or the environment, never from
code; nothing here logs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = ("writer", "reader", "auditor", "admin")

_REDIS_COMMANDS = {
    # -@dangerous removes KEYS, FLUSHALL, CONFIG, DEBUG…; SCAN stays (key-pattern checked)
    "writer": ["+@read", "+@write", "+@scripting", "+@transaction", "+@connection",
               "+@keyspace", "-@dangerous"],
    "reader": ["+@read", "+@connection", "-@dangerous"],
    "auditor": ["+@read", "+@connection", "-@dangerous"],
    "admin": ["+@all"],
}


class AccessError(ValueError):
    """An access request that names an unknown role or an unusable tenant."""


def _check(tenant: str, role: str) -> None:
    if role not in ROLES:
        raise AccessError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if not tenant or any(c in tenant for c in "{}/*?[]\\ "):
        raise AccessError(f"tenant {tenant!r} cannot be used in a key pattern")


def redis_username(tenant: str, role: str) -> str:
    return f"ss-{tenant}-{role}"


def redis_acl_rules(tenant: str, role: str, *, prefix: str = "ss") -> list[str]:
    """The ``ACL SETUSER`` rules of a tenant's role (without the password)."""
    _check(tenant, role)
    if role == "admin":
        return ["on", "resetkeys", "~*", "resetchannels", "&*", "-@all", "+@all"]
    keys = [f"~{prefix}:{{{tenant}/*", f"~{prefix}:{{{tenant}}}:*"]
    if role in ("reader", "auditor"):
        keys = ["%R" + k for k in keys]
    return ["on", "resetkeys", *keys, "resetchannels", "-@all", *_REDIS_COMMANDS[role]]


def apply_redis_user(client: Any, tenant: str, role: str, password: str, *,
                     prefix: str = "ss") -> str:
    """Create or reset the tenant's role user on the Redis ``client`` talks to; its name."""
    if not password:
        raise AccessError("a Redis ACL user needs a password (from settings or the "
                          "environment, never from code)")
    name = redis_username(tenant, role)
    client.execute_command("ACL", "SETUSER", name, "reset",
                           *redis_acl_rules(tenant, role, prefix=prefix), f">{password}")
    return name


@dataclass(frozen=True)
class KafkaAcl:
    """One Kafka ACL binding, as ``kafka-acls`` or AdminClient.create_acls takes it."""

    principal: str
    resource_type: str  # TOPIC | GROUP | CLUSTER
    pattern_type: str  # PREFIXED | LITERAL
    name: str
    operation: str  # READ | WRITE | DESCRIBE | ALL …
    permission: str = "ALLOW"


def kafka_principal(tenant: str, role: str) -> str:
    return f"User:{tenant}-{role}"


def kafka_acls(tenant: str, role: str) -> list[KafkaAcl]:
    """The prefixed ACLs a tenant's role needs on its topics and groups (StandardAuthorizer)."""
    _check(tenant, role)
    who = kafka_principal(tenant, role)
    topics, groups = f"sessionstream.{tenant}.", f"sessionstream-{tenant}"
    if role == "admin":
        return [KafkaAcl(who, "CLUSTER", "LITERAL", "kafka-cluster", "ALL"),
                KafkaAcl(who, "TOPIC", "PREFIXED", topics, "ALL"),
                KafkaAcl(who, "GROUP", "PREFIXED", groups, "ALL")]
    if role == "reader":
        return []
    out = [KafkaAcl(who, "TOPIC", "PREFIXED", topics, op) for op in ("READ", "DESCRIBE")]
    out.append(KafkaAcl(who, "GROUP", "PREFIXED", groups, "READ"))
    if role == "writer":
        out += [KafkaAcl(who, "TOPIC", "PREFIXED", topics, "WRITE"),
                KafkaAcl(who, "CLUSTER", "LITERAL", "kafka-cluster", "IDEMPOTENT_WRITE")]
    return out


def to_admin_bindings(acls: list[KafkaAcl]) -> list[Any]:
    """confluent-kafka ``AclBinding`` s for ``AdminClient.create_acls``."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    # librdkafka names the cluster resource BROKER
    kinds = {"CLUSTER": "BROKER"}
    return [AclBinding(ResourceType[kinds.get(a.resource_type, a.resource_type)], a.name,
                       ResourcePatternType[a.pattern_type], a.principal, "*",
                       AclOperation[a.operation], AclPermissionType[a.permission])
            for a in acls]
