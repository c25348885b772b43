"""Access scopes on real servers, on both secure profiles: `up --secure` (one SCRAM
broker with the StandardAuthorizer, one Redis with ACL users) and `cluster up --secure`
(three such brokers, a Redis Cluster with ACL users), each started once for the module
on its own ports and state dir (tests/integration/secure_profiles.py).

Tenant A's principals reach A's topics and keys; tenant B's are refused with our named
errors (NotAuthorized for Kafka, NOPERM for Redis). Every test runs on both profiles.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, Message, Producer

from sessionstream.core.access import principal
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.governance.access import (
    TenantSecrets,
    apply_kafka,
    apply_redis,
    apply_redis_cluster,
)
from sessionstream.producers.errors import NotAuthorized
from sessionstream.producers.kafka_clients import consumer_config, producer_config
from sessionstream.producers.readback import scan_session
from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.secure_profiles import PREFIX, PROFILES, SecureProfile, cli_env, started
from tests.integration.streams_helpers import wait_until


@pytest.fixture(scope="module", params=PROFILES)
def profile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            settings: Settings) -> Iterator[SecureProfile]:
    """A secure profile, started for the module's tests and stopped after them."""
    with started(request.param, tmp_path_factory.mktemp(f"acl-{request.param}"),
                 settings.cache_dir) as p:
        yield p


@dataclass
class Tenant:
    name: str
    settings: Settings
    secrets: TenantSecrets

    def kafka(self, role: str) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": principal(self.name, role),
                "sasl.password": self.secrets.passwords[role]}


def _apply_redis(profile: SecureProfile, keys: KeySpace, passwords: dict[str, str]
                 ) -> dict[str, Any]:
    admin = profile.redis_admin()
    try:
        return (apply_redis_cluster if profile.redis_cluster else apply_redis)(
            admin, keys, passwords)
    finally:
        admin.close()


@pytest.fixture(scope="module")
def tenants(profile: SecureProfile, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Tenant]:
    """Tenants A and B with principals, ACLs and topics on the secure Kafka, and their
    Redis users on the profile's Redis."""
    state = tmp_path_factory.mktemp("acl-state")
    admin = admin_client(profile.bootstrap, profile.admin_security)
    out = {}
    for label in ("a", "b"):
        name = f"acl{label}{uuid.uuid4().hex[:8]}"
        s = Settings(tenant=name, kafka_bootstrap=profile.bootstrap, partitions=2,
                     replication_factor=profile.replication_factor, state_dir=state)
        secrets = TenantSecrets.load_or_create(state, name)
        apply_kafka(admin, name, secrets.passwords, dlq_topic=s.dlq_topic)
        ensure_topics(admin, tenant_topics(s))
        _apply_redis(profile, KeySpace(name, PREFIX), secrets.passwords)
        out[label] = Tenant(name, s, secrets)
    del admin  # no client left polling the profile's brokers after they stop
    return out


def _produce(bootstrap: str, topic: str, security: dict[str, str],
             idempotent: bool = True) -> None:
    """One record (keyed as the writers partition); raises the mapped delivery error."""
    from sessionstream.producers.errors import map_kafka_error

    errors: list[KafkaError | None] = []
    p = Producer(producer_config(bootstrap, {
        "enable.idempotence": idempotent, "message.timeout.ms": 15_000,
        "partitioner": "murmur2_random"}, defaults={}, security=security))
    p.produce(topic, b"v", key=b"k", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(20)
    assert errors, "no delivery report within 20 s"
    if errors[0] is not None:
        raise map_kafka_error(errors[0])


def _writer_cfg(t: Tenant, topic: str, security: dict[str, str], profile: SecureProfile,
                tmp: Path) -> WriterConfig:
    """A writer of tenant ``t``: Kafka as ``security``, Redis as t's writer user."""
    return WriterConfig(bootstrap=t.settings.kafka_bootstrap, topic=topic,
                        redis_url=profile.user_redis_url(t.name, "writer",
                                                         t.secrets.passwords["writer"]),
                        redis_cluster=profile.redis_cluster, tenant=t.name,
                        key_prefix=PREFIX, attachment_dir=tmp / "att",
                        kafka_security=security, connect_timeout_s=10)


def test_a_tenants_writer_appends_and_reads_back_through_the_session_writer(
        tenants: dict[str, Tenant], profile: SecureProfile, tmp_path: Path) -> None:
    a = tenants["a"]
    cfg = _writer_cfg(a, a.settings.events_topic, a.kafka("writer"), profile, tmp_path)
    w = SessionWriter.create(cfg)
    w.append("turn/start", {})
    w.append("user/message", {"content": "hello"})
    w.flush()
    w.close()
    rb = read_log(cfg, w.session_id)
    assert [e.type for e in rb.admitted][-2:] == ["turn/start", "user/message"]


def test_another_tenants_writer_is_refused_on_open_with_not_authorized(
        tenants: dict[str, Tenant], profile: SecureProfile, tmp_path: Path) -> None:
    a, b = tenants["a"], tenants["b"]
    cfg = _writer_cfg(b, a.settings.events_topic, b.kafka("writer"), profile, tmp_path)
    with pytest.raises(NotAuthorized, match="TOPIC_AUTHORIZATION_FAILED"):
        SessionWriter.create(cfg)


def test_another_tenants_principals_cannot_produce_to_or_read_a_tenants_topic(
        tenants: dict[str, Tenant]) -> None:
    a, b = tenants["a"], tenants["b"]
    topic = a.settings.events_topic
    _produce(a.settings.kafka_bootstrap, topic, a.kafka("writer"))  # A itself may
    for role in ("writer", "worker", "auditor"):
        with pytest.raises(NotAuthorized, match="TOPIC_AUTHORIZATION_FAILED"):
            _produce(a.settings.kafka_bootstrap, topic, b.kafka(role),
                     idempotent=role != "auditor")
        with pytest.raises(NotAuthorized, match="TOPIC_AUTHORIZATION_FAILED"):
            scan_session(a.settings.kafka_bootstrap, topic, "k", timeout=10,
                         consumer_config=b.kafka(role))


def test_only_the_writer_role_may_produce_to_the_tenants_events_topic(
        tenants: dict[str, Tenant]) -> None:
    """flush()'s "admitted by readers" holds while only session writers produce: the
    worker (dead letters only) and the auditor (no write) are refused the events topic."""
    a = tenants["a"]
    topic = a.settings.events_topic
    _produce(a.settings.kafka_bootstrap, topic, a.kafka("writer"))
    for role in ("worker", "auditor"):
        with pytest.raises(NotAuthorized, match="TOPIC_AUTHORIZATION_FAILED"):
            _produce(a.settings.kafka_bootstrap, topic, a.kafka(role),
                     idempotent=role == "worker")


def test_the_auditor_reads_the_raw_log_but_cannot_write_it(tenants: dict[str, Tenant]) -> None:
    a = tenants["a"]
    topic = a.settings.events_topic
    _produce(a.settings.kafka_bootstrap, topic, a.kafka("writer"))
    scan = scan_session(a.settings.kafka_bootstrap, topic, "k", timeout=10,
                        consumer_config=a.kafka("auditor"))
    assert scan.scanned >= 1
    # (not idempotent: with no WRITE anywhere an idempotent producer is refused its
    # producer id first, a fatal CLUSTER_AUTHORIZATION_FAILED)
    with pytest.raises(NotAuthorized, match="TOPIC_AUTHORIZATION_FAILED"):
        _produce(a.settings.kafka_bootstrap, topic, a.kafka("auditor"), idempotent=False)


def test_the_worker_consumes_in_its_tenants_groups_only(tenants: dict[str, Tenant]) -> None:
    a = tenants["a"]
    topic = a.settings.events_topic
    _produce(a.settings.kafka_bootstrap, topic, a.kafka("writer"))

    def first_poll(group: str) -> Message:
        c = Consumer(consumer_config(a.settings.kafka_bootstrap, group,
                                     {"auto.offset.reset": "earliest"},
                                     security=a.kafka("worker")))
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None:
                    return msg
            raise AssertionError(f"nothing polled in group {group} within 30 s")
        finally:
            c.close()

    ours = first_poll(f"sessionstream.{a.name}.projections")  # under A's prefix
    assert ours.error() is None and ours.value()  # a record of A's log
    theirs = first_poll(f"sessionstream.{tenants['b'].name}.projections")
    assert theirs.error() is not None
    assert theirs.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_redis_users_reach_their_tenants_keys_only(tenants: dict[str, Tenant],
                                                   profile: SecureProfile) -> None:
    a, b = tenants["a"], tenants["b"]
    spaces = {"a": KeySpace(a.name, PREFIX), "b": KeySpace(b.name, PREFIX)}
    # generation 9 and a lease of a session nobody writes: the worker test's session
    # (generation 1 of the same tenant) is not disturbed
    row_a = spaces["a"].session_row("s1", 9)
    held = spaces["a"].lease("nobody")
    admin = profile.redis_admin()
    admin.hset(row_a, "view:surface", "{}")
    admin.set(held, "0")
    admin.close()

    def as_(t: Tenant, role: str) -> Any:
        return profile.redis_as(t.name, role, t.secrets.passwords[role])

    a_reader, b_reader, b_writer, b_worker = (
        as_(a, "reader"), as_(b, "reader"), as_(b, "writer"), as_(b, "worker"))
    try:
        assert a_reader.hgetall(row_a) == {"view:surface": "{}"}
        assert a_reader.get(held) == "0"
        for client in (b_reader, b_writer, b_worker):
            with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
                client.hgetall(row_a)
        with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
            b_writer.set(spaces["a"].lease("s1"), "x")
        with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
            a_reader.hset(row_a, "view:surface", "tampered")
        if not profile.redis_cluster:  # a cluster client sends a keyless command to all
            for listing in (lambda c: c.scan(0), lambda c: c.dbsize()):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    listing(b_reader)  # other tenants' key names and counts: not listable
        else:
            for listing in (lambda c: c.scan(0), lambda c: c.dbsize()):
                with pytest.raises(redis.RedisError):  # every node refuses it
                    listing(b_reader)
        # B's own keys are B's to write
        b_worker.hset(spaces["b"].session_row("s1", 9), "view:surface", "{}")
    finally:
        for c in (a_reader, b_reader, b_writer, b_worker):
            c.close()


def test_the_projection_worker_runs_on_its_tenants_worker_principals_alone(
        tenants: dict[str, Tenant], profile: SecureProfile, procs: ProcessGroup,
        tmp_path: Path) -> None:
    """The writer's and the worker's Kafka and Redis grants are enough: a session written
    as ``sessionstream.A.writer`` is folded, and a poison record dead-lettered, by a worker
    that is ``sessionstream.A.worker`` on both servers."""
    a = tenants["a"]
    keys = KeySpace(a.name, PREFIX)
    # the writer too runs as its tenant's principals only (leases, index: Redis writer)
    cfg = _writer_cfg(a, a.settings.events_topic, a.kafka("writer"), profile, tmp_path)
    w = SessionWriter.create(cfg)
    w.append("turn/start", {})
    w.append("user/message", {"content": "fold me"})
    w.flush()
    w.close()
    # an undecodable record for the dead-letter path (keyed like a session)
    p = Producer(producer_config(a.settings.kafka_bootstrap, {}, security=a.kafka("writer")))
    p.produce(a.settings.events_topic, b"\x00\x01poison", key=b"poison-session")
    assert p.flush(15) == 0
    worker = a.kafka("worker")
    env = {
        "SESSIONSTREAM_STATE_DIR": str(tmp_path), "SESSIONSTREAM_TENANT": a.name,
        "SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
        "SESSIONSTREAM_KAFKA_BOOTSTRAP": a.settings.kafka_bootstrap,
        "SESSIONSTREAM_KAFKA_SECURITY_PROTOCOL": worker["security.protocol"],
        "SESSIONSTREAM_KAFKA_SASL_USERNAME": worker["sasl.username"],
        "SESSIONSTREAM_KAFKA_SASL_PASSWORD": worker["sasl.password"],
        "SESSIONSTREAM_STREAMS_GROUP": f"sessionstream.{a.name}.projections-{tmp_path.name}",
        "SESSIONSTREAM_KEY_PREFIX": PREFIX,
        "SESSIONSTREAM_REDIS_URL": profile.user_redis_url(a.name, "worker",
                                                          a.secrets.passwords["worker"]),
        **profile.redis_env(),
    }
    proc = procs.start_module(WORKER, env=env, name="acl-worker")
    row = keys.session_row(w.session_id, 1)
    reader = profile.redis_as(a.name, "reader", a.secrets.passwords["reader"])
    try:
        wait_until(lambda: reader.hget(row, "as_of_seq") is not None, 60,
                   "the worker folding the session as its tenant's principal",
                   alive=lambda: _check_alive(proc))
    finally:
        reader.close()

    def dead_letters() -> int:  # read as the auditor, on every partition
        return sum(len(scan_session(a.settings.kafka_bootstrap, a.settings.dlq_topic,
                                    "poison-session", partition=part, timeout=10,
                                    consumer_config=a.kafka("auditor")).records)
                   for part in (0, 1))

    wait_until(lambda: dead_letters() > 0, 30, "the worker's dead letter",
               alive=lambda: _check_alive(proc))


def _check_alive(proc: Any) -> None:
    if not proc.running():
        raise AssertionError(f"the worker exited: {proc.log_tail()}")


def test_the_acl_cli_applies_a_tenants_scopes_on_the_local_secure_profile(
        profile: SecureProfile) -> None:
    """`acl apply` and `acl env` with the profile's flag, as a user runs them."""
    tenant = f"aclcli{uuid.uuid4().hex[:8]}"
    env = cli_env(profile, SESSIONSTREAM_KEY_PREFIX=PREFIX,
                  SESSIONSTREAM_STREAMS_GROUP=f"sessionstream.{tenant}.projections")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                              capture_output=True, text=True, env=env, timeout=90, check=False)

    flag = profile.local_flag
    done = cli("acl", "apply", "--tenant", tenant, flag, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert f"User:sessionstream.{tenant}.writer write topic prefixed:sessionstream.{tenant}." \
        in report["kafka"]["acls"]
    assert set(report["redis"]["users"]) == {
        f"sessionstream.{tenant}.{r}" for r in ("writer", "worker", "reader")}
    assert report["redis"]["persisted"]  # kept in the ACL file(s)
    if profile.redis_cluster:
        assert len(report["redis"]["nodes"]) == 6  # masters and replicas
    assert "warnings" not in report
    secrets = json.loads(Path(report["secrets_file"]).read_text())
    assert secrets["passwords"]["writer"] not in done.stdout  # never printed
    again = cli("acl", "apply", "--tenant", tenant, flag, "--json")
    assert again.returncode == 0 and json.loads(Path(report["secrets_file"]).read_text()) \
        == secrets  # idempotent: the same credentials
    exports = cli("acl", "env", "--tenant", tenant, "--role", "writer", flag)
    assert exports.returncode == 0, exports.stderr
    got = dict(line.removeprefix("export ").split("=", 1) for line in
               exports.stdout.splitlines())
    got = {k: v.strip("'") for k, v in got.items()}
    assert got["SESSIONSTREAM_KAFKA_SASL_USERNAME"] == f"sessionstream.{tenant}.writer"
    assert got["SESSIONSTREAM_KAFKA_BOOTSTRAP"] == profile.bootstrap
    assert got["SESSIONSTREAM_REDIS_URL"].endswith(
        profile.redis_url.removeprefix("redis://"))  # its Redis, its user in front
    assert got.get("SESSIONSTREAM_REDIS_CLUSTER", "false") == (
        "true" if profile.redis_cluster else "false")
    # the exported writer works: its Redis user reaches its keys, not another tenant's
    writer = profile.redis_as(tenant, "writer", secrets["passwords"]["writer"])
    try:
        writer.set(f"{PREFIX}:{{{tenant}/s1}}:note", "mine")
        with pytest.raises(redis.exceptions.NoPermissionError):
            writer.get(f"{PREFIX}:{{other/s1}}:note")
    finally:
        writer.close()
    assert not [p for d in profile.server_dirs for p in d.rglob("format.args")]
    # a plain (non-admin) principal is refused, named, exit 1
    env.update({"SESSIONSTREAM_KAFKA_BOOTSTRAP": profile.bootstrap,
                "SESSIONSTREAM_KAFKA_SASL_USERNAME": f"sessionstream.{tenant}.auditor",
                "SESSIONSTREAM_KAFKA_SASL_PASSWORD": secrets["passwords"]["auditor"]})
    refused = cli("acl", "apply", "--tenant", tenant, "--no-redis")
    assert refused.returncode == 1
    assert "Kafka refused the access scopes" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_no_config_file_holds_the_admin_password_and_every_file_is_owner_only(
        tenants: dict[str, Tenant], profile: SecureProfile) -> None:
    """The brokers read the admin's password from their environment, the replicas from
    standard input; whatever the servers wrote (ACL files after ACL SAVE, AOF, RDB,
    segments, logs, configs) is 0600 and every directory 0700 (pid files aside)."""
    assert profile.configs and all(c.is_file() for c in profile.configs)
    for config in profile.configs:
        assert profile.admin_password not in config.read_text(), config
    wrong = {}
    for root in profile.server_dirs:
        for path in [root, *root.rglob("*")]:
            mode = path.stat().st_mode & 0o777
            if path.suffix != ".pid" and mode != (0o700 if path.is_dir() else 0o600):
                wrong[str(path)] = oct(mode)
    assert wrong == {}
