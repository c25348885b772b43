"""Fixtures for tests against the real Kafka and Redis (started by ``make up``).

Each test gets its own topic, consumer group and Redis key prefix, so tests can run
against a shared instance. Unreachable servers fail the tests; they are never skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient, NewTopic

from sessionstream.core.settings import Settings
from sessionstream.localstack.stack import kafka_ready
from tests.integration.procs import ProcessGroup


@pytest.fixture(scope="session", autouse=True)
def _servers_reachable(settings: Settings) -> None:
    """Fail (not skip) every integration test when Kafka or Redis is not reachable."""
    problems = []
    if not kafka_ready(settings.kafka_bootstrap, timeout=5):
        problems.append(f"Kafka at {settings.kafka_bootstrap}")
    try:
        redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3).ping()
    except redis.RedisError:
        problems.append(f"Redis at {settings.redis_url}")
    if problems:
        pytest.fail(f"{' and '.join(problems)} unreachable: run `make up` "
                    "(or `sessionstream up`) first, or point SESSIONSTREAM_KAFKA_BOOTSTRAP / "
                    "SESSIONSTREAM_REDIS_URL at running servers.", pytrace=False)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kafka_admin(settings: Settings) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.kafka_bootstrap})


@pytest.fixture
def unique_topic(kafka_admin: AdminClient) -> Iterator[Callable[..., str]]:
    """Factory: ``unique_topic(partitions=4, **config)`` creates a fresh topic, deleted after."""
    created: list[str] = []

    def make(partitions: int = 4, **config: str) -> str:
        name = unique("sstest").replace("-", ".", 1)
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1,
                      config={k.replace("_", "."): v for k, v in config.items()})]
        )
        futures[name].result(30)
        created.append(name)
        return name

    yield make
    if created:
        for fut in kafka_admin.delete_topics(created).values():
            fut.result(30)


@pytest.fixture
def consumer_group() -> str:
    return unique("sstest-group")


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def redis_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A unique key prefix; every key starting with it is deleted after the test."""
    prefix = unique("sstest")
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[ProcessGroup]:
    """Start subprocesses (faust workers, CLI commands); all are killed after the test."""
    group = ProcessGroup(tmp_path)
    yield group
    group.kill_all()
