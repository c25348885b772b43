"""One builder for every Kafka client config (on sessionstream.kafka_config)."""

from __future__ import annotations

import subprocess
import sys

from sessionstream.core.settings import Settings
from sessionstream.producers.kafka_clients import (
    LIBRDKAFKA_LOGGER,
    PRODUCER_DEFAULTS,
    KafkaClients,
    admin_config,
    consumer_config,
    private_group,
    producer_config,
)
from tests.unit.layout import ROOT, package_dirs

#: Modules allowed to spell the librdkafka key: the builder (the constant's home) and
#: the local stack's readiness probe (server management, silenced on purpose, log_level 0).
SPELLS_BOOTSTRAP = {"sessionstream/kafka_config.py", "deploy/local/stack.py"}


def test_every_config_names_the_brokers_and_routes_librdkafka_logs_to_python() -> None:
    for cfg in (admin_config("k:1"), producer_config("k:1"), consumer_config("k:1", "g")):
        assert cfg["bootstrap.servers"] == "k:1"
        assert cfg["log_level"] == 3
        assert cfg["logger"].name == LIBRDKAFKA_LOGGER


def test_a_consumer_never_auto_commits_and_extras_override_but_never_the_brokers() -> None:
    cfg = consumer_config("k:1", "g", {"fetch.max.bytes": 5, "bootstrap.servers": "other:2"})
    assert (cfg["group.id"], cfg["enable.auto.commit"], cfg["fetch.max.bytes"]) == ("g", False, 5)
    assert cfg["bootstrap.servers"] == "k:1"


def test_a_producer_starts_from_the_writer_defaults_unless_told_otherwise() -> None:
    writer = producer_config("k:1", {"linger.ms": 0})
    assert writer["enable.idempotence"] is True and writer["linger.ms"] == 0
    assert {k: writer[k] for k in PRODUCER_DEFAULTS if k != "linger.ms"} == {
        k: v for k, v in PRODUCER_DEFAULTS.items() if k != "linger.ms"}
    plain = producer_config("k:1", {"acks": "1"}, defaults={}, route_logs=False)
    assert plain == {"log_level": 3, "acks": "1", "bootstrap.servers": "k:1"}


def test_the_builders_bind_to_the_process_settings() -> None:
    clients = KafkaClients.from_settings(Settings(kafka_bootstrap="b1:9092,b2:9092"))
    assert clients.consumer("g")["bootstrap.servers"] == "b1:9092,b2:9092"
    assert private_group("replay") != private_group("replay")


def test_no_other_module_builds_a_client_config_by_hand() -> None:
    hand_built = []
    for folder in package_dirs().values():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            text = path.read_text(encoding="utf-8")
            if rel not in SPELLS_BOOTSTRAP and ("'bootstrap.servers'" in text
                                                or '"bootstrap.servers"' in text):
                hand_built.append(rel)
    assert hand_built == []


def test_importing_the_producer_module_installs_no_process_hooks() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sessionstream.producers.kafka as k; print(k.POOL._hooked)"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_config_builders_do_not_import_the_sender_module() -> None:
    """producers.kafka (the sender) builds on producers.kafka_clients, never the reverse."""
    code = ("import sys, producers.kafka_clients; "
            "print('producers.kafka' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"
