"""Create the tenant's topics, or verify that existing ones are fit for an event log.

An existing topic is never silently reused when it could lose or reorder events:
compaction would drop history, finite retention would expire it, fewer partitions would
change which partition a session id hashes to.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from sessionstream.core.errors import SessionStreamError
from sessionstream.core.settings import Settings
from sessionstream.producers.kafka_clients import admin_config

# Unlimited retention: the log is the source of truth, it is never expired by default.
EVENT_LOG_CONFIG: Mapping[str, str] = {"cleanup.policy": "delete", "retention.ms": "-1"}


class TopicError(SessionStreamError):
    """A topic could not be created, or exists with a configuration that is unsafe to reuse."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=lambda: dict(EVENT_LOG_CONFIG))


@dataclass(frozen=True)
class TopicResult:
    name: str
    action: str  # "created" | "exists"
    partitions: int
    config: Mapping[str, str]


def tenant_topics(settings: Settings, partitions: int | None = None,
                  replication_factor: int | None = None) -> list[TopicSpec]:
    """The canonical events topic, the dead-letter topic and the long-term memory topic
    of ``settings.tenant`` (the memory log is keyed by namespace: docs/adr/0030)."""
    parts = partitions or settings.partitions
    rf = replication_factor or settings.replication_factor
    config = {**EVENT_LOG_CONFIG, **durability_config(rf)}
    return [
        TopicSpec(settings.events_topic, parts, rf, config),
        # Same partitioning as the events topic, so a session's rejects stay in order too.
        TopicSpec(settings.dlq_topic, parts, rf, dict(config)),
        TopicSpec(settings.memory_topic, parts, rf, dict(config)),
    ]


def durability_config(replication_factor: int) -> dict[str, str]:
    """``min.insync.replicas`` for a replicated topic: 2 of 3 (a majority, at most 2).

    With the writers' acks=all, an acknowledged event is then on at least two brokers, and
    one broker may be down without stopping appends. One replica needs no setting.
    """
    if replication_factor < 3:
        return {}
    return {"min.insync.replicas": str(min(2, replication_factor - 1))}


def admin_client(bootstrap: str, security: Mapping[str, str] | None = None) -> AdminClient:
    """An admin client; ``security``: the principal's keys (``Settings.kafka_security()``)."""
    return AdminClient(admin_config(bootstrap, security=security))


def ensure_topics(admin: AdminClient, specs: list[TopicSpec],
                  timeout: float = 30.0) -> list[TopicResult]:
    """Create missing topics; check existing ones. Raises ``TopicError`` on any misfit."""
    try:
        existing = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise TopicError(f"cannot reach Kafka to list topics: {exc}. Is it running? "
                         "Try `sessionstream status` / `make up`.") from exc
    missing = [s for s in specs if s.name not in existing]
    created: set[str] = set()
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions,
                      replication_factor=s.replication_factor, config=dict(s.config))
             for s in missing],
            request_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result()
                created.add(name)
            except KafkaException as exc:
                err = exc.args[0]
                # Lost a race with another `ensure`: fall through to verification.
                code = err.code() if isinstance(err, KafkaError) else None
                if code != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicError(f"creating topic {name!r} failed: {err}") from exc
    return [_verify(admin, spec, "created" if spec.name in created else "exists", timeout)
            for spec in specs]


#: How often the metadata of a topic just created is asked again until it shows up.
METADATA_POLL_S = 0.2


def visible_metadata(admin: AdminClient, name: str, timeout: float) -> Any:
    """The topic's metadata once the cluster shows it with every partition led.

    A topic created a moment ago is not in every broker's metadata at once: the first
    answers can be UNKNOWN_TOPIC_OR_PART or partitions without a leader. Asked again
    every METADATA_POLL_S until ``timeout``; then TopicError names the last answer.
    """
    deadline = time.monotonic() + timeout
    last = "missing"
    while True:
        try:
            meta = admin.list_topics(topic=name, timeout=max(1.0, min(5.0, timeout)))
            topic = meta.topics.get(name)
        except KafkaException as exc:
            topic, last = None, str(exc)
        if topic is not None and topic.error is None and topic.partitions and all(
                p.leader >= 0 and p.error is None for p in topic.partitions.values()):
            return topic
        if topic is not None:
            last = str(topic.error) if topic.error is not None else "partitions without a leader"
        if time.monotonic() >= deadline:
            raise TopicError(f"topic {name!r} is not visible after ensure ({timeout:.0f}s): "
                             f"{last}")
        time.sleep(METADATA_POLL_S)


def _verify(admin: AdminClient, spec: TopicSpec, action: str, timeout: float) -> TopicResult:
    meta = visible_metadata(admin, spec.name, timeout)
    partitions = len(meta.partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, spec.name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            entries = admin.describe_configs([resource], request_timeout=timeout)[
                resource].result()
            break
        except KafkaException as exc:
            # the configuration of a topic just created may not be readable yet either
            if action != "created" or time.monotonic() >= deadline:
                raise TopicError(
                    f"cannot read the configuration of topic {spec.name!r}: {exc}") from exc
            time.sleep(METADATA_POLL_S)
    actual = {key: entries[key].value for key in spec.config if key in entries}
    problems = [f"{key}={actual.get(key)!r} (need {want!r})"
                for key, want in spec.config.items() if actual.get(key) != want]
    if partitions < spec.partitions:
        problems.append(f"{partitions} partitions (need at least {spec.partitions})")
    if problems:
        raise TopicError(
            f"topic {spec.name!r} already exists with an unsafe configuration: "
            f"{'; '.join(problems)}. sessionstream will not reuse it. Fix it (e.g. "
            f"kafka-configs --alter --entity-type topics --entity-name {spec.name} "
            f"--add-config cleanup.policy=delete,retention.ms=-1) or delete it if it holds "
            "nothing you need, then run `sessionstream topics ensure` again."
        )
    return TopicResult(spec.name, action, partitions, actual)
