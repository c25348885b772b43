"""Access scopes: which principal of a tenant may do what, on Kafka and on Redis.

The plan is pure data (no client library): ``sessionstream acl apply`` hands it to the
Kafka admin API (SCRAM users, StandardAuthorizer ACLs) and to Redis (``ACL SETUSER``).
docs/operations.md, "Access scopes", has the same table in prose.

Principals of tenant ``T`` (roles without ``-`` or ``.``, so a name splits back uniquely):

- ``sessionstream.T.writer``: an agent-side writer (appends, reads its sessions back);
- ``sessionstream.T.worker``: the projection worker (reads events, writes dead letters,
  owns the projections and change feeds in Redis);
- ``sessionstream.T.auditor``: reads the raw log, writes nothing;
- ``sessionstream.T.reader``: the dashboard and other readers of projections (Redis only);
- the cluster's admin is a super user (broker config), never created here.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionstream.core.rows import KeySpace

#: The tenant roles and what each is for (the CLI's help and the docs list these).
ROLES: dict[str, str] = {
    "writer": "appends to the tenant's events topic and reads its sessions back",
    "worker": "folds the events into Redis projections; writes dead letters",
    "auditor": "reads the tenant's raw event log; writes nothing",
    "reader": "reads projections in Redis (dashboard, views); writes nothing",
}
#: Roles that get a Kafka principal, and those that get a Redis user.
KAFKA_ROLES = ("writer", "worker", "auditor")
REDIS_ROLES = ("writer", "worker", "reader")
#: Every tenant resource's name starts with this (topics and, by convention, groups).
TOPIC_PREFIX = "sessionstream.{tenant}."
#: Groups a writer's read-back consumer uses (assign() only; it never joins or commits).
READBACK_GROUP_PREFIX = "sessionstream-readback-"


def principal(tenant: str, role: str) -> str:
    """The SCRAM user (Kafka) and ACL user (Redis) name of ``role`` in ``tenant``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    return f"sessionstream.{tenant}.{role}"


@dataclass(frozen=True, slots=True)
class KafkaAcl:
    """One ALLOW binding: ``principal`` may ``operation`` on a resource.

    ``resource`` is ``topic`` or ``group``; ``pattern`` is ``prefixed`` or ``literal``.
    """

    principal: str
    resource: str
    pattern: str
    name: str
    operation: str

    def describe(self) -> str:
        return (f"User:{self.principal} {self.operation} {self.resource} "
                f"{self.pattern}:{self.name}")


def kafka_acls(tenant: str, *, dlq_topic: str | None = None,
               groups: tuple[str, ...] = ()) -> list[KafkaAcl]:
    """The ALLOW bindings of the tenant's principals (everything else is denied).

    ``dlq_topic``: the worker's dead-letter topic (default ``sessionstream.T.dlq``);
    ``groups``: further literal consumer groups of the worker (its configured group when
    that is not under the tenant's prefix). Nothing grants a create, delete, alter or
    cluster operation: topics are the admin's (``topics ensure``).
    """
    prefix = TOPIC_PREFIX.format(tenant=tenant)
    dlq = dlq_topic or f"{prefix}dlq"
    writer, worker, auditor = (principal(tenant, r) for r in KAFKA_ROLES)
    acls = [
        # writer: produce (idempotent: WRITE on the topic is enough since KIP-679), read
        # its sessions back, and read the topic's max.message.bytes.
        KafkaAcl(writer, "topic", "prefixed", prefix, "write"),
        KafkaAcl(writer, "topic", "prefixed", prefix, "read"),
        KafkaAcl(writer, "topic", "prefixed", prefix, "describe_configs"),
        KafkaAcl(writer, "group", "prefixed", READBACK_GROUP_PREFIX, "read"),
        # worker: consume the events, produce dead letters, own the tenant's groups.
        KafkaAcl(worker, "topic", "prefixed", prefix, "read"),
        KafkaAcl(worker, "topic", "prefixed", prefix, "describe_configs"),
        KafkaAcl(worker, "topic", "literal", dlq, "write"),
        KafkaAcl(worker, "group", "prefixed", prefix, "read"),
        KafkaAcl(worker, "group", "prefixed", READBACK_GROUP_PREFIX, "read"),
        # auditor: read the raw log (its own groups under the tenant's prefix).
        KafkaAcl(auditor, "topic", "prefixed", prefix, "read"),
        KafkaAcl(auditor, "group", "prefixed", prefix, "read"),
        KafkaAcl(auditor, "group", "prefixed", READBACK_GROUP_PREFIX, "read"),
    ]
    acls += [KafkaAcl(worker, "group", "literal", g, "read")
             for g in groups if not g.startswith(prefix)]
    return acls


#: Commands no tenant user gets: key-space listing (SCAN/KEYS would show other tenants'
#: key names, DBSIZE the count of every tenant's keys), server administration and
#: anything that flushes, kills or reconfigures what all tenants share (the script cache,
#: functions: FUNCTION FLUSH and SCRIPT FLUSH are not in @dangerous). Every keyless
#: command a role may still run is named in ``tests/integration/test_secure_redis.py``.
_DENIED = ("-@dangerous", "-@admin", "-scan", "-keys", "-randomkey", "-dbsize",
           "-function", "-script|flush", "-script|kill")
#: A Redis Cluster client reads the slot map first (CLUSTER SLOTS, or SHARDS/NODES in
#: newer clients): the read-only topology subcommands, in no data category. On a single
#: node they answer "cluster support disabled" and grant nothing.
_TOPOLOGY = ("+cluster|slots", "+cluster|shards", "+cluster|nodes", "+cluster|info")
#: What each Redis role may run (ACL categories, then explicit denials). ``TIME`` is in
#: no data category, and the lease scripts read the server clock with it.
REDIS_COMMANDS: dict[str, tuple[str, ...]] = {
    # leases (Lua scripts), session index, epochs, data keys (the fleet key store)
    "writer": ("+@read", "+@write", "+@scripting", "+@connection", "+@transaction",
               "+time", *_TOPOLOGY, *_DENIED),
    # projections (hashes), change feeds (streams), progress, generations
    "worker": ("+@read", "+@write", "+@scripting", "+@connection", "+@transaction",
               "+@stream", "+time", *_TOPOLOGY, *_DENIED),
    # views, indexes and the change feed, read-only (XREAD BLOCK included)
    "reader": ("+@read", "+@connection", "-@write", "-@scripting", *_TOPOLOGY, *_DENIED),
}


def redis_key_patterns(keys: KeySpace) -> tuple[str, str]:
    """Glob patterns of every key of the tenant: its session keys and its tenant keys.

    Session keys are ``<prefix>:{<tenant>/<session>}:…`` and tenant keys
    ``<prefix>:{<tenant>}:…``; the tenant is followed by ``/`` or ``}`` in both, so
    tenant ``a`` never matches tenant ``ab``. Settings forbid glob characters in the
    prefix and the tenant, so the patterns match literally.
    """
    return (f"{keys.prefix}:{{{keys.tenant}/*", f"{keys.prefix}:{{{keys.tenant}}}:*")


def redis_acl_rules(keys: KeySpace, role: str, password: str) -> list[str]:
    """``ACL SETUSER <user>`` arguments: reset, enable, the password, keys, commands."""
    if role not in REDIS_COMMANDS:
        raise ValueError(f"role {role!r} has no Redis user: use one of {', '.join(REDIS_ROLES)}")
    patterns = [f"~{p}" for p in redis_key_patterns(keys)]
    return ["reset", "on", f">{password}", "resetchannels", *patterns,
            "-@all", *REDIS_COMMANDS[role]]
