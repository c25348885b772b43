"""Settings are validated once, with messages that name the variable and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionstream.core.settings import Settings, SettingsError


def test_defaults_point_at_the_local_stack() -> None:
    s = Settings.from_env({})
    assert s.kafka_bootstrap == "127.0.0.1:19092"
    assert s.redis_url == "redis://127.0.0.1:16379/0"
    assert s.tenant == "default"
    assert s.events_topic == "sessionstream.default.events"
    assert s.dlq_topic == "sessionstream.default.dlq"
    assert s.partitions == 12
    assert s.state_dir.name == ".state"
    assert s.attachment_dir == s.state_dir / "attachments"


def test_topic_names_follow_the_tenant() -> None:
    s = Settings.from_env({"SESSIONSTREAM_TENANT": "acme-prod"})
    assert s.events_topic == "sessionstream.acme-prod.events"
    assert s.dlq_topic == "sessionstream.acme-prod.dlq"


def test_addresses_follow_the_port_variables() -> None:
    s = Settings.from_env({"SESSIONSTREAM_KAFKA_PORT": "29092",
                           "SESSIONSTREAM_REDIS_PORT": "26379"})
    assert s.kafka_bootstrap == "127.0.0.1:29092"
    assert s.redis_url == "redis://127.0.0.1:26379/0"


def test_explicit_addresses_win_over_ports(tmp_path: Path) -> None:
    s = Settings.from_env({
        "SESSIONSTREAM_KAFKA_BOOTSTRAP": "k1:9092,k2:9092",
        "SESSIONSTREAM_KAFKA_PORT": "29092",
        "SESSIONSTREAM_REDIS_URL": "redis://cache:6379/2",
        "SESSIONSTREAM_STATE_DIR": str(tmp_path),
    })
    assert s.kafka_bootstrap == "k1:9092,k2:9092"
    assert s.redis_url == "redis://cache:6379/2"
    assert s.state_dir == tmp_path


def test_settings_are_frozen() -> None:
    s = Settings.from_env({})
    with pytest.raises(AttributeError):
        s.tenant = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"SESSIONSTREAM_TENANT": "Acme.Prod"}, "SESSIONSTREAM_TENANT"),
        ({"SESSIONSTREAM_TENANT": "a/b"}, "SESSIONSTREAM_TENANT"),
        ({"SESSIONSTREAM_TENANT": "{x}"}, "SESSIONSTREAM_TENANT"),
        ({"SESSIONSTREAM_PARTITIONS": "twelve"}, "SESSIONSTREAM_PARTITIONS"),
        ({"SESSIONSTREAM_PARTITIONS": "0"}, "SESSIONSTREAM_PARTITIONS"),
        ({"SESSIONSTREAM_REPLICATION_FACTOR": "0"}, "SESSIONSTREAM_REPLICATION_FACTOR"),
        ({"SESSIONSTREAM_KAFKA_BOOTSTRAP": "localhost"}, "SESSIONSTREAM_KAFKA_BOOTSTRAP"),
        ({"SESSIONSTREAM_KAFKA_BOOTSTRAP": "h:99999"}, "SESSIONSTREAM_KAFKA_BOOTSTRAP"),
        ({"SESSIONSTREAM_REDIS_URL": "http://x:1"}, "SESSIONSTREAM_REDIS_URL"),
        ({"SESSIONSTREAM_KAFKA_PORT": "x"}, "SESSIONSTREAM_KAFKA_PORT"),
        ({"SESSIONSTREAM_LEASE_TTL_MS": "50"}, "SESSIONSTREAM_LEASE_TTL_MS"),
        ({"SESSIONSTREAM_LEASE_TTL_MS": "soon"}, "SESSIONSTREAM_LEASE_TTL_MS"),
    ],
)
def test_invalid_values_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(SettingsError, match=names):
        Settings.from_env(env)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:16379/0", "rediss://:secret@cache:6380/2",
                                 "redis://cache", "redis://u:p@h:1/0?health_check_interval=2",
                                 "unix:///run/redis.sock"])
def test_redis_url_shapes_that_are_accepted(url: str) -> None:
    assert Settings.from_env({"SESSIONSTREAM_REDIS_URL": url}).redis_url == url


def test_key_prefix_and_topic_overrides_come_from_the_environment() -> None:
    s = Settings.from_env({"SESSIONSTREAM_KEY_PREFIX": "t1", "SESSIONSTREAM_TENANT": "acme",
                           "SESSIONSTREAM_EVENTS_TOPIC": "x.events",
                           "SESSIONSTREAM_DLQ_TOPIC": "x.dlq"})
    assert (s.key_prefix, s.events_topic, s.dlq_topic) == ("t1", "x.events", "x.dlq")
    assert Settings.from_env({"SESSIONSTREAM_TENANT": "acme"}).events_topic == (
        "sessionstream.acme.events")
    assert Settings.from_env({}).key_prefix == "ss"


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"SESSIONSTREAM_KEY_PREFIX": "a{b}"}, "SESSIONSTREAM_KEY_PREFIX"),
        ({"SESSIONSTREAM_KEY_PREFIX": "has space"}, "SESSIONSTREAM_KEY_PREFIX"),
        ({"SESSIONSTREAM_EVENTS_TOPIC": "bad/topic"}, "SESSIONSTREAM_EVENTS_TOPIC"),
        ({"SESSIONSTREAM_DLQ_TOPIC": "bad topic"}, "SESSIONSTREAM_DLQ_TOPIC"),
    ],
)
def test_a_bad_prefix_or_topic_override_names_its_variable(env: dict[str, str],
                                                           name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_operations_settings_default_to_one_node_single_object_and_no_metrics() -> None:
    s = Settings.from_env({})
    assert (s.redis_cluster, s.wire, s.schema_registry_url, s.metrics_port) == (
        False, "single-object", None, None)


def test_operations_settings_are_read_from_the_environment() -> None:
    s = Settings.from_env({
        "SESSIONSTREAM_REDIS_CLUSTER": "true", "SESSIONSTREAM_WIRE": "single-object",
        "SESSIONSTREAM_SCHEMA_REGISTRY_URL": "http://127.0.0.1:18081/apis/ccompat/v7",
        "SESSIONSTREAM_METRICS_PORT": "9464"})
    assert s.redis_cluster is True
    assert s.wire == "single-object"
    assert s.schema_registry_url == "http://127.0.0.1:18081/apis/ccompat/v7"
    assert s.metrics_port == 9464


@pytest.mark.parametrize("env,needle", [
    ({"SESSIONSTREAM_WIRE": "protobuf"}, "SESSIONSTREAM_WIRE='protobuf'"),
    ({"SESSIONSTREAM_WIRE": "confluent"}, "needs SESSIONSTREAM_SCHEMA_REGISTRY_URL"),
    ({"SESSIONSTREAM_SCHEMA_REGISTRY_URL": "registry:8081"}, "is not an http(s) URL"),
    ({"SESSIONSTREAM_REDIS_CLUSTER": "maybe"}, "SESSIONSTREAM_REDIS_CLUSTER='maybe'"),
    ({"SESSIONSTREAM_METRICS_PORT": "70000"}, "SESSIONSTREAM_METRICS_PORT=70000"),
])
def test_bad_operations_settings_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SettingsError) as exc:
        Settings.from_env(env)
    assert needle in str(exc.value)


def test_encryption_is_on_by_default_and_a_tenant_opts_out_explicitly() -> None:
    assert Settings.from_env({}).encryption is True
    assert Settings.from_env({"SESSIONSTREAM_ENCRYPTION": "off"}).encryption is False
    with pytest.raises(SettingsError, match="SESSIONSTREAM_ENCRYPTION"):
        Settings.from_env({"SESSIONSTREAM_ENCRYPTION": "maybe"})


def test_the_faust_data_dir_is_under_the_state_dir_unless_set() -> None:
    """Not faust's default (``<app id>-data/`` in the working directory, i.e. a checkout)."""
    assert Settings.from_env({"SESSIONSTREAM_STATE_DIR": "/x"}).faust_datadir == Path("/x/faust")
    assert Settings.from_env({"SESSIONSTREAM_STATE_DIR": "/x", "SESSIONSTREAM_FAUST_DATADIR":
                              "/y/f"}).faust_datadir == Path("/y/f")


def test_key_store_and_retention_are_validated() -> None:
    s = Settings.from_env({"SESSIONSTREAM_STATE_DIR": "/x", "SESSIONSTREAM_RETENTION":
                           "raw=30d, surface=12h"})
    assert s.key_store == "file" and s.key_dir == Path("/x/keys")
    assert s.retention == (("raw", 30 * 86_400_000), ("surface", 12 * 3_600_000))
    with pytest.raises(SettingsError, match="SESSIONSTREAM_KEY_STORE"):
        Settings.from_env({"SESSIONSTREAM_KEY_STORE": "vault"})
    with pytest.raises(SettingsError, match="SESSIONSTREAM_RETENTION"):
        Settings.from_env({"SESSIONSTREAM_RETENTION": "chunks=3d"})
    with pytest.raises(SettingsError, match="SESSIONSTREAM_RETENTION"):
        Settings.from_env({"SESSIONSTREAM_RETENTION": "raw=3w"})


def test_the_tenant_key_never_appears_in_the_settings_repr() -> None:
    s = Settings.from_env({"SESSIONSTREAM_TENANT_KEY": "1:c2VjcmV0"})
    assert s.tenant_key == "1:c2VjcmV0" and "c2VjcmV0" not in repr(s)


def test_a_redis_url_listing_several_nodes_needs_the_cluster_setting() -> None:
    url = "redis://127.0.0.1:17001,127.0.0.1:17002/0"
    with pytest.raises(SettingsError) as exc:
        Settings.from_env({"SESSIONSTREAM_REDIS_URL": url})
    assert "SESSIONSTREAM_REDIS_CLUSTER=true" in str(exc.value)
    s = Settings.from_env({"SESSIONSTREAM_REDIS_URL": url, "SESSIONSTREAM_REDIS_CLUSTER": "1"})
    assert s.redis_cluster and s.redis_url == url


def test_settings_built_in_code_and_from_the_environment_default_alike() -> None:
    # A harness that builds Settings(...) in code gets the engine, fold and append path
    # that an empty environment gives, not an older default.
    code, env = Settings(), Settings.from_env({})
    assert (code.engine, code.fold, code.append) == (env.engine, env.fold, env.append)
    assert code.engine == "kafka"


def test_the_lease_length_comes_from_the_environment_into_every_writer() -> None:
    from sessionstream.producers.config import WriterConfig

    assert Settings.from_env({}).lease_ttl_ms == 30_000
    s = Settings.from_env({"SESSIONSTREAM_LEASE_TTL_MS": "5000"})
    assert WriterConfig.from_settings(s).lease_ttl_ms == 5000
