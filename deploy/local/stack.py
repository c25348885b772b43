"""Start and stop a single-node Kafka 4.x (KRaft) and a Redis on 127.0.0.1 for development.

Kafka is assembled from Maven Central by ``deploy/local/pom.xml`` and cached in
``~/.cache/sessionstream/kafka-<version>/``; both servers keep their data, config, pid
file and log under the state directory. Only processes started here (by pid file) are
ever stopped here.

Run as ``sessionstream up|down|status|logs`` or ``python -m sessionstream.localstack.stack``.

``--secure`` (:func:`secure_stack`) is a second, separate Kafka profile: its own loopback
ports and state directory, a SASL/SCRAM-SHA-512 listener, the KRaft StandardAuthorizer
with ``allow.everyone.if.no.acl.found=false`` and ``admin`` as its only super user, whose
SCRAM credential is written at format time (the password is generated once into a 0600
file under the profile's state dir, and reaches the format tool through a 0600 argument
file, never a command line). The profile has its own Redis too: no anonymous user
(``user default off``), the same ``admin`` (password only) and the tenants' users, kept
in an ACL file so a restart keeps them. The plaintext node stays the default.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from sessionstream.core.errors import SessionStreamError
from sessionstream.core.files import create_if_absent
from sessionstream.core.settings import (
    DEFAULT_KAFKA_CONTROLLER_PORT,
    DEFAULT_KAFKA_PORT,
    DEFAULT_REDIS_PORT,
    Env,
    Settings,
    SettingsError,
)

SERVICES = ("kafka", "redis")
#: The broker's heap, fixed (-Xms = -Xmx, as Kafka's own kafka-server-start.sh sets it).
#: 1 GiB, not 512 MiB: the log cleaner's 128 MiB dedupe buffer and the broker's steady
#: ~50 MiB sit in the old generation for good; in a 512 MiB heap that G1 kept committed at
#: ~330 MiB they were over its 45 % marking threshold, so G1 ran a concurrent cycle every
#: 1-2 minutes, each ending in a 30-50 ms Remark pause that every in-flight produce
#: waited out (ADR 0018, "the broker's own pauses").
KAFKA_HEAP = ("-Xms1g", "-Xmx1g")
#: The broker's JVM pauses (GC and every other safepoint), one line each, in
#: ``<state>/kafka/gc.log`` (3 files of 5 MiB): the first thing to read when the
#: broker's produce -> ack latency stalls (ADR 0018).
KAFKA_GC_LOG = "gc,safepoint:file={path}:time,uptime:filecount=3,filesize=5m"
# Largest record batch the broker accepts. Events above the attachment threshold spill
# to the attachment store, so 16 MiB is headroom for big batches, not for big events.
MESSAGE_MAX_BYTES = 16 * 1024 * 1024
#: The secure profile's super user and its SASL mechanism.
ADMIN_PRINCIPAL = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
#: The environment variable that carries the admin's password into a secure broker (and
#: only there): its config names it through Kafka's EnvVarConfigProvider, so no config
#: file holds the secret (KIP-421; the broker resolves ``${env:…}`` at start).
ADMIN_SECRET_ENV = "LOCALSTACK_KAFKA_ADMIN_SECRET"
ADMIN_SECRET_REF = "${env:" + ADMIN_SECRET_ENV + "}"
SECRET_PROVIDER = (
    "config.providers=env",
    "config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider",
    # Only this variable resolves: a config cannot read anything else of the environment.
    f"config.providers.env.param.allowlist.pattern=^{ADMIN_SECRET_ENV}$",
)
#: The file mode mask of the servers the secure profiles start: every file they create
#: or rewrite (Redis' ACL file on ACL SAVE, its AOF and RDB, Kafka's segments) is 0600
#: and every directory 0700, whatever the server does with its own files.
PRIVATE_UMASK = 0o077
INSTALL_JAVA = "apt-get install -y openjdk-17-jre-headless maven"
INSTALL_REDIS = "apt-get update && apt-get install -y redis-server"

Echo = Callable[[str], None]


class LocalStackError(SessionStreamError):
    """A local server could not be started or stopped; the message says why and what to do."""


def stored_secret(path: Path) -> str:
    """The random secret kept in ``path``, made on first use: a whole 0600 file linked in
    place only if absent, so processes racing to make it all read the one that won (never
    an empty or half-written file)."""
    if not path.is_file():
        create_if_absent(path, (secrets.token_urlsafe(24) + "\n").encode(), private=True)
    return path.read_text().strip()


@dataclass(frozen=True)
class StackConfig:
    """Where the local servers live and which loopback ports they use."""

    state_dir: Path
    kafka_port: int = DEFAULT_KAFKA_PORT
    controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    redis_port: int = DEFAULT_REDIS_PORT
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "sessionstream")
    pom: Path = field(default_factory=lambda: Path(__file__).with_name("pom.xml"))
    #: The secure profile: SASL/SCRAM listener and StandardAuthorizer (``up --secure``).
    secure: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> StackConfig:
        """The local stack the process's settings describe (state dir, ports, jar cache)."""
        cfg = cls(
            state_dir=settings.state_dir,
            kafka_port=settings.kafka_port,
            controller_port=settings.kafka_controller_port,
            redis_port=settings.redis_port,
            cache_dir=settings.cache_dir,
        )
        ports = [cfg.kafka_port, cfg.controller_port, cfg.redis_port]
        if len(set(ports)) != 3:
            raise LocalStackError(f"Kafka, controller and Redis ports must differ, got {ports}")
        return cfg

    @property
    def admin_secret_file(self) -> Path:
        """The secure profile's admin password (0600), generated at first format."""
        return self.dir("kafka") / "admin.secret"

    def admin_password(self) -> str:
        """The secure profile's admin password (created, 0600, on first use)."""
        return stored_secret(self.admin_secret_file)

    def admin_redis_url(self) -> str:
        """The secure profile's Redis as its admin (password only: no anonymous user)."""
        return f"redis://{ADMIN_PRINCIPAL}:{self.admin_password()}@127.0.0.1:{self.redis_port}/0"

    def client_security(self) -> dict[str, str]:
        """librdkafka keys of the profile's admin principal (none for the plaintext node)."""
        if not self.secure:
            return {}
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": ADMIN_PRINCIPAL, "sasl.password": self.admin_password()}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def dir(self, service: str) -> Path:
        return self.state_dir / service

    def pid_file(self, service: str) -> Path:
        return self.dir(service) / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.dir(service) / f"{service}.log"

    def data_dir(self, service: str) -> Path:
        return self.dir(service) / "data"

    def port(self, service: str) -> int:
        return self.kafka_port if service == "kafka" else self.redis_port


def secure_stack(settings: Settings) -> StackConfig:
    """The secure profile: its own Kafka and Redis ports and state dir
    (``<state dir>/secure``)."""
    cfg = StackConfig(
        state_dir=settings.state_dir / "secure",
        kafka_port=settings.secure_kafka_port,
        controller_port=settings.secure_kafka_controller_port,
        redis_port=settings.secure_redis_port,
        cache_dir=settings.cache_dir,
        secure=True,
    )
    taken = {settings.kafka_port, settings.kafka_controller_port, settings.redis_port}
    ports = [cfg.kafka_port, cfg.controller_port, cfg.redis_port]
    if len(set(ports)) != 3 or taken & set(ports):
        raise LocalStackError(
            f"the secure profile's ports {ports} must differ from each other and from the "
            f"plaintext stack's {sorted(taken)}: set {Env.SECURE_KAFKA_PORT}, "
            f"{Env.SECURE_KAFKA_CONTROLLER_PORT} and {Env.SECURE_REDIS_PORT}")
    return cfg


class _Profile(Protocol):
    @property
    def state_dir(self) -> Path: ...


def secure_tenant_key_dir(cfg: _Profile) -> Path:
    """The secure profiles' tenant key files (the single node's and the cluster's, each
    in ``<state dir>/<profile>``): beside the outer state dir, apart from the plaintext
    stack's (a retirement in one must not touch the other's rings)."""
    return Path(f"{cfg.state_dir.parent.resolve()}-secure-tenant-keys")


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    port: int
    pid: int | None
    log: str


# --- process and port helpers -------------------------------------------------------------


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (we started it and have not reaped it) is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def owned_pid(cfg: StackConfig, service: str) -> int | None:
    """The pid from our pid file if that process is alive and is the server we started."""
    pid = read_pid(cfg.pid_file(service))
    if pid is None or not _alive(pid):
        return None
    # Guards against a recycled pid: Kafka carries its config path on the command line;
    # redis-server rewrites its process title but runs with its data dir as cwd.
    marker = str(cfg.dir(service))
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    if marker in _cmdline(pid) or cwd.startswith(marker):
        return pid
    return None


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a socket lingering in TIME_WAIT does not block a new listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_holder(port: int) -> str | None:
    """Best effort: ``"pid 123 (redis-server ...)"`` for the process listening on ``port``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            # cols[1] = local "ADDR:PORT" in hex, cols[3] = state (0A = LISTEN), cols[9] = inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in targets:
                    cmd = _cmdline(int(proc.name)).strip()
                    if len(cmd) > 160:  # keep both ends: the program and its config file
                        cmd = f"{cmd[:70]} … {cmd[-80:]}"
                    return f"pid {proc.name} ({cmd})"
        except OSError:
            continue
    return "a process this user cannot inspect"


def check_port_free(port: int, what: str, env_var: str) -> None:
    """Raise a ``LocalStackError`` naming the port and its holder if ``port`` is taken."""
    if port_is_free(port):
        return
    holder = port_holder(port)
    by = f" by {holder}" if holder else ""
    raise LocalStackError(
        f"port {port} ({what}) is already in use{by}. Stop that process or choose another "
        f"port with {env_var}=<port>."
    )


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def _tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []


# --- Kafka --------------------------------------------------------------------------------


def kafka_version(pom: Path) -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if not match:
        raise LocalStackError(f"{pom} has no <kafka.version> property")
    return match.group(1).strip()


def require_java(echo: Echo) -> str:
    java = shutil.which("java")
    if java is None:
        raise LocalStackError(
            f"Java 17+ is not installed (no `java` on PATH). Install: {INSTALL_JAVA}"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < 17:
        raise LocalStackError(
            f"Kafka 4 needs Java 17+, found {out.splitlines()[0] if out else 'unknown'}. "
            f"Install: {INSTALL_JAVA}"
        )
    return java


def kafka_lib(cfg: StackConfig, echo: Echo) -> Path:
    """The directory of broker jars, resolved with Maven on first use and cached after."""
    version = kafka_version(cfg.pom)
    home = cfg.cache_dir / f"kafka-{version}"
    lib = home / "lib"
    stamp = home / "resolved.sha256"
    pom_hash = hashlib.sha256(cfg.pom.read_bytes()).hexdigest()
    if lib.is_dir() and stamp.is_file() and stamp.read_text().strip() == pom_hash:
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalStackError(f"Maven is not installed (no `mvn` on PATH). Install: {INSTALL_JAVA}")
    partial = home / "lib.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    echo(f"kafka: resolving Kafka {version} jars from Maven Central into {home} "
         "(first run only; can take a few minutes)")
    cmd = [
        mvn, "-B", "-f", str(cfg.pom),
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={partial}",
    ]
    started = last_report = time.monotonic()
    output: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line.rstrip())
        # A heartbeat on Maven's output (batch mode prints no per-file transfer lines).
        if time.monotonic() - last_report >= 5:
            last_report = time.monotonic()
            echo(f"kafka:   still resolving ({last_report - started:.0f}s)")
    if proc.wait() != 0:
        tail = "\n".join(output[-25:])
        raise LocalStackError(
            f"Maven could not resolve Kafka {version} (exit {proc.returncode}):\n{tail}\n"
            "Check network access to Maven Central (or a mirror in ~/.m2/settings.xml)."
        )
    jars = len(list(partial.glob("*.jar")))
    shutil.rmtree(lib, ignore_errors=True)
    partial.rename(lib)
    stamp.write_text(pom_hash + "\n")
    echo(f"kafka: {jars} jars resolved in {time.monotonic() - started:.0f}s")
    return lib


def _cluster_id() -> str:
    # 16 random bytes, base64url without padding; Kafka rejects ids starting with "-".
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _secure_properties(cfg: StackConfig) -> list[str]:
    """Listeners and authorizer of the secure profile.

    Clients authenticate with SCRAM-SHA-512 on the broker listener; the controller
    listener (same process, loopback) uses SASL/PLAIN with the admin's static password,
    so no connection anywhere is anonymous. ACLs are enforced by the StandardAuthorizer,
    which keeps them in the KRaft metadata log.
    """
    pw = ADMIN_SECRET_REF
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return [
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{cfg.kafka_port},"
        f"CONTROLLER://127.0.0.1:{cfg.controller_port}",
        f"advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{cfg.kafka_port}",
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
        f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config={scram} "
        f'required username="{ADMIN_PRINCIPAL}" password="{pw}";',
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{ADMIN_PRINCIPAL}",
        "allow.everyone.if.no.acl.found=false",
        *SECRET_PROVIDER,
    ]


def kafka_properties(cfg: StackConfig) -> str:
    if cfg.secure:
        listeners = _secure_properties(cfg)
    else:
        listeners = [
            f"listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port},"
            f"CONTROLLER://127.0.0.1:{cfg.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ]
    return "\n".join([
        "# Written by sessionstream.localstack.stack on every `up`; edits are overwritten.",
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{cfg.controller_port}",
        *listeners,
        f"log.dirs={cfg.data_dir('kafka')}",
        "num.partitions=1",
        # One broker: every internal topic has one replica.
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=10",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        # Tests start consumer groups constantly; the default 3s delay only slows them.
        "group.initial.rebalance.delay.ms=0",
        # Topics are created on purpose (`sessionstream topics ensure`), never by a typo.
        "auto.create.topics.enable=false",
        f"message.max.bytes={MESSAGE_MAX_BYTES}",
        f"replica.fetch.max.bytes={MESSAGE_MAX_BYTES}",
        "",
    ])


def kafka_ready(bootstrap: str, timeout: float = 2.0,
                security: dict[str, str] | None = None) -> bool:
    """True when the broker answers a metadata request (not merely an open port)."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: connection-refused noise while the broker boots is expected, not news.
    admin = AdminClient({
        "bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000), "log_level": 0,
        **(security or {}),
    })
    try:
        admin.list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def kafka_up(cfg: StackConfig, echo: Echo) -> bool:
    """Start the broker unless ours is already running. Returns True if it was started."""
    pid = owned_pid(cfg, "kafka")
    if pid is not None:
        echo(f"kafka: already running (pid {pid}, port {cfg.kafka_port})")
        return False
    port_env = Env.SECURE_KAFKA_PORT if cfg.secure else Env.KAFKA_PORT
    ctl_env = Env.SECURE_KAFKA_CONTROLLER_PORT if cfg.secure else Env.KAFKA_CONTROLLER_PORT
    check_port_free(cfg.kafka_port, "Kafka", port_env)
    check_port_free(cfg.controller_port, "Kafka controller", ctl_env)
    java = require_java(echo)
    lib = kafka_lib(cfg, echo)
    home = cfg.dir("kafka")
    data = cfg.data_dir("kafka")
    data.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    props.touch(mode=0o600)  # no secret in it (the environment carries it), still private
    props.write_text(kafka_properties(cfg))
    log = cfg.log_file("kafka")
    classpath = f"{lib}/*"
    env = {**os.environ, "KAFKA_HEAP_OPTS": " ".join(KAFKA_HEAP)}
    env.pop(ADMIN_SECRET_ENV, None)
    if cfg.secure:  # the broker's environment alone carries it (its config names it)
        env[ADMIN_SECRET_ENV] = cfg.admin_password()
    if not (data / "meta.properties").is_file():
        cid_file = home / "cluster-id"
        if not cid_file.is_file():
            cid_file.write_text(_cluster_id() + "\n")
        echo(f"kafka: formatting storage in {data}")
        # The secure profile's super user gets its SCRAM credential in the bootstrap
        # metadata, so the broker can authenticate itself (and the admin) from the start.
        # The main class and its arguments go in a 0600 argument file (the java launcher
        # reads `@file`): the admin's password is never on a command line, which every
        # user of the machine can read in /proc.
        tool = ["kafka.tools.StorageTool", "format", "-t", cid_file.read_text().strip(),
                "-c", str(props)]
        if cfg.secure:
            tool += ["--add-scram", f"{SCRAM_MECHANISM}=[name={ADMIN_PRINCIPAL},"
                     f"password={cfg.admin_password()}]"]
        argfile = home / "format.args"
        fd = os.open(argfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in tool) + "\n")
        try:
            fmt = subprocess.run(
                # A one-shot tool: C1-only JIT and serial GC start it ~35% faster on a
                # busy box. The class path stays here: an argument file expands no `*`.
                [java, "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                 "-cp", classpath, f"@{argfile}"],
                capture_output=True, text=True, env=env,
            )
        finally:
            argfile.unlink(missing_ok=True)
        if fmt.returncode != 0:
            raise LocalStackError(
                f"formatting Kafka storage failed (exit {fmt.returncode}):\n"
                f"{fmt.stdout[-2000:]}{fmt.stderr[-2000:]}\nTry `sessionstream up --fresh`."
            )
    if cfg.secure:  # what the format tool and earlier runs wrote, and the log to come
        log.touch()
        make_private(home)
    what = "SASL/SCRAM + ACLs" if cfg.secure else "plaintext"
    echo(f"kafka: starting ({what}, heap {' '.join(KAFKA_HEAP)}) on "
         f"127.0.0.1:{cfg.kafka_port} (log {log})")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [java, *KAFKA_HEAP,
             f"-Xlog:{KAFKA_GC_LOG.format(path=home / 'gc.log')}",
             "-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
             "-cp", classpath, "kafka.Kafka", str(props)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
            umask=PRIVATE_UMASK if cfg.secure else -1,
        )
    cfg.pid_file("kafka").write_text(f"{proc.pid}\n")
    bootstrap = f"127.0.0.1:{cfg.kafka_port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            tail = "\n".join(_tail(log, 30))
            cfg.pid_file("kafka").unlink(missing_ok=True)
            raise LocalStackError(f"Kafka exited with {proc.returncode} while starting:\n{tail}")
        if kafka_ready(bootstrap, security=cfg.client_security()):
            break
        if time.monotonic() > deadline:
            raise LocalStackError(f"Kafka did not become ready within 120s; see {log}")
        time.sleep(0.5)
    echo(f"kafka: ready (pid {proc.pid})")
    if cfg.secure:
        echo(f"kafka: super user {ADMIN_PRINCIPAL!r}, password in {cfg.admin_secret_file} "
             "(0600); create tenant principals with `sessionstream acl apply --tenant T`")
    return True


# --- Redis --------------------------------------------------------------------------------


def require_redis(echo: Echo) -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0:
        raise LocalStackError(
            f"redis-server is not installed. Install: sudo sh -c '{INSTALL_REDIS}'"
        )
    echo("redis: redis-server not found; installing the Debian package")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise LocalStackError(
                f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}\n"
                f"Install Redis 7 by hand: {INSTALL_REDIS}"
            )
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found is None:
        raise LocalStackError(f"redis-server still missing after install. Try: {INSTALL_REDIS}")
    return found


def redis_config(cfg: StackConfig) -> str:
    return "\n".join([
        "# Written by sessionstream.localstack.stack on every `up`; edits are overwritten.",
        "bind 127.0.0.1",
        "protected-mode yes",
        f"port {cfg.redis_port}",
        "daemonize no",
        f"pidfile {cfg.pid_file('redis')}",
        f"logfile {cfg.log_file('redis')}",
        f"dir {cfg.data_dir('redis')}",
        # AOF, fsync every second: a restart (or crash) loses at most ~1s of writes.
        "appendonly yes",
        "appendfsync everysec",
        "save 60 1000",
        *([f"aclfile {acl_file(cfg)}"] if cfg.secure else []),
        "",
    ])


def acl_file(cfg: StackConfig) -> Path:
    """The secure Redis's users (0600): ``acl apply`` adds the tenants' with ACL SAVE."""
    return cfg.dir("redis") / "users.acl"


def write_acl_file(cfg: StackConfig) -> None:
    """The secure Redis's ACL file (see :func:`write_acl_users`)."""
    write_acl_users(acl_file(cfg), cfg.admin_password())


def write_acl_users(path: Path, admin_password: str) -> None:
    """``user default off`` and the admin (its password as a SHA-256 hash) first, then
    the users saved before (tenants' users survive every restart); 0600."""
    digest = hashlib.sha256(admin_password.encode()).hexdigest()
    kept = []
    if path.is_file():
        kept = [ln for ln in path.read_text().splitlines()
                if ln.strip() and not ln.startswith(("user default ",
                                                     f"user {ADMIN_PRINCIPAL} "))]
    lines = ["user default off", f"user {ADMIN_PRINCIPAL} on #{digest} ~* &* +@all", *kept]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def make_private(root: Path) -> None:
    """``root`` and everything under it owner-only (dirs 0700, files 0600): a state dir
    made before the servers ran under :data:`PRIVATE_UMASK` is closed on the next start."""
    root.chmod(0o700)
    for path in root.rglob("*"):
        if path.is_symlink():
            continue
        path.chmod(0o700 if path.is_dir() else 0o600)


def redis_ready(port: int, password: str | None = None) -> bool:
    """PING answers (as the admin when ``password``: the secure Redis has no anonymous
    user)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1,
                         socket_connect_timeout=1,
                         username=ADMIN_PRINCIPAL if password else None, password=password)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def redis_up(cfg: StackConfig, echo: Echo) -> bool:
    """Start Redis unless ours is already running. Returns True if it was started."""
    pid = owned_pid(cfg, "redis")
    if pid is not None:
        echo(f"redis: already running (pid {pid}, port {cfg.redis_port})")
        return False
    check_port_free(cfg.redis_port, "Redis", Env.REDIS_PORT)
    server = require_redis(echo)
    cfg.data_dir("redis").mkdir(parents=True, exist_ok=True)
    conf = cfg.dir("redis") / "redis.conf"
    conf.write_text(redis_config(cfg))
    if cfg.secure:
        write_acl_file(cfg)
    echo(f"redis: starting on 127.0.0.1:{cfg.redis_port} (log {cfg.log_file('redis')})")
    if cfg.secure:
        make_private(cfg.dir("redis"))
    proc = subprocess.Popen(
        [server, str(conf)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
        # ACL SAVE, AOF rewrites and RDB saves create new files: the mask keeps them 0600
        umask=PRIVATE_UMASK if cfg.secure else -1,
    )
    cfg.pid_file("redis").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 30
    password = cfg.admin_password() if cfg.secure else None
    while not redis_ready(cfg.redis_port, password):
        if proc.poll() is not None:
            tail = "\n".join(_tail(cfg.log_file("redis"), 20))
            raise LocalStackError(f"redis-server exited with {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            raise LocalStackError(
                f"Redis did not answer PING within 30s; see {cfg.log_file('redis')}"
            )
        time.sleep(0.1)
    echo(f"redis: ready (pid {proc.pid})")
    if cfg.secure:
        echo(f"redis: no anonymous user; admin {ADMIN_PRINCIPAL!r} with the password in "
             f"{cfg.admin_secret_file}; users kept in {acl_file(cfg)}")
    return True


# --- commands -----------------------------------------------------------------------------


def up(cfg: StackConfig, echo: Echo = print, fresh: bool = False,
       services: Iterable[str] = SERVICES, started: list[str] | None = None) -> list[str]:
    """Start the services that are not running; returns the names of those started.

    ``started`` (if given) is filled as services come up, so a caller still knows what
    to stop when a later service fails to start.
    """
    wanted = [s for s in SERVICES if s in set(services)]
    if fresh:
        down(cfg, echo, wanted)
        for service in wanted:
            echo(f"{service}: wiping {cfg.data_dir(service)}")
            shutil.rmtree(cfg.data_dir(service), ignore_errors=True)
            if service == "kafka":
                (cfg.dir("kafka") / "cluster-id").unlink(missing_ok=True)
    started = [] if started is None else started
    for service in wanted:
        cfg.dir(service).mkdir(parents=True, exist_ok=True)
        starter = kafka_up if service == "kafka" else redis_up
        if starter(cfg, echo):
            started.append(service)
    return started


def down(cfg: StackConfig, echo: Echo = print, services: Iterable[str] = SERVICES,
         timeout: float = 30.0) -> list[str]:
    """Stop the services that ``up`` started (SIGTERM, SIGKILL after ``timeout``)."""
    stopped: list[str] = []
    for service in [s for s in SERVICES if s in set(services)]:
        pid = owned_pid(cfg, service)
        if pid is None:
            echo(f"{service}: not running")
            cfg.pid_file(service).unlink(missing_ok=True)
            continue
        echo(f"{service}: stopping pid {pid}")
        os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            echo(f"{service}: still running after {timeout:.0f}s, sending SIGKILL")
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10)
        cfg.pid_file(service).unlink(missing_ok=True)
        stopped.append(service)
        echo(f"{service}: stopped")
    return stopped


def status(cfg: StackConfig) -> list[ServiceStatus]:
    result = []
    for service in SERVICES:
        pid = owned_pid(cfg, service)
        result.append(ServiceStatus(
            name=service, running=pid is not None, port=cfg.port(service), pid=pid,
            log=str(cfg.log_file(service)),
        ))
    return result


def logs(cfg: StackConfig, echo: Echo = print, lines: int = 40, follow: bool = False) -> None:
    """Print the last ``lines`` of both logs; with ``follow``, keep printing new lines."""
    files = {s: cfg.log_file(s) for s in SERVICES}
    for service, path in files.items():
        echo(f"==> {service}: {path} <==")
        for line in _tail(path, lines):
            echo(line)
    if not follow:
        return
    offsets = {s: (p.stat().st_size if p.exists() else 0) for s, p in files.items()}
    while True:
        for service, path in files.items():
            if not path.exists():
                continue
            with path.open("rb") as fh:
                fh.seek(offsets[service])
                chunk = fh.read()
                offsets[service] = fh.tell()
            for line in chunk.decode(errors="replace").splitlines():
                echo(f"[{service}] {line}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    """``python -m sessionstream.localstack.stack up|down|status|logs`` (as the CLI commands)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sessionstream.localstack.stack")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--fresh", action="store_true")
    sub.add_parser("down")
    p_status = sub.add_parser("status")
    p_status.add_argument("--json", action="store_true")
    sub.add_parser("logs")
    args = parser.parse_args(argv)

    def echo(msg: str) -> None:
        print(msg, flush=True)

    try:
        cfg = StackConfig.from_settings(Settings.from_env())  # this process's entry point
        if args.cmd == "up":
            up(cfg, echo, fresh=args.fresh)
        elif args.cmd == "down":
            down(cfg, echo)
        elif args.cmd == "status":
            rows = status(cfg)
            if args.json:
                print(json.dumps([asdict(r) for r in rows]))
            else:
                for r in rows:
                    state = f"running (pid {r.pid})" if r.running else "stopped"
                    print(f"{r.name}: {state}, port {r.port}")
        else:
            logs(cfg, echo)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LocalStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
