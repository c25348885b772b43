"""Access scopes on real servers: a second, secure Kafka (SASL/SCRAM + StandardAuthorizer)
started once for the module, and tenant ACL users on the shared Redis.

Tenant A's principals reach A's topics and keys; tenant B's are refused with our named
errors (NotAuthorized for Kafka, NOPERM for Redis).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
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
    redis_url_for,
)
from sessionstream.localstack.stack import StackConfig, down, up
from sessionstream.producers.errors import NotAuthorized
from sessionstream.producers.kafka_clients import consumer_config, producer_config
from sessionstream.producers.readback import scan_session
from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.procs import WORKER, ProcessGroup
from tests.integration.streams_helpers import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory,
                 settings: Settings) -> Iterator[StackConfig]:
    """The secure profile (its Kafka and its Redis) on free loopback ports in a
    temporary state dir."""
    # <base>/secure, as `up --secure` lays it out for SESSIONSTREAM_STATE_DIR=<base>
    cfg = StackConfig(state_dir=tmp_path_factory.mktemp("acl") / "secure",
                      kafka_port=_free_port(),
                      controller_port=_free_port(), redis_port=_free_port(),
                      cache_dir=settings.cache_dir, secure=True)
    started: list[str] = []
    try:
        up(cfg, lambda _msg: None, started=started)
        yield cfg
    finally:
        if started:
            down(cfg, lambda _msg: None, started)


@dataclass
class Tenant:
    name: str
    settings: Settings
    secrets: TenantSecrets

    def kafka(self, role: str) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": principal(self.name, role),
                "sasl.password": self.secrets.passwords[role]}


@pytest.fixture(scope="module")
def tenants(secure_kafka: StackConfig, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Tenant]:
    """Tenants A and B with principals, ACLs and topics on the secure Kafka."""
    state = tmp_path_factory.mktemp("acl-state")
    admin = admin_client(secure_kafka.bootstrap, secure_kafka.client_security())
    out = {}
    for label in ("a", "b"):
        name = f"acl{label}{uuid.uuid4().hex[:8]}"
        s = Settings(tenant=name, kafka_bootstrap=secure_kafka.bootstrap, partitions=2,
                     state_dir=state)
        secrets = TenantSecrets.load_or_create(state, name)
        apply_kafka(admin, name, secrets.passwords, dlq_topic=s.dlq_topic)
        ensure_topics(admin, tenant_topics(s))
        out[label] = Tenant(name, s, secrets)
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


def _writer_cfg(t: Tenant, topic: str, security: dict[str, str], settings: Settings,
                prefix: str, tmp: Path) -> WriterConfig:
    return WriterConfig(bootstrap=t.settings.kafka_bootstrap, topic=topic,
                        redis_url=settings.redis_url, tenant=t.name, key_prefix=prefix,
                        attachment_dir=tmp / "att", kafka_security=security,
                        connect_timeout_s=10)


def test_a_tenants_writer_appends_and_reads_back_through_the_session_writer(
        tenants: dict[str, Tenant], settings: Settings, redis_prefix: str,
        tmp_path: Path) -> None:
    a = tenants["a"]
    cfg = _writer_cfg(a, a.settings.events_topic, a.kafka("writer"), settings, redis_prefix,
                      tmp_path)
    w = SessionWriter.create(cfg)
    w.append("turn/start", {})
    w.append("user/message", {"content": "hello"})
    w.flush()
    w.close()
    rb = read_log(cfg, w.session_id)
    assert [e.type for e in rb.admitted][-2:] == ["turn/start", "user/message"]


def test_another_tenants_writer_is_refused_on_open_with_not_authorized(
        tenants: dict[str, Tenant], settings: Settings, redis_prefix: str,
        tmp_path: Path) -> None:
    a, b = tenants["a"], tenants["b"]
    cfg = _writer_cfg(b, a.settings.events_topic, b.kafka("writer"), settings, redis_prefix,
                      tmp_path)
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


def test_redis_users_reach_their_tenants_keys_only(settings: Settings,
                                                   redis_client: redis.Redis,
                                                   redis_prefix: str, tmp_path: Path) -> None:
    names = {label: f"acl{label}{uuid.uuid4().hex[:8]}" for label in ("a", "b")}
    spaces = {label: KeySpace(n, redis_prefix) for label, n in names.items()}
    secrets = {label: TenantSecrets.load_or_create(tmp_path, n) for label, n in names.items()}
    users = [principal(n, r) for n in names.values() for r in ("writer", "worker", "reader")]
    try:
        for label in names:
            apply_redis(redis_client, spaces[label], secrets[label].passwords)
        row_a = spaces["a"].session_row("s1", 0)
        redis_client.hset(row_a, "view:surface", "{}")
        redis_client.set(spaces["a"].generation(), "0")

        def as_(label: str, role: str) -> redis.Redis:
            url = redis_url_for(settings.redis_url, principal(names[label], role),
                                secrets[label].passwords[role])
            return redis.Redis.from_url(url, decode_responses=True)

        a_reader, b_reader, b_writer, b_worker = (
            as_("a", "reader"), as_("b", "reader"), as_("b", "writer"), as_("b", "worker"))
        try:
            assert a_reader.hgetall(row_a) == {"view:surface": "{}"}
            assert a_reader.get(spaces["a"].generation()) == "0"
            for client in (b_reader, b_writer, b_worker):
                with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
                    client.hgetall(row_a)
            with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
                b_writer.set(spaces["a"].lease("s1"), "x")
            with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
                a_reader.hset(row_a, "view:surface", "tampered")
            with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
                b_reader.scan(0)  # key names of other tenants are not listable
            # B's own keys are B's to write
            b_worker.hset(spaces["b"].session_row("s1", 0), "view:surface", "{}")
        finally:
            for c in (a_reader, b_reader, b_writer, b_worker):
                c.close()
    finally:
        redis_client.execute_command("ACL", "DELUSER", *users)  # keys: redis_prefix's


def test_the_projection_worker_runs_on_its_tenants_worker_principals_alone(
        tenants: dict[str, Tenant], settings: Settings, redis_client: redis.Redis,
        redis_prefix: str, procs: ProcessGroup, tmp_path: Path) -> None:
    """The writer's and the worker's Kafka and Redis grants are enough: a session written
    as ``sessionstream.A.writer`` is folded, and a poison record dead-lettered, by a worker
    that is ``sessionstream.A.worker`` on both servers."""
    a = tenants["a"]
    keys = KeySpace(a.name, redis_prefix)
    apply_redis(redis_client, keys, a.secrets.passwords)
    try:
        # the writer too runs as its tenant's principals only (leases, index: Redis writer)
        cfg = dataclasses.replace(
            _writer_cfg(a, a.settings.events_topic, a.kafka("writer"), settings, redis_prefix,
                        tmp_path),
            redis_url=redis_url_for(settings.redis_url, principal(a.name, "writer"),
                                    a.secrets.passwords["writer"]))
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
            "SESSIONSTREAM_KAFKA_BOOTSTRAP": a.settings.kafka_bootstrap,
            "SESSIONSTREAM_KAFKA_SECURITY_PROTOCOL": worker["security.protocol"],
            "SESSIONSTREAM_KAFKA_SASL_USERNAME": worker["sasl.username"],
            "SESSIONSTREAM_KAFKA_SASL_PASSWORD": worker["sasl.password"],
            "SESSIONSTREAM_STREAMS_GROUP": f"sessionstream.{a.name}.projections-{tmp_path.name}",
            "SESSIONSTREAM_KEY_PREFIX": redis_prefix,
            "SESSIONSTREAM_REDIS_URL": redis_url_for(
                settings.redis_url, principal(a.name, "worker"), a.secrets.passwords["worker"]),
        }
        proc = procs.start_module(WORKER, env=env, name="acl-worker")
        row = keys.session_row(w.session_id, 1)
        wait_until(lambda: redis_client.hget(row, "as_of_seq") is not None, 60,
                   "the worker folding the session as its tenant's principal",
                   alive=lambda: _check_alive(proc))
        def dead_letters() -> int:  # read as the auditor, on every partition
            return sum(len(scan_session(a.settings.kafka_bootstrap, a.settings.dlq_topic,
                                        "poison-session", partition=part, timeout=10,
                                        consumer_config=a.kafka("auditor")).records)
                       for part in (0, 1))

        wait_until(lambda: dead_letters() > 0, 30, "the worker's dead letter",
                   alive=lambda: _check_alive(proc))
    finally:
        redis_client.execute_command(
            "ACL", "DELUSER", *(principal(a.name, r) for r in ("writer", "worker", "reader")))


def _check_alive(proc: Any) -> None:
    if not proc.running():
        raise AssertionError(f"the worker exited: {proc.log_tail()}")


def test_the_acl_cli_applies_a_tenants_scopes_on_the_local_secure_broker(
        secure_kafka: StackConfig, settings: Settings, redis_prefix: str) -> None:
    """The users go to the secure profile's Redis (dropped with it after the module)."""
    tenant = f"aclcli{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SESSIONSTREAM_STATE_DIR": str(secure_kafka.state_dir.parent),
           "SESSIONSTREAM_SECURE_KAFKA_PORT": str(secure_kafka.kafka_port),
           "SESSIONSTREAM_SECURE_KAFKA_CONTROLLER_PORT": str(secure_kafka.controller_port),
           "SESSIONSTREAM_SECURE_REDIS_PORT": str(secure_kafka.redis_port),
           "SESSIONSTREAM_REDIS_URL": settings.redis_url, "SESSIONSTREAM_KEY_PREFIX": redis_prefix,
           "SESSIONSTREAM_STREAMS_GROUP": f"sessionstream.{tenant}.projections"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                              capture_output=True, text=True, env=env, timeout=60, check=False)

    done = cli("acl", "apply", "--tenant", tenant, "--local-secure", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert f"User:sessionstream.{tenant}.writer write topic prefixed:sessionstream.{tenant}." \
        in report["kafka"]["acls"]
    assert set(report["redis"]["users"]) == {
        f"sessionstream.{tenant}.{r}" for r in ("writer", "worker", "reader")}
    assert "warnings" not in report
    secrets = json.loads(Path(report["secrets_file"]).read_text())
    assert secrets["passwords"]["writer"] not in done.stdout  # never printed
    again = cli("acl", "apply", "--tenant", tenant, "--local-secure", "--json")
    assert again.returncode == 0 and json.loads(Path(report["secrets_file"]).read_text()) \
        == secrets  # idempotent: the same credentials
    exports = cli("acl", "env", "--tenant", tenant, "--role", "writer", "--local-secure")
    assert f"SESSIONSTREAM_KAFKA_SASL_USERNAME='sessionstream.{tenant}.writer'" \
        in exports.stdout
    assert f"127.0.0.1:{secure_kafka.kafka_port}" in exports.stdout
    assert f"@127.0.0.1:{secure_kafka.redis_port}/0'" in exports.stdout  # its Redis
    assert report["redis"]["persisted"]  # the secure Redis keeps them in its ACL file
    assert not (secure_kafka.dir("kafka") / "format.args").exists()
    # the admin principal of a plain (non-admin) user is refused, named, exit 1
    env.update({"SESSIONSTREAM_KAFKA_BOOTSTRAP": secure_kafka.bootstrap,
                "SESSIONSTREAM_KAFKA_SASL_USERNAME": f"sessionstream.{tenant}.auditor",
                "SESSIONSTREAM_KAFKA_SASL_PASSWORD": secrets["passwords"]["auditor"]})
    refused = cli("acl", "apply", "--tenant", tenant, "--no-redis")
    assert refused.returncode == 1
    assert "Kafka refused the access scopes" in refused.stderr
    assert "Traceback" not in refused.stderr

