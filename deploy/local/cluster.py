"""The local cluster profile: three KRaft Kafka nodes and a Redis Cluster on 127.0.0.1.

``sessionstream cluster up`` starts it beside (never instead of) the single-node stack of
:mod:`sessionstream.localstack.stack`, on other ports, under ``<state dir>/cluster``:

- Kafka: three combined broker+controller nodes (static quorum of three voters), internal
  topics with RF=3, ``min.insync.replicas=2`` and ``default.replication.factor=3``, so an
  events topic created by ``sessionstream topics ensure`` with a replication factor of 3
  survives the loss of any one node without losing an
  acknowledged (acks=all) write.
- Redis: six ``redis-server`` processes in cluster mode, three masters each with one
  replica (``cluster-node-timeout`` 2 s, so a killed master fails over within seconds).

``ClusterConfig(secure=True)`` (``sessionstream cluster up --secure``, state dir
``<state dir>/cluster-secure``, the same ports) is the secure profile of
:mod:`sessionstream.localstack.stack` on three brokers and a Redis Cluster: the brokers
take SASL/SCRAM-SHA-512 clients and talk to each other as ``admin`` over SCRAM, their
controller listener takes SASL/PLAIN, the StandardAuthorizer denies whatever no ACL
allows (``admin`` its only super user, its SCRAM credential written at format time);
every Redis node has no anonymous user (``user default off``), an ``admin`` with a
password only (replicas authenticate to masters as it) and its users in an ACL file.
One admin password (0600 file under the state dir) serves both; it reaches a broker
through its environment and the format tool through a 0600 argument file, never a
config file or a command line. Every node runs under umask 077 (ACL SAVE, AOF, RDB,
segments: 0600). The plain profile stays open on loopback for the fault tests.

The product runs on it by settings alone (:meth:`ClusterConfig.settings_env`). Fault tests
drive the nodes through :class:`LocalCluster` (SIGKILL a partition leader, rolling
restarts, kill a Redis master). Only processes started here (pid file + state dir on their
command line or working directory) are ever signalled.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionstream.core.settings import Env, Settings
from sessionstream.kafka_config import admin_config
from sessionstream.localstack.stack import (
    ADMIN_PRINCIPAL,
    ADMIN_SECRET_ENV,
    ADMIN_SECRET_REF,
    MESSAGE_MAX_BYTES,
    PRIVATE_UMASK,
    SCRAM_MECHANISM,
    SECRET_PROVIDER,
    Echo,
    LocalStackError,
    StackConfig,
    _alive,
    _cluster_id,
    _cmdline,
    _tail,
    _wait_gone,
    check_port_free,
    kafka_lib,
    make_private,
    read_pid,
    redis_ready,
    require_java,
    require_redis,
    stored_secret,
    write_acl_users,
)

DEFAULT_KAFKA_PORTS = (29092, 29093, 29094)
DEFAULT_CONTROLLER_PORTS = (29192, 29193, 29194)
# Redis Cluster also listens on port + 10000 (the cluster bus): 27001..27006 here.
DEFAULT_REDIS_PORTS = (17001, 17002, 17003, 17004, 17005, 17006)
# Three JVMs share a small machine: a smaller heap, serial GC and C1-only JIT keep their
# start-up CPU down (the brokers move test-sized traffic; peak throughput is not the point).
CLUSTER_JVM = ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
REDIS_NODE_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class ClusterConfig:
    """Where the cluster profile lives and which loopback ports its nodes use."""

    state_dir: Path
    kafka_ports: tuple[int, ...] = DEFAULT_KAFKA_PORTS
    controller_ports: tuple[int, ...] = DEFAULT_CONTROLLER_PORTS
    redis_ports: tuple[int, ...] = DEFAULT_REDIS_PORTS
    redis_replicas: int = 1  # replicas per Redis master
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "sessionstream")
    pom: Path = field(default_factory=lambda: Path(__file__).with_name("pom.xml"))
    #: No anonymous access anywhere: SCRAM + ACLs on the brokers, ACL users on Redis.
    secure: bool = False

    @property
    def admin_secret_file(self) -> Path:
        return self.state_dir / "admin.secret"

    def admin_password(self) -> str | None:
        """The secure profile's admin password, brokers and Redis nodes (created 0600 on
        first use); None when the nodes are open."""
        if not self.secure:
            return None
        return stored_secret(self.admin_secret_file)

    def redis_auth(self) -> dict[str, Any]:
        """The keyword arguments of a redis client that talks to a node as the admin."""
        password = self.admin_password()
        return {"username": ADMIN_PRINCIPAL, "password": password} if password else {}

    def client_security(self) -> dict[str, str]:
        """librdkafka keys of the admin principal (none for the open profile)."""
        password = self.admin_password()
        if password is None:
            return {}
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": ADMIN_PRINCIPAL, "sasl.password": password}

    def admin_redis_url(self) -> str:
        """The Redis Cluster as its admin (every node; a client needs any one)."""
        from urllib.parse import quote

        password = self.admin_password()
        if password is None:
            return self.redis_url
        nodes = ",".join(f"127.0.0.1:{p}" for p in self.redis_ports)
        return f"redis://{ADMIN_PRINCIPAL}:{quote(password, safe='')}@{nodes}/0"

    def __post_init__(self) -> None:
        if len(self.kafka_ports) != 3 or len(self.controller_ports) != 3:
            raise LocalStackError("the cluster profile has exactly three Kafka nodes: give "
                                  "three broker ports and three controller ports")
        masters, rest = divmod(len(self.redis_ports), 1 + self.redis_replicas)
        if masters < 3 or rest:
            raise LocalStackError(
                f"{len(self.redis_ports)} Redis ports do not make at least three masters with "
                f"{self.redis_replicas} replica(s) each")
        ports = [*self.kafka_ports, *self.controller_ports, *self.redis_ports,
                 *(p + 10000 for p in self.redis_ports)]
        if len(set(ports)) != len(ports) or max(ports) > 65535:
            raise LocalStackError(f"cluster ports must all differ (Redis also uses port+10000) "
                                  f"and stay below 65536: {ports}")

    @classmethod
    def from_settings(cls, settings: Settings, *, secure: bool = False) -> ClusterConfig:
        """``<state dir>/cluster`` (``cluster-secure`` for the secure profile), with the
        cluster ports the settings give (else defaults)."""
        return cls(
            state_dir=settings.state_dir / ("cluster-secure" if secure else "cluster"),
            kafka_ports=settings.cluster_kafka_ports or DEFAULT_KAFKA_PORTS,
            controller_ports=settings.cluster_controller_ports or DEFAULT_CONTROLLER_PORTS,
            redis_ports=settings.cluster_redis_ports or DEFAULT_REDIS_PORTS,
            cache_dir=settings.cache_dir,
            secure=secure,
        )

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka_ports)

    @property
    def redis_url(self) -> str:
        """Every node: a client starts as long as any one of them answers."""
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.redis_ports) + "/0"

    def settings_env(self, *, admin: bool = False) -> dict[str, str]:
        """The environment settings that point the product at this cluster (``admin``:
        as the secure profile's admin, password included — a tenant's processes take
        their own principals from ``sessionstream acl env --local-cluster``)."""
        env = {
            Env.KAFKA_BOOTSTRAP: self.bootstrap,
            Env.REDIS_URL: self.redis_url,
            Env.REDIS_CLUSTER: "true",
            Env.REPLICATION_FACTOR: "3",
        }
        if admin and self.secure:
            sec = self.client_security()
            env.update({Env.KAFKA_SECURITY_PROTOCOL: sec["security.protocol"],
                        Env.KAFKA_SASL_MECHANISM: sec["sasl.mechanism"],
                        Env.KAFKA_SASL_USERNAME: sec["sasl.username"],
                        Env.KAFKA_SASL_PASSWORD: sec["sasl.password"],
                        Env.REDIS_URL: self.admin_redis_url()})
        return env


def _owned(pid_file: Path, home: Path) -> int | None:
    """The pid in ``pid_file`` if alive and ours (``home`` on its command line or as cwd)."""
    pid = read_pid(pid_file)
    if pid is None or not _alive(pid):
        return None
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return pid if str(home) in _cmdline(pid) or cwd.startswith(str(home)) else None


def _signal_and_wait(pid: int, sig: signal.Signals, timeout: float) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    if not _wait_gone(pid, timeout) and sig != signal.SIGKILL:
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10)


class _NodeProcess:
    """What the cluster's node processes share: stopping, killing, reaping by pid."""

    _proc: subprocess.Popen[bytes] | None

    def pid(self) -> int | None:
        raise NotImplementedError

    def kill(self) -> bool:
        """SIGKILL: a crash, no controlled shutdown."""
        return self._signal(signal.SIGKILL, 10)

    def _signal(self, sig: signal.Signals, timeout: float) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        _signal_and_wait(pid, sig, timeout)
        if self._proc is not None:
            self._proc.poll()
            self._proc = None
        return True


class KafkaNode(_NodeProcess):
    """One combined broker+controller of the cluster profile."""

    def __init__(self, cfg: ClusterConfig, node_id: int) -> None:
        self.cfg = cfg
        self.node_id = node_id
        self.port = cfg.kafka_ports[node_id - 1]
        self.controller_port = cfg.controller_ports[node_id - 1]
        self.home = cfg.state_dir / f"kafka-{node_id}"
        self.data = self.home / "data"
        self.props = self.home / "server.properties"
        self.pid_file = self.home / "kafka.pid"
        self.log = self.home / "kafka.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _listeners(self) -> list[str]:
        if not self.cfg.secure:
            return [
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            ]
        # As the single secure node (stack._secure_properties), with three of them: the
        # brokers replicate as admin over SCRAM, the controllers vote over SASL/PLAIN.
        pw = ADMIN_SECRET_REF
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
        return [
            f"listeners=SASL_PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=SASL_PLAINTEXT",
            "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "CONTROLLER:SASL_PLAINTEXT",
            f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
            f"sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}",
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            f'listener.name.controller.plain.sasl.jaas.config={plain} required '
            f'username="{ADMIN_PRINCIPAL}" password="{pw}" user_{ADMIN_PRINCIPAL}="{pw}";',
            f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config="
            f'{scram} required username="{ADMIN_PRINCIPAL}" password="{pw}";',
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:{ADMIN_PRINCIPAL}",
            "allow.everyone.if.no.acl.found=false",
            *SECRET_PROVIDER,
        ]

    def _env(self) -> dict[str, str]:
        """The node's (and its format tool's) environment: the admin's password only in
        the secure profile, where the config names it."""
        env = {**os.environ, "KAFKA_HEAP_OPTS": CLUSTER_JVM[0]}
        env.pop(ADMIN_SECRET_ENV, None)
        password = self.cfg.admin_password()
        if password is not None:
            env[ADMIN_SECRET_ENV] = password
        return env

    def properties(self) -> str:
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.cfg.controller_ports))
        return "\n".join([
            "# Written by sessionstream.localstack.cluster on every start; edits are overwritten.",
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={voters}",
            *self._listeners(),
            f"log.dirs={self.data}",
            "num.partitions=1",
            # Three replicas, two in sync for an acks=all write: any one node may be lost.
            "default.replication.factor=3",
            "min.insync.replicas=2",
            "offsets.topic.replication.factor=3",
            "offsets.topic.num.partitions=10",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
            "share.coordinator.state.topic.replication.factor=3",
            "share.coordinator.state.topic.min.isr=2",
            "unclean.leader.election.enable=false",
            # A dead broker is fenced (its partitions move) after 4 s, not the default 9 s.
            "broker.session.timeout.ms=4000",
            "broker.heartbeat.interval.ms=1000",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            f"message.max.bytes={MESSAGE_MAX_BYTES}",
            f"replica.fetch.max.bytes={MESSAGE_MAX_BYTES}",
            "",
        ])

    def pid(self) -> int | None:
        return _owned(self.pid_file, self.home)

    def format(self, java: str, lib: Path, cluster_id: str) -> subprocess.Popen[str] | None:
        """Start formatting the storage (once); returns the formatter, or None if formatted.

        The secure profile's admin gets its SCRAM credential in the bootstrap metadata
        (``--add-scram``), through a 0600 argument file: never on a command line."""
        self.data.mkdir(parents=True, exist_ok=True)
        self._write_props()
        if (self.data / "meta.properties").is_file():
            return None
        tool = ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.props)]
        password = self.cfg.admin_password()
        if password is not None:
            tool += ["--add-scram",
                     f"{SCRAM_MECHANISM}=[name={ADMIN_PRINCIPAL},password={password}]"]
        argfile = self.home / "format.args"
        fd = os.open(argfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in tool) + "\n")
        return subprocess.Popen(
            [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp",
             f"{lib}/*", f"@{argfile}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self._env(),
        )

    def _write_props(self) -> None:
        fd = os.open(self.props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.properties())

    def start(self, java: str, lib: Path) -> None:
        """Start the node (no wait); its storage must be formatted."""
        if self.pid() is not None:
            return
        check_port_free(self.port, f"Kafka node {self.node_id}",
                        Env.CLUSTER_KAFKA_PORTS)
        check_port_free(self.controller_port, f"Kafka controller {self.node_id}",
                        Env.CLUSTER_CONTROLLER_PORTS)
        self._write_props()
        if self.cfg.secure:  # the format tool's files and the log to come
            self.log.touch()
            make_private(self.home)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [java, *CLUSTER_JVM, "-Dorg.slf4j.simpleLogger.showDateTime=true",
                 "-cp", f"{lib}/*", "kafka.Kafka", str(self.props)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=self._env(), cwd=self.home,
                umask=PRIVATE_UMASK if self.cfg.secure else -1,
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            tail = "\n".join(_tail(self.log, 30))
            raise LocalStackError(
                f"Kafka node {self.node_id} exited with {self._proc.returncode}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM (a controlled shutdown: leadership moves first), SIGKILL after timeout."""
        return self._signal(signal.SIGTERM, timeout)


class RedisNode(_NodeProcess):
    """One ``redis-server`` in cluster mode."""

    def __init__(self, cfg: ClusterConfig, port: int) -> None:
        self.cfg = cfg
        self.port = port
        self.home = cfg.state_dir / f"redis-{port}"
        self.pid_file = self.home / "redis.pid"
        self.log = self.home / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self) -> str:
        return "\n".join([
            "# Written by sessionstream.localstack.cluster on every start; edits are overwritten.",
            "bind 127.0.0.1",
            "protected-mode yes",
            f"port {self.port}",
            "daemonize no",
            f"pidfile {self.pid_file}",
            f"logfile {self.log}",
            f"dir {self.home}",
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            f"cluster-node-timeout {REDIS_NODE_TIMEOUT_MS}",
            "appendonly yes",
            "appendfsync everysec",
            "save \"\"",
            *self._secure_lines(),
            "",
        ])

    def _secure_lines(self) -> list[str]:
        password = self.cfg.admin_password()
        if password is None:
            return []
        # The password a replica gives its master (`masterauth`) is no line of this
        # file: the server reads it from its standard input at start (start()).
        return [f"aclfile {self.home / 'users.acl'}", f"masteruser {ADMIN_PRINCIPAL}"]

    def pid(self) -> int | None:
        return _owned(self.pid_file, self.home)

    def start(self, server: str) -> None:
        if self.pid() is not None:
            return
        check_port_free(self.port, "Redis cluster node", Env.CLUSTER_REDIS_PORTS)
        check_port_free(self.port + 10000, "Redis cluster bus",
                        Env.CLUSTER_REDIS_PORTS)
        self.home.mkdir(parents=True, exist_ok=True)
        conf = self.home / "redis.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.config())
        password = self.cfg.admin_password()
        if password is not None:
            write_acl_users(self.home / "users.acl", password)
            make_private(self.home)
        # `-` after the file: the server reads more config from its standard input, where
        # the secure profile hands it the replicas' `masterauth` (no file holds it).
        self._proc = subprocess.Popen(
            [server, str(conf), *(["-"] if password is not None else [])],
            stdin=subprocess.PIPE if password is not None else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            cwd=self.home,
            # ACL SAVE, AOF rewrites and nodes.conf are rewritten: the mask keeps them 0600
            umask=PRIVATE_UMASK if password is not None else -1,
        )
        if password is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.write(f"masterauth {password}\n".encode())
            self._proc.stdin.close()
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not redis_ready(self.port, self.cfg.admin_password()):
            if self._proc is not None and self._proc.poll() is not None:
                tail = "\n".join(_tail(self.log, 20))
                raise LocalStackError(f"redis-server :{self.port} exited:\n{tail}")
            if time.monotonic() > deadline:
                raise LocalStackError(f"Redis :{self.port} did not answer within {timeout:.0f}s")
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> bool:
        return self._signal(signal.SIGTERM, timeout)


class LocalCluster:
    """Start, stop, inspect and break the cluster profile's nodes."""

    def __init__(self, cfg: ClusterConfig, echo: Echo = print) -> None:
        self.cfg = cfg
        self.echo = echo
        self.kafka = [KafkaNode(cfg, i + 1) for i in range(3)]
        self.redis = [RedisNode(cfg, p) for p in cfg.redis_ports]
        self._java: str | None = None
        self._lib: Path | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def up(self, timeout: float = 180.0) -> list[str]:
        """Start every node not running; form the Redis Cluster once. Returns what started."""
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        started = self._redis_up()
        started += self._kafka_up(timeout)
        return started

    def up_redis(self) -> list[str]:
        """Start only the Redis Cluster (for what needs no brokers); returns what started."""
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        return self._redis_up()

    def down(self) -> list[str]:
        stopped = []
        for node in self.kafka:
            if node.stop():
                stopped.append(f"kafka-{node.node_id}")
        for rnode in self.redis:
            if rnode.stop():
                stopped.append(f"redis-{rnode.port}")
        return stopped

    def wipe(self) -> None:
        """Delete the cluster's data (every node must be stopped)."""
        if any(n.pid() for n in self.kafka) or any(r.pid() for r in self.redis):
            raise LocalStackError("stop the cluster (`sessionstream cluster down`) before wiping")
        shutil.rmtree(self.cfg.state_dir, ignore_errors=True)

    def status(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        for node in self.kafka:
            rows.append({"name": f"kafka-{node.node_id}", "port": node.port,
                         "pid": node.pid(), "log": str(node.log)})
        for rnode in self.redis:
            rows.append({"name": f"redis-{rnode.port}", "port": rnode.port,
                         "pid": rnode.pid(), "log": str(rnode.log)})
        return rows

    def _tools(self) -> tuple[str, Path]:
        if self._java is None or self._lib is None:
            self._java = require_java(self.echo)
            self._lib = kafka_lib(self._stack_like(), self.echo)
        return self._java, self._lib

    def _stack_like(self) -> StackConfig:
        # kafka_lib only reads the jar cache and the pom of a stack config.
        return StackConfig(state_dir=self.cfg.state_dir, cache_dir=self.cfg.cache_dir,
                           pom=self.cfg.pom)

    def _kafka_up(self, timeout: float) -> list[str]:
        todo = [n for n in self.kafka if n.pid() is None]
        if not todo:
            self.echo(f"kafka cluster: already running ({self.cfg.bootstrap})")
            return []
        java, lib = self._tools()
        cid_file = self.cfg.state_dir / "kafka-cluster-id"
        if not cid_file.is_file():
            cid_file.write_text(_cluster_id() + "\n")
        cid = cid_file.read_text().strip()
        formatters = [(n, n.format(java, lib, cid)) for n in self.kafka]
        for node, proc in formatters:
            if proc is None:
                continue
            try:
                out, _ = proc.communicate()
            finally:
                (node.home / "format.args").unlink(missing_ok=True)
            if proc.returncode != 0:
                raise LocalStackError(f"formatting Kafka node {node.node_id} failed:\n"
                                      f"{out[-2000:]}\nTry `sessionstream cluster up --fresh`.")
        for node in todo:
            self.echo(f"kafka-{node.node_id}: starting on {node.bootstrap} (log {node.log})")
            node.start(java, lib)
        self.wait_kafka(timeout)
        what = "SASL/SCRAM + ACLs, " if self.cfg.secure else ""
        self.echo(f"kafka cluster: ready, {what}3 brokers ({self.cfg.bootstrap})")
        return [f"kafka-{n.node_id}" for n in todo]

    def start_kafka(self, node_id: int, wait: bool = True, timeout: float = 120.0) -> None:
        """(Re)start one Kafka node; with ``wait``, until the cluster has three brokers."""
        java, lib = self._tools()
        self.kafka[node_id - 1].start(java, lib)
        if wait:
            self.wait_kafka(timeout)

    def wait_kafka(self, timeout: float = 120.0) -> None:
        """Until every node answers and the metadata lists all three brokers."""
        deadline = time.monotonic() + timeout
        while True:
            for node in self.kafka:
                node.check_alive()
            if self.brokers_up() == 3:
                return
            if time.monotonic() > deadline:
                raise LocalStackError(
                    f"the Kafka cluster did not show three brokers within {timeout:.0f}s; "
                    f"see {', '.join(str(n.log) for n in self.kafka)}")
            time.sleep(0.5)

    def brokers_up(self) -> int:
        """How many brokers every live node's metadata agrees on (0 when none answers)."""
        from confluent_kafka.admin import AdminClient

        seen: set[int] | None = None
        for node in self.kafka:
            if node.pid() is None:
                return 0
            # log_level 0: refused connections to a node mid-restart are expected here.
            admin = AdminClient(admin_config(node.bootstrap, {"log_level": 0,
                                                              "socket.timeout.ms": 2000},
                                             security=self.cfg.client_security()))
            try:
                brokers = set(admin.list_topics(timeout=2).brokers)
            except Exception:
                return 0
            seen = brokers if seen is None else seen & brokers
        return len(seen or ())

    def partition_leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic[partition]`` now."""
        meta = self._admin().list_topics(topic=topic, timeout=10).topics[topic]
        return int(meta.partitions[partition].leader)

    def wait_in_sync(self, topics: Iterable[str], timeout: float = 120.0) -> None:
        """Until every partition of ``topics`` has all three replicas in sync."""
        deadline = time.monotonic() + timeout
        names = list(topics)
        while True:
            try:
                md = self._admin().list_topics(timeout=5).topics
                lagging = [f"{t}[{p}]" for t in names for p, pm in md[t].partitions.items()
                           if len(pm.isrs) < 3 or pm.leader < 0]
            except Exception as exc:  # a node mid-restart: ask again
                lagging = [f"metadata unavailable ({type(exc).__name__})"]
            if not lagging:
                return
            if time.monotonic() > deadline:
                raise LocalStackError(f"partitions not back in sync after {timeout:.0f}s: "
                                      f"{', '.join(lagging[:10])}")
            time.sleep(0.5)

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(admin_config(self.cfg.bootstrap, {"log_level": 0},
                                        security=self.cfg.client_security()))

    # -- Redis Cluster -----------------------------------------------------------------
    def _redis_up(self) -> list[str]:
        server = require_redis(self.echo)
        todo = [r for r in self.redis if r.pid() is None]
        for rnode in todo:
            self.echo(f"redis-{rnode.port}: starting (cluster mode, log {rnode.log})")
            rnode.start(server)
        for rnode in self.redis:
            rnode.wait_ready()
        if not self._redis_formed():
            self._create_redis_cluster()
        self.wait_redis()
        self.echo(f"redis cluster: ready, {len(self.redis) // (1 + self.cfg.redis_replicas)} "
                  f"masters ({', '.join(r.address for r in self.redis)})")
        return [f"redis-{r.port}" for r in todo]

    def _info(self, port: int) -> dict[str, str]:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                             socket_connect_timeout=2, decode_responses=True,
                             **self.cfg.redis_auth())
        try:
            raw = client.execute_command("CLUSTER", "INFO")
        finally:
            client.close()
        text = raw if isinstance(raw, str) else raw.decode()
        return dict(line.split(":", 1) for line in text.split() if ":" in line)

    def _redis_formed(self) -> bool:
        try:
            info = self._info(self.redis[0].port)
        except Exception:
            return False
        return int(info.get("cluster_known_nodes", "1")) == len(self.redis)

    def _create_redis_cluster(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise LocalStackError("redis-cli is missing (it ships with redis-server: "
                                  "apt-get install -y redis-server)")
        self.echo("redis cluster: assigning slots and replicas")
        password = self.cfg.admin_password()
        # redis-cli reads the password from REDISCLI_AUTH: never on a command line
        auth = ["--user", ADMIN_PRINCIPAL] if password else []
        env = {**os.environ, **({"REDISCLI_AUTH": password} if password else {})}
        done = subprocess.run(
            [cli, *auth, "--cluster", "create", *(r.address for r in self.redis),
             "--cluster-replicas", str(self.cfg.redis_replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=120, env=env,
        )
        if done.returncode != 0:
            raise LocalStackError(f"redis-cli --cluster create failed:\n{done.stdout[-2000:]}"
                                  f"{done.stderr[-1000:]}\nTry `sessionstream cluster up --fresh`.")

    def wait_redis(self, timeout: float = 60.0) -> None:
        """Until every live node reports cluster_state:ok and all slots assigned."""
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for rnode in self.redis:
                if rnode.pid() is None:
                    continue
                try:
                    info = self._info(rnode.port)
                    states.append(info.get("cluster_state") == "ok"
                                  and info.get("cluster_slots_assigned") == "16384")
                except Exception:
                    states.append(False)
            if states and all(states):
                return
            if time.monotonic() > deadline:
                raise LocalStackError(f"the Redis Cluster is not ok after {timeout:.0f}s; "
                                      f"see {self.redis[0].log}")
            time.sleep(0.2)

    def wait_failover(self, lost_port: int, timeout: float = 60.0) -> None:
        """Until a replica has taken over ``lost_port``'s slots and the cluster is ok again."""
        masters = len(self.redis) // (1 + self.cfg.redis_replicas)
        deadline = time.monotonic() + timeout
        while True:
            roles = self.redis_roles()
            if lost_port not in roles and list(roles.values()).count("master") == masters:
                break
            if time.monotonic() > deadline:
                raise LocalStackError(f"no replica took over from :{lost_port} within "
                                      f"{timeout:.0f}s (roles: {roles})")
            time.sleep(0.2)
        self.wait_redis(max(1.0, deadline - time.monotonic()))

    def redis_roles(self) -> dict[int, str]:
        """port -> "master" | "slave" for every live node (as each node sees itself)."""
        import redis

        out: dict[int, str] = {}
        for rnode in self.redis:
            if rnode.pid() is None:
                continue
            client = redis.Redis(host="127.0.0.1", port=rnode.port, socket_timeout=2,
                                 decode_responses=True, **self.cfg.redis_auth())
            try:
                out[rnode.port] = str(client.info("replication")["role"])
            except Exception:
                continue
            finally:
                client.close()
        return out

    def redis_master_for(self, key: str) -> RedisNode:
        """The node serving ``key``'s slot as master now."""
        import redis

        live = next(r for r in self.redis if r.pid() is not None)
        client = redis.Redis(host="127.0.0.1", port=live.port, decode_responses=True,
                             **self.cfg.redis_auth())
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    port = int(master[1])
                    return next(r for r in self.redis if r.port == port)
        finally:
            client.close()
        raise LocalStackError(f"no master serves the slot of {key!r}")

    def start_redis(self, port: int) -> None:
        rnode = next(r for r in self.redis if r.port == port)
        rnode.start(require_redis(self.echo))
        rnode.wait_ready()
