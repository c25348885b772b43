"""Typed, frozen runtime settings, read from the environment once and validated there.

The composition root of each process (the ``sessionstream`` command, the worker's
entry points) builds one ``Settings`` at start and passes it down; nothing else reads
``SESSIONSTREAM_*`` variables, and messages that name a variable take the name from
:class:`Env`. Fields cover the servers and tenant, the writer's Redis keys, the
worker (group, batching, engine, logging, stage trace), the dashboard's Redis, the
local stack (ports, cache) and governance.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sessionstream.core.errors import SessionStreamError
from sessionstream.core.rows import DEFAULT_PREFIX, KeySpace

DEFAULT_KAFKA_PORT = 19092
DEFAULT_KAFKA_CONTROLLER_PORT = 19093
DEFAULT_REDIS_PORT = 16379
# The secure Kafka profile (`sessionstream up --secure`): SASL/SCRAM + StandardAuthorizer.
DEFAULT_SECURE_KAFKA_PORT = 19192
DEFAULT_SECURE_KAFKA_CONTROLLER_PORT = 19193
# ... and its Redis: ACL users only (no anonymous `default`), kept in an ACL file.
DEFAULT_SECURE_REDIS_PORT = 19379
#: librdkafka's security.protocol values we accept, and the SASL mechanisms.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")

# A tenant becomes part of topic names (ACL prefixes) and of Redis hash tags, so it is
# restricted to characters that are safe in both and cannot fake a separator.
_TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9._-]+:\d{1,5}$")
_REDIS_URL_RE = re.compile(r"^(rediss?://[^/\s?]+(/\d*)?(\?\S*)?|unix://\S+)$")
# A key prefix precedes the hash tag: braces would move the tag, spaces break tooling.
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HTTP_URL_RE = re.compile(r"^https?://[^\s/?#]+(/\S*)?$")
#: How records are framed on the events topic (schemas/README.md, "Wire formats").
WIRES = ("single-object", "confluent")
#: ``worker_instance`` values: a stable id derived from the host (streams.membership), or
#: none (dynamic membership); any other value is the consumer's ``group.instance.id``.
WORKER_INSTANCE_AUTO = "auto"
WORKER_INSTANCE_DYNAMIC = "dynamic"
_INSTANCE_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(SessionStreamError, ValueError):
    """An environment variable is missing its expected shape; the message says which and how."""


class Env:
    """The names of the environment variables, for messages that tell a user what to set."""

    KAFKA_BOOTSTRAP = "SESSIONSTREAM_KAFKA_BOOTSTRAP"
    REDIS_URL = "SESSIONSTREAM_REDIS_URL"
    TENANT = "SESSIONSTREAM_TENANT"
    PARTITIONS = "SESSIONSTREAM_PARTITIONS"
    REPLICATION_FACTOR = "SESSIONSTREAM_REPLICATION_FACTOR"
    STATE_DIR = "SESSIONSTREAM_STATE_DIR"
    ATTACHMENT_DIR = "SESSIONSTREAM_ATTACHMENT_DIR"
    KEY_PREFIX = "SESSIONSTREAM_KEY_PREFIX"
    EVENTS_TOPIC = "SESSIONSTREAM_EVENTS_TOPIC"
    DLQ_TOPIC = "SESSIONSTREAM_DLQ_TOPIC"
    MEMORY_TOPIC = "SESSIONSTREAM_MEMORY_TOPIC"
    STREAMS_GROUP = "SESSIONSTREAM_STREAMS_GROUP"
    WORKER_INSTANCE = "SESSIONSTREAM_WORKER_INSTANCE"
    BATCH_MAX = "SESSIONSTREAM_BATCH_MAX"
    LEASE_TTL_MS = "SESSIONSTREAM_LEASE_TTL_MS"
    MEMORY_EMBEDDER = "SESSIONSTREAM_MEMORY_EMBEDDER"
    BATCH_WITHIN_MS = "SESSIONSTREAM_BATCH_WITHIN_MS"
    CONVERGE_SESSIONS = "SESSIONSTREAM_CONVERGE_SESSIONS"
    ENGINE = "SESSIONSTREAM_ENGINE"
    LOGLEVEL = "SESSIONSTREAM_LOGLEVEL"
    TRACE_STAGES = "SESSIONSTREAM_TRACE_STAGES"
    FAUST_DATADIR = "SESSIONSTREAM_FAUST_DATADIR"
    KAFKA_PORT = "SESSIONSTREAM_KAFKA_PORT"
    KAFKA_CONTROLLER_PORT = "SESSIONSTREAM_KAFKA_CONTROLLER_PORT"
    REDIS_PORT = "SESSIONSTREAM_REDIS_PORT"
    CACHE_DIR = "SESSIONSTREAM_CACHE_DIR"
    TENANT_KEY = "SESSIONSTREAM_TENANT_KEY"
    TENANT_KEY_DIR = "SESSIONSTREAM_TENANT_KEY_DIR"
    KEY_STORE = "SESSIONSTREAM_KEY_STORE"
    ENCRYPTION = "SESSIONSTREAM_ENCRYPTION"
    PRINCIPAL = "SESSIONSTREAM_PRINCIPAL"
    RETENTION = "SESSIONSTREAM_RETENTION"
    KAFKA_SECURITY_PROTOCOL = "SESSIONSTREAM_KAFKA_SECURITY_PROTOCOL"
    KAFKA_SASL_MECHANISM = "SESSIONSTREAM_KAFKA_SASL_MECHANISM"
    KAFKA_SASL_USERNAME = "SESSIONSTREAM_KAFKA_SASL_USERNAME"
    KAFKA_SASL_PASSWORD = "SESSIONSTREAM_KAFKA_SASL_PASSWORD"
    SECURE_KAFKA_PORT = "SESSIONSTREAM_SECURE_KAFKA_PORT"
    SECURE_REDIS_PORT = "SESSIONSTREAM_SECURE_REDIS_PORT"
    SECURE_KAFKA_CONTROLLER_PORT = "SESSIONSTREAM_SECURE_KAFKA_CONTROLLER_PORT"
    DASHBOARD_TOKEN = "SESSIONSTREAM_DASHBOARD_TOKEN"
    FOLD = "SESSIONSTREAM_FOLD"
    APPEND = "SESSIONSTREAM_APPEND"
    REDIS_CLUSTER = "SESSIONSTREAM_REDIS_CLUSTER"
    WIRE = "SESSIONSTREAM_WIRE"
    SCHEMA_REGISTRY_URL = "SESSIONSTREAM_SCHEMA_REGISTRY_URL"
    METRICS_PORT = "SESSIONSTREAM_METRICS_PORT"
    CLUSTER_KAFKA_PORTS = "SESSIONSTREAM_CLUSTER_KAFKA_PORTS"
    CLUSTER_CONTROLLER_PORTS = "SESSIONSTREAM_CLUSTER_CONTROLLER_PORTS"
    CLUSTER_REDIS_PORTS = "SESSIONSTREAM_CLUSTER_REDIS_PORTS"
    CONTEXT_BUDGET = "SESSIONSTREAM_CONTEXT_BUDGET"
    PRICES = "SESSIONSTREAM_PRICES"


#: The worker's engines: faust, or the confluent-kafka consumer loop (docs/adr/0003).
ENGINES = ("faust", "kafka")
#: Long-term memory's embedders (integrations/memory_embed.py): ``hashing`` needs nothing
#: (words and spellings); ``model`` is the small static model of the ``memory-model`` extra.
EMBEDDERS = ("hashing", "model")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def project_root() -> Path:
    """The source checkout this package runs from (where ``pyproject.toml`` lives)."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


@dataclass(frozen=True)
class Settings:
    """Where the servers are and which tenant's topics to use."""

    kafka_bootstrap: str = f"127.0.0.1:{DEFAULT_KAFKA_PORT}"
    # repr=False: the URL may carry a Redis ACL user's password (access scopes).
    redis_url: str = field(default=f"redis://127.0.0.1:{DEFAULT_REDIS_PORT}/0", repr=False)
    tenant: str = "default"
    partitions: int = 12
    replication_factor: int = 1
    state_dir: Path = Path(".state")
    attachment_dir: Path = Path(".state/attachments")
    key_prefix: str = DEFAULT_PREFIX  # Redis keys of leases, indexes and projections
    events_topic_override: str | None = None  # else sessionstream.<tenant>.events
    dlq_topic_override: str | None = None  # else sessionstream.<tenant>.dlq
    memory_topic_override: str | None = None  # else sessionstream.<tenant>.memory
    redis_cluster: bool = False  # redis_url names one node of a Redis Cluster
    wire: str = "single-object"  # or "confluent" (Schema Registry framing)
    schema_registry_url: str | None = None  # needed by wire="confluent"
    metrics_port: int | None = None  # /metrics, /healthz, /readyz of worker and compactor
    #: The context budget in estimated tokens: the compactor's default and the line the
    #: dashboard draws on a session's context plot.
    context_budget: int = 32_000
    #: A JSON file of model prices (USD per million tokens) the plots' costs come from
    #: (``sessionstream.core.series.Prices``); None: no costs.
    prices_file: Path | None = None
    # The cluster profile's loopback ports (sessionstream.localstack.cluster); empty: defaults.
    cluster_kafka_ports: tuple[int, ...] = ()
    cluster_controller_ports: tuple[int, ...] = ()
    cluster_redis_ports: tuple[int, ...] = ()
    # Governance (docs/operations.md, "Sensitive data"):
    encryption: bool = True  # SESSIONSTREAM_ENCRYPTION=off: this tenant opts out explicitly
    key_store: str = "file"  # "file" (under key_dir) or "redis" (a fleet of nodes)
    key_dir: Path = Path(".state/keys")  # file key store; tenant key files (0600)
    tenant_key: str | None = field(default=None, repr=False)  # "<version>:<base64>,…"
    # tenant key files, one directory per tenant; None: beside the state dir (tenant_keys_dir)
    tenant_key_dir: Path | None = None
    retention: tuple[tuple[str, int], ...] = ()  # (data class, milliseconds) per class
    principal: str = "operator"  # who deletes/holds, recorded in audit events
    fold: str = "auto"  # replay's and the kafka worker's fold: auto | native (Rust) | python
    append: str = "auto"  # the session writer's append path: auto | native (Rust) | python
    #: How long a writer's lease outlives its last renewal (a writer that died mid-write
    #: blocks the session's next writer at most this long; a live one renews it).
    lease_ttl_ms: int = 30_000
    #: long-term memory's search embedder (EMBEDDERS; docs/adr/0030, A4)
    memory_embedder: str = "hashing"
    # The projection worker (streams/worker.py):
    streams_group: str = "sessionstream-projections"  # its consumer group
    # The worker's consumer instance id (static group membership, streams.membership):
    # auto (host name + a per-host slot) | dynamic | an explicit group.instance.id.
    worker_instance: str = WORKER_INSTANCE_AUTO
    batch_max: int = 2000  # records per batch at most (a live batch is bounded by the wait)
    batch_within_ms: int = 10  # how long a batch waits to fill
    converge_sessions: int = 64  # sessions checked per step after a state_version bump
    engine: str = "kafka"  # or "faust" (docs/adr/0003-faust-limits.md)
    log_level: str = "info"
    trace_stages: Path | None = None  # append per-batch stage times here (streams.trace)
    # The faust engine's data directory (faust's own default is `<app id>-data/` in the
    # working directory); a worker uses `<faust_datadir>/<consumer group>`.
    faust_datadir: Path = Path(".state/faust")
    # Access scopes (docs/operations.md, "Access scopes"): the Kafka principal of this
    # process. Empty username: the plaintext local default (no SASL).
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = field(default=None, repr=False)
    #: Dashboard bearer tokens, (token, tenant) pairs; empty: the dashboard refuses all.
    dashboard_tokens: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # The local stack (sessionstream.localstack.stack): loopback ports and the jar cache.
    secure_kafka_port: int = DEFAULT_SECURE_KAFKA_PORT
    secure_kafka_controller_port: int = DEFAULT_SECURE_KAFKA_CONTROLLER_PORT
    secure_redis_port: int = DEFAULT_SECURE_REDIS_PORT
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    redis_port: int = DEFAULT_REDIS_PORT
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "sessionstream")

    def __post_init__(self) -> None:
        _check_bootstrap(self.kafka_bootstrap)
        _check_redis_url(self.redis_url)
        if not _TENANT_RE.match(self.tenant):
            raise SettingsError(
                f"SESSIONSTREAM_TENANT={self.tenant!r} is not a valid tenant: use 1-63 of "
                "a-z 0-9 _ - (starting with a letter or digit)"
            )
        if not 1 <= self.partitions <= 10_000:
            raise SettingsError(
                f"SESSIONSTREAM_PARTITIONS={self.partitions} is out of range: use 1..10000"
            )
        if not _PREFIX_RE.match(self.key_prefix):
            raise SettingsError(
                f"SESSIONSTREAM_KEY_PREFIX={self.key_prefix!r} is not a key prefix: use 1-64 "
                "of A-Z a-z 0-9 . _ : - (no braces: they would move the Redis hash tag)"
            )
        for name, topic in (("SESSIONSTREAM_EVENTS_TOPIC", self.events_topic_override),
                            ("SESSIONSTREAM_DLQ_TOPIC", self.dlq_topic_override),
                            ("SESSIONSTREAM_MEMORY_TOPIC", self.memory_topic_override)):
            if topic is not None and not _TOPIC_RE.match(topic):
                raise SettingsError(f"{name}={topic!r} is not a Kafka topic name: use 1-249 "
                                    "of A-Z a-z 0-9 . _ -")
        if not _INSTANCE_RE.match(self.worker_instance):
            raise SettingsError(
                f"{Env.WORKER_INSTANCE}={self.worker_instance!r} is not a consumer instance "
                f"id: use {WORKER_INSTANCE_AUTO!r} (the default: host name and a slot), "
                f"{WORKER_INSTANCE_DYNAMIC!r} (no static membership), or 1-249 of "
                "A-Z a-z 0-9 . _ - unique per worker replica"
            )
        if not 1 <= self.replication_factor <= 32:
            raise SettingsError(
                f"SESSIONSTREAM_REPLICATION_FACTOR={self.replication_factor} is out of range: "
                "use 1 locally, 3 on a real cluster"
            )

        hosts = self.redis_url.split("://", 1)[-1].split("/", 1)[0]
        if "," in hosts and not self.redis_cluster:
            raise SettingsError(
                f"SESSIONSTREAM_REDIS_URL={self.redis_url!r} lists several nodes: that is a "
                "Redis Cluster, set SESSIONSTREAM_REDIS_CLUSTER=true (or name one node)")
        if self.wire not in WIRES:
            raise SettingsError(
                f"SESSIONSTREAM_WIRE={self.wire!r} is not a wire format: use "
                + " or ".join(WIRES))
        if self.schema_registry_url is not None and not _HTTP_URL_RE.match(
                self.schema_registry_url):
            raise SettingsError(
                f"SESSIONSTREAM_SCHEMA_REGISTRY_URL={self.schema_registry_url!r} is not an "
                "http(s) URL, e.g. http://127.0.0.1:18081/apis/ccompat/v7")
        if self.wire == "confluent" and self.schema_registry_url is None:
            raise SettingsError(
                "SESSIONSTREAM_WIRE=confluent needs SESSIONSTREAM_SCHEMA_REGISTRY_URL (the "
                "registry's Confluent-compatible API); or use SESSIONSTREAM_WIRE=single-object")
        if self.context_budget < 1:
            raise SettingsError(f"{Env.CONTEXT_BUDGET}={self.context_budget} is not a number "
                                "of tokens (1 or more)")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise SettingsError(
                f"SESSIONSTREAM_METRICS_PORT={self.metrics_port} is not a TCP port (0-65535)")

        keys, rings = os.path.abspath(self.key_dir), os.path.abspath(self.tenant_keys_dir)
        if os.path.commonpath([keys, rings]) in (keys, rings):
            raise SettingsError(
                f"{Env.TENANT_KEY_DIR}={self.tenant_keys_dir} and SESSIONSTREAM_KEY_DIR="
                f"{self.key_dir} overlap: keep the tenant keys out of the data keys' tree "
                "(a copy of one must not hold the other)")
        if self.key_store not in KEY_STORES:
            raise SettingsError(
                f"SESSIONSTREAM_KEY_STORE={self.key_store!r} is not a key store: use "
                + " or ".join(KEY_STORES))
        for cls, ms in self.retention:
            if not _retained(cls) or ms <= 0:
                raise SettingsError(
                    f"SESSIONSTREAM_RETENTION: {cls}={ms}ms is not a retention: use "
                    "<class>=<n>d|h|m|s with class raw, surface, business or reasoning, "
                    "e.g. raw=30d")
        if self.fold not in FOLDS:
            raise SettingsError(
                f"{Env.FOLD}={self.fold!r} is not a fold path: use "
                + ", ".join(FOLDS) + " (native needs the extension built by make install)")
        if self.append not in FOLDS:
            raise SettingsError(
                f"{Env.APPEND}={self.append!r} is not an append path: use "
                + ", ".join(FOLDS) + " (native needs the extension built by make install)")
        if not self.principal or len(self.principal) > 200:
            raise SettingsError("SESSIONSTREAM_PRINCIPAL must be 1-200 characters")
        self._check_security()
        self._check_worker_and_stack()

    def _check_worker_and_stack(self) -> None:
        for name, value, low in ((Env.BATCH_MAX, self.batch_max, 1),
                                 (Env.BATCH_WITHIN_MS, self.batch_within_ms, 0),
                                 (Env.CONVERGE_SESSIONS, self.converge_sessions, 1)):
            if not low <= value <= 1_000_000:
                raise SettingsError(f"{name}={value} is out of range: use {low}..1000000")
        if not 1_000 <= self.lease_ttl_ms <= 3_600_000:
            raise SettingsError(f"{Env.LEASE_TTL_MS}={self.lease_ttl_ms} is out of range: use "
                                "1000..3600000 (milliseconds)")
        _check_embedder(self.memory_embedder)
        if self.engine not in ENGINES:
            raise SettingsError(f"{Env.ENGINE}={self.engine!r} is not an engine: use "
                                + " or ".join(ENGINES))
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"{Env.LOGLEVEL}={self.log_level!r} is not a log level: use "
                                + ", ".join(LOG_LEVELS))
        if not self.streams_group:
            raise SettingsError(f"{Env.STREAMS_GROUP} must not be empty")
        for name, port in ((Env.KAFKA_PORT, self.kafka_port),
                           (Env.KAFKA_CONTROLLER_PORT, self.kafka_controller_port),
                           (Env.REDIS_PORT, self.redis_port)):
            if not 0 < port < 65536:
                raise SettingsError(f"{name}={port} is not a TCP port (1-65535)")

    def _check_security(self) -> None:
        if self.kafka_security_protocol not in SECURITY_PROTOCOLS:
            raise SettingsError(
                f"{Env.KAFKA_SECURITY_PROTOCOL}={self.kafka_security_protocol!r} is not a "
                "security protocol: use " + ", ".join(SECURITY_PROTOCOLS))
        if self.kafka_sasl_mechanism not in SASL_MECHANISMS:
            raise SettingsError(
                f"{Env.KAFKA_SASL_MECHANISM}={self.kafka_sasl_mechanism!r} is not a SASL "
                "mechanism: use " + ", ".join(SASL_MECHANISMS))
        sasl = self.kafka_security_protocol.startswith("SASL_")
        if sasl and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise SettingsError(
                f"{Env.KAFKA_SECURITY_PROTOCOL}={self.kafka_security_protocol} needs "
                f"{Env.KAFKA_SASL_USERNAME} and {Env.KAFKA_SASL_PASSWORD} (the principal's "
                "SCRAM credentials, e.g. from `sessionstream acl apply`)")
        if not sasl and self.kafka_sasl_username:
            raise SettingsError(
                f"{Env.KAFKA_SASL_USERNAME} is set but {Env.KAFKA_SECURITY_PROTOCOL}="
                f"{self.kafka_security_protocol}: set it to SASL_PLAINTEXT or SASL_SSL")
        for token, tenant in self.dashboard_tokens:
            if len(token) < 16 or not _TENANT_RE.match(tenant):
                raise SettingsError(
                    f"{Env.DASHBOARD_TOKEN}: each entry is <tenant>:<token> with a valid "
                    "tenant and a token of at least 16 characters (e.g. from "
                    "`sessionstream acl env --role reader`)")

    def kafka_security(self) -> dict[str, str]:
        """The librdkafka keys that authenticate this process's principal (none: plaintext).

        Every Kafka client of the package (producers, consumers, admin clients) gets them
        through ``producers.kafka_clients.client_config``.
        """
        if self.kafka_security_protocol == "PLAINTEXT":
            return {}
        out = {"security.protocol": self.kafka_security_protocol}
        if self.kafka_security_protocol.startswith("SASL_"):
            out["sasl.mechanism"] = self.kafka_sasl_mechanism
            out["sasl.username"] = self.kafka_sasl_username or ""
            out["sasl.password"] = self.kafka_sasl_password or ""
        return out

    @property
    def tenant_keys_dir(self) -> Path:
        """Where the tenant key files are: the setting, else apart from the data keys —
        ``<state dir>-tenant-keys`` beside the state dir when the data keys are in their
        default place (``<state dir>/keys``: a backup of the state dir holds no tenant
        key), else ``<key dir>-tenant-keys`` beside the key dir."""
        if self.tenant_key_dir is not None:
            return self.tenant_key_dir
        state, keys = os.path.abspath(self.state_dir), os.path.abspath(self.key_dir)
        if keys == os.path.join(state, "keys"):
            return Path(f"{state}-tenant-keys")
        return Path(f"{keys}-tenant-keys")

    @property
    def keys(self) -> KeySpace:
        """The tenant's Redis key space: the key prefix and the tenant together."""
        return KeySpace(self.tenant, self.key_prefix)

    @property
    def events_topic(self) -> str:
        """The tenant's canonical, never-compacted events topic."""
        return self.events_topic_override or f"sessionstream.{self.tenant}.events"

    @property
    def dlq_topic(self) -> str:
        """The tenant's dead-letter topic for records that cannot be decoded."""
        return self.dlq_topic_override or f"sessionstream.{self.tenant}.dlq"

    @property
    def memory_topic(self) -> str:
        """The tenant's long-term memory log (docs/adr/0030), keyed by namespace."""
        return self.memory_topic_override or f"sessionstream.{self.tenant}.memory"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``SESSIONSTREAM_*`` variables (``os.environ`` by default).

        Unset variables take the local-stack defaults; if only a port variable is set
        (``SESSIONSTREAM_KAFKA_PORT``, ``SESSIONSTREAM_REDIS_PORT``) the address follows it.
        """
        env = os.environ if env is None else env
        kafka_port = _port(env, Env.KAFKA_PORT, DEFAULT_KAFKA_PORT)
        redis_port = _port(env, Env.REDIS_PORT, DEFAULT_REDIS_PORT)
        state_dir = Path(env.get("SESSIONSTREAM_STATE_DIR") or project_root() / ".state")
        attachment_dir = Path(
            env.get("SESSIONSTREAM_ATTACHMENT_DIR") or state_dir / "attachments"
        )
        return cls(
            kafka_bootstrap=env.get("SESSIONSTREAM_KAFKA_BOOTSTRAP")
            or f"127.0.0.1:{kafka_port}",
            redis_url=env.get("SESSIONSTREAM_REDIS_URL") or f"redis://127.0.0.1:{redis_port}/0",
            tenant=env.get("SESSIONSTREAM_TENANT") or "default",
            partitions=_int(env, "SESSIONSTREAM_PARTITIONS", 12),
            replication_factor=_int(env, "SESSIONSTREAM_REPLICATION_FACTOR", 1),
            state_dir=state_dir,
            attachment_dir=attachment_dir,
            key_prefix=env.get("SESSIONSTREAM_KEY_PREFIX") or DEFAULT_PREFIX,
            events_topic_override=env.get("SESSIONSTREAM_EVENTS_TOPIC") or None,
            dlq_topic_override=env.get("SESSIONSTREAM_DLQ_TOPIC") or None,
            memory_topic_override=env.get("SESSIONSTREAM_MEMORY_TOPIC") or None,
            redis_cluster=_bool(env, "SESSIONSTREAM_REDIS_CLUSTER"),
            wire=env.get("SESSIONSTREAM_WIRE") or "single-object",
            schema_registry_url=env.get("SESSIONSTREAM_SCHEMA_REGISTRY_URL") or None,
            metrics_port=(_int(env, "SESSIONSTREAM_METRICS_PORT", 0)
                          if env.get("SESSIONSTREAM_METRICS_PORT") else None),
            context_budget=_int(env, Env.CONTEXT_BUDGET, 32_000),
            prices_file=Path(env[Env.PRICES]) if env.get(Env.PRICES) else None,
            cluster_kafka_ports=_ports(env, Env.CLUSTER_KAFKA_PORTS),
            cluster_controller_ports=_ports(env, Env.CLUSTER_CONTROLLER_PORTS),
            cluster_redis_ports=_ports(env, Env.CLUSTER_REDIS_PORTS),
            encryption=(_bool(env, "SESSIONSTREAM_ENCRYPTION")
                        if env.get("SESSIONSTREAM_ENCRYPTION") else True),
            key_store=env.get("SESSIONSTREAM_KEY_STORE") or "file",
            key_dir=Path(env.get("SESSIONSTREAM_KEY_DIR") or state_dir / "keys"),
            tenant_key=env.get("SESSIONSTREAM_TENANT_KEY") or None,
            tenant_key_dir=Path(env[Env.TENANT_KEY_DIR]) if env.get(Env.TENANT_KEY_DIR)
            else None,
            retention=_retention(env.get("SESSIONSTREAM_RETENTION") or ""),
            principal=env.get("SESSIONSTREAM_PRINCIPAL") or "operator",
            fold=env.get(Env.FOLD) or "auto",
            append=env.get(Env.APPEND) or "auto",
            lease_ttl_ms=_int(env, Env.LEASE_TTL_MS, 30_000),
            memory_embedder=memory_embedder_from_env(env, check=False),
            streams_group=env.get(Env.STREAMS_GROUP) or "sessionstream-projections",
            worker_instance=env.get(Env.WORKER_INSTANCE) or WORKER_INSTANCE_AUTO,
            batch_max=_int(env, Env.BATCH_MAX, 2000),
            batch_within_ms=_int(env, Env.BATCH_WITHIN_MS, 10),
            converge_sessions=_int(env, Env.CONVERGE_SESSIONS, 64),
            engine=env.get(Env.ENGINE) or "kafka",
            log_level=_log_level(env.get(Env.LOGLEVEL) or "info"),
            trace_stages=Path(env[Env.TRACE_STAGES]) if env.get(Env.TRACE_STAGES) else None,
            faust_datadir=Path(env.get(Env.FAUST_DATADIR) or state_dir / "faust"),
            kafka_security_protocol=(env.get(Env.KAFKA_SECURITY_PROTOCOL) or (
                "SASL_PLAINTEXT" if env.get(Env.KAFKA_SASL_USERNAME) else "PLAINTEXT")).upper(),
            kafka_sasl_mechanism=(env.get(Env.KAFKA_SASL_MECHANISM) or "SCRAM-SHA-512").upper(),
            kafka_sasl_username=env.get(Env.KAFKA_SASL_USERNAME) or None,
            kafka_sasl_password=env.get(Env.KAFKA_SASL_PASSWORD) or None,
            dashboard_tokens=_tokens(env.get(Env.DASHBOARD_TOKEN) or "",
                                     env.get("SESSIONSTREAM_TENANT") or "default"),
            secure_kafka_port=_port(env, Env.SECURE_KAFKA_PORT, DEFAULT_SECURE_KAFKA_PORT),
            secure_kafka_controller_port=_port(env, Env.SECURE_KAFKA_CONTROLLER_PORT,
                                               DEFAULT_SECURE_KAFKA_CONTROLLER_PORT),
            secure_redis_port=_port(env, Env.SECURE_REDIS_PORT, DEFAULT_SECURE_REDIS_PORT),
            kafka_port=kafka_port,
            kafka_controller_port=_port(env, Env.KAFKA_CONTROLLER_PORT,
                                        DEFAULT_KAFKA_CONTROLLER_PORT),
            redis_port=redis_port,
            cache_dir=Path(env.get(Env.CACHE_DIR) or Path.home() / ".cache" / "sessionstream"),
        )


def _log_level(raw: str) -> str:
    """faust's and logging's spellings: crit → critical, warn → warning."""
    raw = raw.strip().lower()
    return {"crit": "critical", "warn": "warning"}.get(raw, raw)


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    port = _int(env, name, default)
    if not 0 < port < 65536:
        raise SettingsError(f"{name}={port} is not a TCP port (1-65535)")
    return port


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not an integer") from None


KEY_STORES = ("file", "redis")
FOLDS = ("auto", "native", "python")
DATA_CLASSES = ("raw", "surface", "business", "reasoning")
_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}


_MEMORY_KIND = re.compile(r"^memory\.[a-z][a-z0-9_-]{0,63}$")


def _retained(name: str) -> bool:
    """A session data class, or ``memory.<kind>`` (long-term memory of that kind)."""
    return name in DATA_CLASSES or bool(_MEMORY_KIND.match(name))


def memory_retention(retention: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """The ``memory.<kind>`` entries of a retention setting: kind -> milliseconds."""
    return {name.removeprefix("memory."): ms for name, ms in retention
            if name.startswith("memory.")}


def _retention(value: str) -> tuple[tuple[str, int], ...]:
    """``raw=30d,surface=365d`` → (("raw", ms), ("surface", ms))."""
    out = []
    for item in filter(None, (p.strip() for p in value.split(","))):
        cls, sep, amount = item.partition("=")
        number, unit = amount[:-1], amount[-1:]
        if not sep or unit not in _UNITS or not number.isdigit() or not _retained(cls):
            raise SettingsError(
                f"SESSIONSTREAM_RETENTION={value!r}: {item!r} is not <class>=<n>d|h|m|s "
                "(class raw, surface, business or reasoning, or memory.<kind> for long-term "
                "memory of a kind), e.g. raw=30d,surface=365d,memory.preference=365d")
        out.append((cls, int(number) * _UNITS[unit]))
    return tuple(out)


def _ports(env: Mapping[str, str], name: str) -> tuple[int, ...]:
    raw = env.get(name) or ""
    if not raw:
        return ()
    parts = [p.strip() for p in raw.split(",")]
    if not all(p.isdigit() and 0 < int(p) < 65536 for p in parts):
        raise SettingsError(f"{name}={raw!r} is not a comma-separated list of TCP ports")
    return tuple(int(p) for p in parts)


def _tokens(value: str, tenant: str) -> tuple[tuple[str, str], ...]:
    """``tok`` (for the process's tenant) or ``acme:tok1,globex:tok2`` →
    (token, tenant) pairs."""
    items = [p.strip() for p in value.split(",") if p.strip()]
    if len(items) == 1 and ":" not in items[0]:
        return ((items[0], tenant),)
    out = []
    for item in items:
        scope, sep, token = item.partition(":")
        if not sep or not token:
            raise SettingsError(
                f"{Env.DASHBOARD_TOKEN}: an entry is not <tenant>:<token> (entries are "
                "comma-separated; a single token alone is scoped to SESSIONSTREAM_TENANT)")
        out.append((token, scope))
    return tuple(out)


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise SettingsError(f"{name}={env.get(name)!r} is not a boolean: use true or false")


def _check_bootstrap(value: str) -> None:
    for part in value.split(","):
        if not _HOST_PORT_RE.match(part.strip()) or not 0 < int(part.rsplit(":", 1)[1]) < 65536:
            raise SettingsError(
                f"SESSIONSTREAM_KAFKA_BOOTSTRAP={value!r} is not a list of host:port, "
                "e.g. 127.0.0.1:19092 or k1:9092,k2:9092"
            )


def _check_redis_url(value: str) -> None:
    # A shape check only (no urllib: the core imports no network library).
    if not _REDIS_URL_RE.match(value):
        raise SettingsError(
            f"SESSIONSTREAM_REDIS_URL={value!r} is not a Redis URL, "
            "e.g. redis://127.0.0.1:16379/0"
        )


def _check_embedder(name: str) -> None:
    if name not in EMBEDDERS:
        raise SettingsError(f"{Env.MEMORY_EMBEDDER}={name!r} is not an embedder: use "
                            + " or ".join(EMBEDDERS)
                            + " (model needs pip install 'sessionstream[memory-model]')")


def memory_embedder_from_env(env: Mapping[str, str] | None = None, *,
                             check: bool = True) -> str:
    """Long-term memory's embedder as the environment names it (``hashing`` unset): the
    one variable a memory client reads without building the whole :class:`Settings`."""
    name = (os.environ if env is None else env).get(Env.MEMORY_EMBEDDER) or "hashing"
    if check:
        _check_embedder(name)
    return name
