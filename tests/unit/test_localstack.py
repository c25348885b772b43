"""deploy/local helpers that need no servers: port conflicts, config, pid files."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstream.core.settings import Settings, SettingsError
from sessionstream.localstack import stack as localstack
from sessionstream.localstack.stack import LocalStackError, StackConfig


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_held_port_is_reported_with_its_number_and_holder(listening_port: int) -> None:
    assert not localstack.port_is_free(listening_port)
    with pytest.raises(LocalStackError) as err:
        localstack.check_port_free(listening_port, "Redis", "SESSIONSTREAM_REDIS_PORT")
    message = str(err.value)
    assert str(listening_port) in message
    assert f"pid {os.getpid()}" in message
    assert "SESSIONSTREAM_REDIS_PORT" in message


def test_a_free_port_passes() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert localstack.port_is_free(port)
    localstack.check_port_free(port, "Kafka", "SESSIONSTREAM_KAFKA_PORT")


def test_stack_config_rejects_bad_and_clashing_ports(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="SESSIONSTREAM_KAFKA_PORT"):
        StackConfig.from_settings(Settings.from_env({"SESSIONSTREAM_KAFKA_PORT": "70000"}))
    with pytest.raises(LocalStackError, match="must differ"):
        StackConfig.from_settings(Settings.from_env({"SESSIONSTREAM_KAFKA_PORT": "16379"}))


def test_defaults_avoid_the_system_ports(tmp_path: Path) -> None:
    cfg = StackConfig.from_settings(Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path)}))
    assert (cfg.kafka_port, cfg.controller_port, cfg.redis_port) == (19092, 19093, 16379)
    assert cfg.state_dir == tmp_path


def test_kafka_properties_are_single_node_loopback_kraft(tmp_path: Path) -> None:
    cfg = StackConfig(state_dir=tmp_path, kafka_port=29092, controller_port=29093)
    props = dict(
        line.split("=", 1) for line in localstack.kafka_properties(cfg).splitlines()
        if line and not line.startswith("#")
    )
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:29093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["log.dirs"] == str(tmp_path / "kafka" / "data")


def test_a_stale_or_foreign_pid_file_is_not_ours(tmp_path: Path) -> None:
    cfg = StackConfig(state_dir=tmp_path)
    cfg.dir("redis").mkdir(parents=True)
    cfg.pid_file("redis").write_text("999999999\n")  # no such process
    assert localstack.owned_pid(cfg, "redis") is None
    cfg.pid_file("redis").write_text(f"{os.getpid()}\n")  # alive, but not our server
    assert localstack.owned_pid(cfg, "redis") is None


def test_kafka_version_comes_from_the_pom() -> None:
    pom = StackConfig.from_settings(Settings.from_env({})).pom
    assert localstack.kafka_version(pom).startswith("4.")
