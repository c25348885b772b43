"""Access scopes: the plan (principals, Kafka ACLs, Redis rules), the settings that carry
a principal's credentials, and the secure Kafka profile's broker config."""

from __future__ import annotations

import fnmatch
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sessionstream.core.access import (
    kafka_acls,
    principal,
    redis_acl_rules,
    redis_key_patterns,
)
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings, SettingsError
from sessionstream.governance.access import TenantSecrets, redis_url_for
from sessionstream.localstack import stack as devstack
from sessionstream.producers.kafka_clients import KafkaClients


def test_principal_names_are_per_tenant_and_role() -> None:
    assert principal("acme", "writer") == "sessionstream.acme.writer"
    with pytest.raises(ValueError, match="unknown role"):
        principal("acme", "root")


def test_every_kafka_acl_is_scoped_to_the_tenants_prefix_or_the_readback_groups() -> None:
    acls = kafka_acls("acme")
    for acl in acls:
        assert acl.principal.startswith("sessionstream.acme.")
        assert acl.name.startswith(("sessionstream.acme.", "sessionstream-readback-"))
        assert acl.operation in {"read", "write", "describe_configs"}
    writes = {(a.principal, a.name) for a in acls if a.operation == "write"}
    assert writes == {("sessionstream.acme.writer", "sessionstream.acme."),
                      ("sessionstream.acme.worker", "sessionstream.acme.dlq")}
    assert not [a for a in acls if a.principal.endswith(".auditor") and a.operation == "write"]


def test_redis_patterns_match_the_tenants_keys_and_no_other_tenants() -> None:
    mine, other = KeySpace("a", "ss"), KeySpace("ab", "ss")
    patterns = redis_key_patterns(mine)

    def allowed(key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, p) for p in patterns)

    assert allowed(mine.session_row("s1", 3)) and allowed(mine.lease("s1"))
    assert allowed(mine.sessions_index(0)) and allowed(mine.generation())
    assert not allowed(other.session_row("s1", 3)) and not allowed(other.generation())
    assert not allowed(KeySpace("a", "other").session_row("s1", 0))


def test_the_reader_role_cannot_write_and_no_role_can_list_or_flush() -> None:
    reader = redis_acl_rules(KeySpace("a"), "reader", "pw")
    assert "-@write" in reader and "+@write" not in reader
    for role in ("writer", "worker", "reader"):
        rules = redis_acl_rules(KeySpace("a"), role, "pw")
        assert rules[:2] == ["reset", "on"] and ">pw" in rules
        assert {"-@dangerous", "-scan", "-keys"} <= set(rules)
    with pytest.raises(ValueError, match="no Redis user"):
        redis_acl_rules(KeySpace("a"), "auditor", "pw")


def test_sasl_settings_come_from_the_environment_and_reach_every_client_config() -> None:
    s = Settings.from_env({"SESSIONSTREAM_KAFKA_SASL_USERNAME": "sessionstream.a.writer",
                           "SESSIONSTREAM_KAFKA_SASL_PASSWORD": "pw"})
    assert s.kafka_security() == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "sessionstream.a.writer", "sasl.password": "pw"}
    assert "pw" not in repr(s)
    with_user = Settings(redis_url="redis://sessionstream.a.reader:s3cret@h:1/0")
    assert "s3cret" not in repr(with_user)
    clients = KafkaClients.from_settings(s)
    for cfg in (clients.admin(), clients.producer(), clients.consumer("g")):
        assert cfg["sasl.username"] == "sessionstream.a.writer"
        assert cfg["security.protocol"] == "SASL_PLAINTEXT"
    assert Settings.from_env({}).kafka_security() == {}


@pytest.mark.parametrize("env, message", [
    ({"SESSIONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs SESSIONSTREAM_KAFKA_SASL"),
    ({"SESSIONSTREAM_KAFKA_SECURITY_PROTOCOL": "tls"}, "is not a security protocol"),
    ({"SESSIONSTREAM_KAFKA_SASL_USERNAME": "u", "SESSIONSTREAM_KAFKA_SASL_PASSWORD": "p",
      "SESSIONSTREAM_KAFKA_SASL_MECHANISM": "GSSAPI"}, "is not a SASL mechanism"),
    ({"SESSIONSTREAM_DASHBOARD_TOKEN": "acme:x" * 4 + ",acme"}, "is not <tenant>:<token>"),
    ({"SESSIONSTREAM_DASHBOARD_TOKEN": "acme:short"}, "at least 16 characters"),
    ({"SESSIONSTREAM_DASHBOARD_TOKEN": "BAD TENANT:" + "x" * 20}, "valid tenant"),
])
def test_bad_security_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_the_secure_profile_has_scram_the_standard_authorizer_and_no_anonymous_access(
        tmp_path: Path) -> None:
    cfg = devstack.StackConfig(state_dir=tmp_path, kafka_port=29192, controller_port=29193,
                               redis_port=29379, secure=True)
    props = dict(line.split("=", 1) for line in devstack.kafka_properties(cfg).splitlines()
                 if line and not line.startswith("#"))
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert props["listeners"].startswith("SASL_PLAINTEXT://127.0.0.1:29192,")
    assert "PLAINTEXT:PLAINTEXT" not in props["listener.security.protocol.map"]
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert cfg.client_security()["sasl.password"] == cfg.admin_password()
    assert (tmp_path / "kafka" / "admin.secret").stat().st_mode & 0o077 == 0
    # the broker reads the admin's password from its environment, never from this file
    text = devstack.kafka_properties(cfg)
    assert cfg.admin_password() not in text
    jaas = [v for k, v in props.items() if k.endswith("sasl.jaas.config")]
    assert len(jaas) == 2 and all(devstack.ADMIN_SECRET_REF in v for v in jaas)
    assert props["config.providers.env.param.allowlist.pattern"] == (
        f"^{devstack.ADMIN_SECRET_ENV}$")


def test_racing_first_uses_of_the_admin_secret_all_read_the_one_whole_secret(
        tmp_path: Path) -> None:
    path = tmp_path / "kafka" / "admin.secret"
    with ThreadPoolExecutor(16) as pool:
        seen = set(pool.map(lambda _: devstack.stored_secret(path), range(64)))
    assert len(seen) == 1 and len(seen.pop()) >= 32  # one secret, never an empty read
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["admin.secret"]  # no staging left


def test_the_secure_profile_cannot_share_the_plaintext_stacks_ports(tmp_path: Path) -> None:
    s = Settings(state_dir=tmp_path, secure_kafka_port=19092)
    with pytest.raises(devstack.LocalStackError, match="must differ"):
        devstack.secure_stack(s)
    assert devstack.secure_stack(Settings(state_dir=tmp_path)).state_dir == tmp_path / "secure"


def test_tenant_secrets_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = TenantSecrets.load_or_create(tmp_path, "acme")
    again = TenantSecrets.load_or_create(tmp_path, "acme")
    assert first == again and len(first.dashboard_token) >= 32
    assert TenantSecrets.path(tmp_path, "acme").stat().st_mode & 0o077 == 0
    assert TenantSecrets.load_or_create(tmp_path, "globex").passwords != first.passwords


def test_redis_url_for_puts_quoted_credentials_before_the_host() -> None:
    assert redis_url_for("redis://127.0.0.1:16379/0", "sessionstream.a.reader", "p/w") == (
        "redis://sessionstream.a.reader:p%2Fw@127.0.0.1:16379/0")
    assert redis_url_for("redis://old:x@h:1/0", "u", "p") == "redis://u:p@h:1/0"


def test_every_redis_role_may_read_the_cluster_slot_map_and_nothing_else_of_cluster() -> None:
    for role in ("writer", "worker", "reader"):
        rules = redis_acl_rules(KeySpace("a"), role, "pw")
        assert "+cluster|slots" in rules and "+cluster|shards" in rules
        assert not any(r.startswith("+cluster") and "|" not in r for r in rules)
        assert rules.index("+cluster|slots") < rules.index("-@admin")
