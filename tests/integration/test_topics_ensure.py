"""`sessionstream topics ensure` creates safe topics and never reuses unsafe ones."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from sessionstream.cli.infra import topics_group


@pytest.fixture
def tenant(kafka_admin: AdminClient) -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    topics = [f"sessionstream.{name}.events", f"sessionstream.{name}.dlq"]
    existing = kafka_admin.list_topics(timeout=10).topics
    doomed = [t for t in topics if t in existing]
    if doomed:
        for fut in kafka_admin.delete_topics(doomed).values():
            fut.result(30)


def ensure(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(topics_group, ["ensure", *args])
    return result.exit_code, result.output


def test_creates_both_topics_then_accepts_them(tenant: str, kafka_admin: AdminClient) -> None:
    code, out = ensure("--tenant", tenant, "--partitions", "3", "--json")
    assert code == 0, out
    rows = {r["name"]: r for r in json.loads(out)}
    events = f"sessionstream.{tenant}.events"
    assert rows[events]["action"] == "created"
    assert rows[events]["partitions"] == 3
    assert rows[events]["config"] == {"cleanup.policy": "delete", "retention.ms": "-1"}
    assert rows[f"sessionstream.{tenant}.dlq"]["action"] == "created"
    resource = ConfigResource(ConfigResource.Type.TOPIC, events)
    config = kafka_admin.describe_configs([resource])[resource].result(10)
    assert config["cleanup.policy"].value == "delete"

    code, out = ensure("--tenant", tenant, "--partitions", "3", "--json")
    assert code == 0, out
    assert {r["action"] for r in json.loads(out)} == {"exists"}


@pytest.mark.parametrize(
    ("partitions", "config", "complaint"),
    [
        (3, {"cleanup.policy": "compact"}, "cleanup.policy='compact'"),
        (3, {"retention.ms": "604800000"}, "retention.ms='604800000'"),
        (1, {"cleanup.policy": "delete", "retention.ms": "-1"}, "1 partitions"),
    ],
)
def test_refuses_an_existing_unsafe_events_topic(
    tenant: str, kafka_admin: AdminClient, partitions: int, config: dict[str, str],
    complaint: str,
) -> None:
    events = f"sessionstream.{tenant}.events"
    kafka_admin.create_topics([NewTopic(events, partitions, 1, config=config)])[events].result(30)
    code, out = ensure("--tenant", tenant, "--partitions", "3")
    assert code != 0
    assert events in out
    assert complaint in out
    assert "will not reuse it" in out


def test_a_topic_just_created_is_awaited_until_its_metadata_shows_and_a_missing_one_is_named(
    kafka_admin: AdminClient,
) -> None:
    from sessionstream.producers.topics import TopicError, visible_metadata

    name = f"sstest.ensure.{uuid.uuid4().hex[:10]}"
    futures = kafka_admin.create_topics([NewTopic(name, num_partitions=3,
                                                  replication_factor=1)])
    futures[name].result(30)  # created: its metadata may still be on its way
    try:
        meta = visible_metadata(kafka_admin, name, timeout=30)
        assert len(meta.partitions) == 3
        assert all(p.leader >= 0 for p in meta.partitions.values())
    finally:
        for fut in kafka_admin.delete_topics([name]).values():
            fut.result(30)
    with pytest.raises(TopicError, match=f"{name}.missing' is not visible after ensure"):
        visible_metadata(kafka_admin, f"{name}.missing", timeout=1)
