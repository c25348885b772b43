"""The secure profile's Redis from outside: no anonymous access, ACL users kept across a
restart, and a process holding tenant B's credentials and key material opens nothing of
tenant A's — on the Redis that `sessionstream up --secure` starts (its own port and state
dir, no Kafka needed) and on one loaded with the Kubernetes manifests' ACL file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import redis
import yaml

from sessionstream.core.access import principal
from sessionstream.core.errors import MovedCiphertext
from sessionstream.core.privacy import DataClass
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.governance.access import TenantSecrets, apply_redis
from sessionstream.governance.keys import RedisKeyStore, TenantKeys
from sessionstream.localstack import stack as devstack

pytestmark = pytest.mark.integration

CANARY = "canary-5ab3-tenant-a-only"
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[devstack.StackConfig]:
    """The secure profile's Redis, as `up --secure` lays it out under <state>/secure."""
    cfg = devstack.StackConfig(state_dir=tmp_path / "state" / "secure",
                               kafka_port=_free_port(), controller_port=_free_port(),
                               redis_port=_free_port(), secure=True)
    devstack.up(cfg, lambda _: None, services=["redis"])
    yield cfg
    devstack.down(cfg, lambda _: None, ["redis"])


def _admin(cfg: devstack.StackConfig) -> redis.Redis:
    return redis.Redis.from_url(cfg.admin_redis_url(), decode_responses=True)


def _as(cfg: devstack.StackConfig, tenant: str, role: str, password: str) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=cfg.redis_port, decode_responses=True,
                       username=principal(tenant, role), password=password)


def test_the_secure_redis_refuses_anonymous_clients(secure: devstack.StackConfig) -> None:
    anonymous = redis.Redis(host="127.0.0.1", port=secure.redis_port)
    with pytest.raises(redis.RedisError, match=r"(?i)auth"):
        anonymous.get("ss:{a}:x")
    with pytest.raises(redis.RedisError):
        redis.Redis(host="127.0.0.1", port=secure.redis_port, username="default",
                    password="").ping()
    flags = _admin(secure).acl_getuser("default")["flags"]
    assert "off" in flags
    assert oct(devstack.acl_file(secure).stat().st_mode & 0o777) == "0o600"


def test_acl_users_survive_a_restart_and_b_cannot_reach_a(
        secure: devstack.StackConfig, tmp_path: Path) -> None:
    admin = _admin(secure)
    state = secure.state_dir.parent
    creds = {t: TenantSecrets.load_or_create(state, t).passwords for t in ("a", "b")}
    for tenant in ("a", "b"):
        assert apply_redis(admin, KeySpace(tenant, "ss"), creds[tenant])["persisted"]
    admin.close()
    devstack.down(secure, lambda _: None, ["redis"])  # a restart: users come from the file
    devstack.up(secure, lambda _: None, services=["redis"])
    a_writer = _as(secure, "a", "writer", creds["a"]["writer"])
    rings = {t: TenantKeys(tmp_path / f"rings-{t}") for t in ("a", "b")}
    store_a = RedisKeyStore(a_writer, rings["a"])
    store_a.data_key("a", "s1", DataClass.SURFACE)
    a_writer.set("ss:{a/s1}:note", CANARY)
    assert a_writer.get("ss:{a/s1}:note") == CANARY  # A's own user, after the restart
    for role in ("writer", "worker", "reader"):  # every one of B's users, any command
        b = _as(secure, "b", role, creds["b"][role])
        assert b.ping()
        for call in (lambda c: c.get("ss:{a/s1}:note"), lambda c: c.hgetall("ss:{a/s1}:dkeys"),
                     lambda c: c.keys("*"), lambda c: c.scan(0),
                     lambda c: c.smembers("ss:{a}:dkeys")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call(b)
        # B's key store pointed at tenant A: refused by Redis before any key is read
        with pytest.raises(redis.exceptions.NoPermissionError):
            RedisKeyStore(b, TenantKeys(None, env={"a": _ring_env(rings["b"], "b")},
                                        create=False)).lookup("a", "s1", DataClass.SURFACE)
    # and a copy of A's wrapped key (say from a dump) does not open with B's ring
    record = store_a._get("a", "s1", DataClass.SURFACE)
    assert record is not None
    thief = RedisKeyStore(_admin(secure), TenantKeys(None, env={"a": _ring_env(rings["b"], "b")},
                                                     create=False))
    with pytest.raises(MovedCiphertext):
        thief.lookup("a", "s1", DataClass.SURFACE)


def _ring_env(keys: TenantKeys, tenant: str) -> str:
    import base64

    ring = keys.ring(tenant, create=True)
    assert ring is not None
    return f"{ring.current}:{base64.b64encode(ring.versions[ring.current]).decode()}"


def test_acl_env_gives_a_process_its_tenants_user_and_key_material_only(
        secure: devstack.StackConfig) -> None:
    state = secure.state_dir.parent
    env = {**os.environ, "SESSIONSTREAM_STATE_DIR": str(state),
           "SESSIONSTREAM_SECURE_REDIS_PORT": str(secure.redis_port),
           "SESSIONSTREAM_SECURE_KAFKA_PORT": str(secure.kafka_port),
           "SESSIONSTREAM_SECURE_KAFKA_CONTROLLER_PORT": str(secure.controller_port)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                              capture_output=True, text=True, env=env, timeout=60,
                              check=False)

    applied = cli("acl", "apply", "--tenant", "b", "--no-kafka", "--local-secure")
    assert applied.returncode == 0, applied.stderr
    assert "ACL file" in applied.stdout
    exports = cli("acl", "env", "--tenant", "b", "--role", "writer", "--local-secure")
    assert exports.returncode == 0, exports.stderr
    got = dict(line.removeprefix("export ").split("=", 1) for line in
               exports.stdout.splitlines())
    got = {k: v.strip("'") for k, v in got.items()}
    url = urlsplit(got["SESSIONSTREAM_REDIS_URL"])
    assert (url.port, unquote(url.username or "")) == (secure.redis_port, "sessionstream.b.writer")
    assert got["SESSIONSTREAM_KEY_STORE"] == "redis" and got["SESSIONSTREAM_TENANT_KEY"]
    settings = Settings.from_env({**got, "SESSIONSTREAM_STATE_DIR": str(state)})
    assert not settings.tenant_keys_dir.exists()  # no shared key directory to fall back on
    client = redis.Redis.from_url(got["SESSIONSTREAM_REDIS_URL"])
    assert client.ping()
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get("ss:{a}:holds")
    # no secret of the run in any log it wrote (the server's log, the CLI's output)
    used = [secure.admin_password(), got["SESSIONSTREAM_TENANT_KEY"].split(":", 1)[1],
            *TenantSecrets.load_or_create(state, "b").passwords.values()]
    logs = [p for p in state.rglob("*") if p.is_file() and p.suffix == ".log"]
    assert logs
    for path in logs:
        text = path.read_text(errors="replace")
        assert not [x for x in used if x in text], path
    assert not [x for x in used if x in applied.stdout + applied.stderr]


def _secure_env(cfg: devstack.StackConfig) -> dict[str, str]:
    return {**os.environ, "SESSIONSTREAM_STATE_DIR": str(cfg.state_dir.parent),
            "SESSIONSTREAM_SECURE_REDIS_PORT": str(cfg.redis_port),
            "SESSIONSTREAM_SECURE_KAFKA_PORT": str(cfg.kafka_port),
            "SESSIONSTREAM_SECURE_KAFKA_CONTROLLER_PORT": str(cfg.controller_port)}


def _modes(root: Path) -> dict[str, str]:
    """Every path under ``root`` (and itself) -> its permission bits, octal."""
    return {str(p.relative_to(root.parent)): oct(p.stat().st_mode & 0o777)
            for p in [root, *root.rglob("*")]}


def test_every_file_redis_rewrites_stays_owner_only_after_acl_apply_and_saves(
        secure: devstack.StackConfig) -> None:
    """ACL SAVE rewrites the ACL file with the server's own mode; AOF rewrites and RDB
    saves make new files: all must stay 0600 (directories 0700), not only at start."""
    done = subprocess.run([sys.executable, "-m", "sessionstream.cli.main", "acl", "apply",
                           "--tenant", "modes", "--no-kafka", "--local-secure"],
                          capture_output=True, text=True, env=_secure_env(secure), timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    admin = _admin(secure)
    assert admin.acl_getuser("sessionstream.modes.reader") is not None  # saved, then:
    admin.set("ss:{modes}:x", "1")
    admin.bgrewriteaof()
    admin.bgsave(schedule=True)
    deadline = time.monotonic() + 30
    while any(admin.info("persistence")[k] for k in ("aof_rewrite_in_progress",
                                                     "rdb_bgsave_in_progress",
                                                     "aof_rewrite_scheduled")):
        assert time.monotonic() < deadline, "the background saves did not end"
        time.sleep(0.1)
    admin.execute_command("ACL", "SAVE")
    admin.close()
    root = secure.dir("redis")
    assert (secure.data_dir("redis") / "dump.rdb").is_file()
    modes = _modes(root)
    assert modes["redis/users.acl"] == "0o600"
    wrong = {p: m for p, m in modes.items() if not p.endswith(".pid")  # a pid: no secret
             and m != ("0o700" if (root.parent / p).is_dir() else "0o600")}
    assert wrong == {}


def test_an_anonymous_client_of_the_secure_redis_is_refused_exit_1_not_unreachable(
        secure: devstack.StackConfig) -> None:
    """3 means nobody answered; a server that answered and refused is 1 (docs/cli.md)."""
    env = {**_secure_env(secure),
           "SESSIONSTREAM_REDIS_URL": f"redis://127.0.0.1:{secure.redis_port}/0"}
    for args in (["views", "s1"], ["sessions"], ["dashboard", "--port", "0"]):
        done = subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                              capture_output=True, text=True, env=env, timeout=60,
                              check=False)
        assert done.returncode == 1, (args, done.stderr)
        assert "refused the client's credentials" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    env["SESSIONSTREAM_REDIS_URL"] = f"redis://nobody:wrong@127.0.0.1:{secure.redis_port}/0"
    done = subprocess.run([sys.executable, "-m", "sessionstream.cli.main", "sessions"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 1 and "wrong" not in done.stderr, done.stderr  # no password


#: The keyless commands (no key for Redis to check against the user's patterns) a tenant
#: user may run, each harmless: about its own connection, the command table or the
#: cluster's topology, or the transaction and script calls of its own keys. Nothing here
#: counts, lists or touches another tenant's data or what all tenants share.
HARMLESS_KEYLESS = {
    "asking", "client|getname", "client|getredir", "client|help", "client|id",
    "client|info", "client|trackinginfo", "cluster|info", "cluster|nodes", "cluster|shards",
    "cluster|slots", "command|count", "command|docs", "command|help", "command|info",
    "command|list", "hello", "lolwut", "ping", "quit", "readonly", "readwrite", "reset",
    # writer and worker: transactions and scripts over their own keys, the server clock
    "multi", "exec", "discard", "unwatch", "time", "script|help",
    "xgroup|help", "xinfo|help",
}


def _keyless_commands(admin: redis.Redis) -> set[str]:
    """Every command and subcommand of the server's table that names no key (no key
    specification: Redis has nothing to check against a user's key patterns)."""
    out = set()
    for name, info in admin.command().items():
        subs = info.get("subcommands") or []
        if not subs and not info.get("key_specifications"):
            out.add(str(name))
        out.update(str(sub[0]) for sub in subs if not sub[8])  # [8]: its key specifications
    return out


def test_no_keyless_command_a_tenant_user_may_run_reveals_or_touches_other_tenants(
        secure: devstack.StackConfig) -> None:
    """Every keyless command in the server's table, asked with ACL DRYRUN for each role:
    only those named harmless above are allowed (DBSIZE, KEYS, SCAN, INFO keyspace,
    RANDOMKEY, FUNCTION FLUSH, SCRIPT KILL, ... are refused)."""
    admin = _admin(secure)
    state = secure.state_dir.parent
    passwords = TenantSecrets.load_or_create(state, "dry").passwords
    apply_redis(admin, KeySpace("dry", "ss"), passwords)
    keyless = _keyless_commands(admin)
    assert {"dbsize", "keys", "scan", "info", "randomkey", "function|flush",
            "script|kill"} <= keyless
    for role in ("writer", "worker", "reader"):
        allowed = set()
        for name in keyless:
            try:
                verdict = admin.execute_command("ACL", "DRYRUN", principal("dry", role),
                                                *name.split("|"))
            except redis.ResponseError:
                continue  # e.g. an arity error: not allowed as asked either
            if verdict == "OK":
                allowed.add(name)
        assert allowed - HARMLESS_KEYLESS == set(), role
    reader = _as(secure, "dry", "reader", passwords["reader"])
    for call in (lambda c: c.dbsize(), lambda c: c.info("keyspace"), lambda c: c.keys("*"),
                 lambda c: c.scan(0), lambda c: c.randomkey()):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call(reader)
    reader.close()
    admin.close()


def test_the_k8s_acl_file_loads_and_locks_redis_the_same_way(tmp_path: Path) -> None:
    secrets = {d["metadata"]["name"]: d["stringData"] for d in yaml.safe_load_all(
        (ROOT / "deploy" / "k8s" / "base" / "secrets.yaml").read_text()) if d}
    acl = tmp_path / "users.acl"
    acl.write_text(secrets["sessionstream-redis-users"]["users.acl"])
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock),
                             "--dir", str(tmp_path), "--save", "", "--aclfile", str(acl)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
            time.sleep(0.05)
        time.sleep(0.1)
        with pytest.raises(redis.RedisError, match=r"(?i)auth"):
            redis.Redis(unix_socket_path=str(sock)).get("x")
        url = urlsplit(secrets["sessionstream-redis-reader"]["url"])
        reader = redis.Redis(unix_socket_path=str(sock), username=unquote(url.username or ""),
                             password=unquote(url.password or ""))
        assert reader.get("ss:{default}:holds") is None  # its own tenant: allowed
        with pytest.raises(redis.exceptions.NoPermissionError):
            reader.set("ss:{default}:holds", "x")  # a reader writes nothing
        with pytest.raises(redis.exceptions.NoPermissionError):
            reader.get("ss:{other}:holds")
    finally:
        proc.terminate()
        proc.wait(10)


def _cluster_ports(n: int) -> list[int]:
    """``n`` free ports whose cluster-bus port (+10000) is free too."""
    out: list[int] = []
    for port in range(31000, 39000, 7):
        if all(devstack.port_is_free(p) for p in (port, port + 10000)):
            out.append(port)
            if len(out) == n:
                return out
    raise AssertionError("no free ports for a Redis Cluster")


def test_a_secure_redis_cluster_refuses_anonymous_and_cross_tenant_access(
        tmp_path: Path) -> None:
    from redis.cluster import RedisCluster

    from sessionstream.governance.access import apply_redis_cluster
    from sessionstream.localstack.cluster import ClusterConfig, LocalCluster

    ports = _cluster_ports(3)
    others = [_free_port() for _ in range(6)]
    cfg = ClusterConfig(state_dir=tmp_path / "cluster", kafka_ports=tuple(others[:3]),
                        controller_ports=tuple(others[3:]), redis_ports=tuple(ports),
                        redis_replicas=0, secure=True)
    cluster = LocalCluster(cfg, echo=lambda _: None)
    cluster.up_redis()
    try:
        for port in ports:  # every node
            with pytest.raises(redis.RedisError, match=r"(?i)auth"):
                redis.Redis(host="127.0.0.1", port=port).get("x")
        admin = RedisCluster(host="127.0.0.1", port=ports[0], **cfg.redis_auth())
        creds = {t: TenantSecrets.load_or_create(tmp_path, t).passwords for t in ("a", "b")}
        for tenant in ("a", "b"):
            report = apply_redis_cluster(admin, KeySpace(tenant, "ss"), creds[tenant])
            assert report["persisted"] and len(report["nodes"]) == 3
        admin.close()
        cluster.redis[1].stop()  # a restart: the node reads its users from its ACL file
        cluster.start_redis(ports[1])
        cluster.wait_redis()
        node = redis.Redis(host="127.0.0.1", port=ports[1], decode_responses=True,
                           **cfg.redis_auth())
        assert node.acl_getuser("sessionstream.a.writer") is not None
        assert "off" in node.acl_getuser("default")["flags"]

        def as_(tenant: str, role: str) -> RedisCluster:
            return RedisCluster(host="127.0.0.1", port=ports[2], decode_responses=True,
                                username=principal(tenant, role),
                                password=creds[tenant][role])

        a = as_("a", "writer")
        a.set("ss:{a/s1}:note", CANARY)
        assert a.get("ss:{a/s1}:note") == CANARY
        for role in ("writer", "worker", "reader"):
            b = as_("b", role)
            with pytest.raises(redis.exceptions.NoPermissionError):
                b.get("ss:{a/s1}:note")
            with pytest.raises(redis.exceptions.NoPermissionError):
                b.hgetall("ss:{a/s1}:dkeys")
            b.close()
        a.close()
    finally:
        cluster.down()
