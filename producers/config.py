"""WriterConfig: where and how a session writer writes (built from Settings once)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sessionstream.core.rows import DEFAULT_PREFIX as DEFAULT_KEY_PREFIX
from sessionstream.core.rows import KeySpace
from sessionstream.governance import ContentCipher
from sessionstream.producers.attachments import DEFAULT_SPILL_THRESHOLD
from sessionstream.producers.lease import DEFAULT_TTL_MS


class WriterStats(Protocol):
    """An observer of writer incidents (metrics, alerts); told only bounded labels.

    ``fenced(reason)``: a writer learned it lost the session (``lease_renewal``: the renewal
    said another writer holds it; ``not_admitted``: readers refused events it flushed;
    ``hand_off``: the hand-off found a newer epoch). ``delivery_error(state)``: the broker
    did not confirm a record (``failed`` or ``possibly-persisted``). Never session ids or
    content. Called on the writer's thread; must not raise or block.
    """

    def fenced(self, reason: str) -> None: ...

    def delivery_error(self, state: str) -> None: ...


@dataclass(frozen=True)
class WriterConfig:
    """Where and how a writer writes (built from Settings once, passed down)."""

    bootstrap: str
    topic: str
    redis_url: str = field(repr=False)  # may carry a Redis ACL user's password
    tenant: str = "default"
    redis_cluster: bool = False  # redis_url names nodes of a Redis Cluster
    key_prefix: str = DEFAULT_KEY_PREFIX
    lease_ttl_ms: int = DEFAULT_TTL_MS
    attachment_dir: Path | None = None
    spill_threshold: int = DEFAULT_SPILL_THRESHOLD
    max_message_bytes: int | None = None  # None: read the topic's max.message.bytes
    flush_timeout_s: float = 30.0  # the flush that ends create/open/fork
    connect_timeout_s: float = 10.0  # the Kafka probe of create/open/fork (fails fast
    # in about a second when librdkafka reports every broker down)
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    #: The principal's librdkafka keys (``Settings.kafka_security()``), for the producer,
    #: the read-back consumer and the admin lookups alike.
    kafka_security: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Seals event content and attachments with the session's data keys (None: clear);
    #: ``from_settings`` builds it (sealing unless the tenant opted out).
    cipher: ContentCipher | None = None
    #: Told of fencings and delivery errors (e.g. ``producers.metrics.WriterMetrics``).
    stats: WriterStats | None = field(default=None, repr=False, compare=False)
    #: Record framing (``Settings.wire``): "confluent" registers the schema and frames
    #: with its id at ``schema_registry_url``; readers detect either.
    wire: str = "single-object"
    schema_registry_url: str | None = None
    #: Decode read-backs (resume, proofs, confirm) with the native extension's Avro
    #: reader when it is installed; False (``Settings.fold`` "python"): fastavro only.
    native_decode: bool = True
    #: The append path (``Settings.append``): "auto" (native when the extension serves
    #: this writer), "native" (required), "python" (the reference); producers.native_append.
    append: str = "auto"

    @property
    def keys(self) -> KeySpace:
        """The tenant's Redis key space (``sessionstream.core.rows``)."""
        return KeySpace(self.tenant, self.key_prefix)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> WriterConfig:
        """From ``sessionstream.core.settings.Settings`` (duck-typed: no import cycle)."""
        base: dict[str, Any] = {
            "bootstrap": settings.kafka_bootstrap,
            "topic": settings.events_topic,
            "redis_url": settings.redis_url,
            "redis_cluster": getattr(settings, "redis_cluster", False),
            "tenant": settings.tenant,
            "key_prefix": getattr(settings, "key_prefix", DEFAULT_KEY_PREFIX),
            "attachment_dir": getattr(settings, "attachment_dir", None),
            "wire": getattr(settings, "wire", "single-object"),
            "schema_registry_url": getattr(settings, "schema_registry_url", None),
            "native_decode": getattr(settings, "fold", "auto") != "python",
            "append": getattr(settings, "append", "auto"),
            "lease_ttl_ms": getattr(settings, "lease_ttl_ms", DEFAULT_TTL_MS),
        }
        if hasattr(settings, "kafka_security"):
            base["kafka_security"] = settings.kafka_security()
        if "cipher" not in overrides and hasattr(settings, "encryption"):
            # Always a cipher: it seals only when the tenant did not opt out, and it
            # opens sealed history on read-back either way.
            from sessionstream.governance.wiring import content_cipher

            base["cipher"] = content_cipher(settings)
        base.update(overrides)
        return cls(**base)


def default_writer_id() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
