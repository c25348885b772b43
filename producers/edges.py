"""The clients one session writer uses: Kafka sender, Redis leases + index, attachments.

No network here: the Kafka producer comes from the process pool on first use and the
Redis client connects on its first command. :meth:`WriterEdges.connect` probes Kafka;
:meth:`WriterEdges.close` gives everything back (also when create/open/fork fail half-way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from sessionstream import redisconn
from sessionstream.core.events import Event
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.producers.attachments import AttachmentStore, LocalAttachmentStore
from sessionstream.producers.config import WriterConfig
from sessionstream.producers.errors import RedisUnavailable
from sessionstream.producers.index import SessionIndex
from sessionstream.producers.kafka import KafkaSender
from sessionstream.producers.lease import Lease, LeaseStore
from sessionstream.producers.limits import (
    CLIENT_MAX_MESSAGE_BYTES,
    RECORD_OVERHEAD,
    topic_max_message_bytes,
)
from sessionstream.producers.readback import DecodeMany, NativeDecoder

log = logging.getLogger("sessionstream.producers.writer")

#: Redis calls of a writer: fail within seconds, not minutes, when Redis is away.
REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_TIMEOUT_S = 5.0


class WriterEdges:
    """The writer's clients: Kafka sender, Redis leases + index, attachments, codec."""

    def __init__(self, cfg: WriterConfig) -> None:
        from sessionstream.core import codec  # the Avro codec; imported at the edge

        self.cfg = cfg
        self.encode: Callable[[Event], bytes] = codec.encode
        decode: Callable[[Any], Event] = codec.decode
        if cfg.wire == "confluent" or cfg.schema_registry_url:
            from sessionstream.registry import wire_codec  # registers <topic>-value

            wire = wire_codec(cfg.wire, cfg.schema_registry_url, cfg.topic, writing=True)
            self.encode, decode = wire.encode, wire.decode
        self.decode: Callable[[Any], Event] = decode
        self.opener: SealedContentOpener | None = None
        if cfg.cipher is not None:
            self.opener = SealedContentOpener(cfg.cipher)
            self.decode = self.opener.decoder(decode)
        #: Decodes a read-back's records in one call (the native Avro reader, the codec
        #: deciding what it does not take); None: record by record with ``decode``.
        self.decode_many: DecodeMany | None = None
        if cfg.native_decode and decode is codec.decode and NativeDecoder.available():
            self.decode_many = NativeDecoder(
                self.decode, self.opener.open if self.opener is not None else None)
        self.redis = redisconn.sync_redis(
            cfg.redis_url,
            cluster=cfg.redis_cluster,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_TIMEOUT_S,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        )
        self.leases = LeaseStore(self.redis, cfg.key_prefix, cfg.redis_url)
        self.index = SessionIndex(self.redis, cfg.key_prefix, cfg.redis_url)
        self.store: AttachmentStore | None = (
            LocalAttachmentStore(cfg.attachment_dir) if cfg.attachment_dir is not None else None
        )
        self.sender = KafkaSender(
            cfg.bootstrap,
            cfg.topic,
            config={"message.max.bytes": CLIENT_MAX_MESSAGE_BYTES, **cfg.kafka_security,
                    **cfg.producer_config},
        )

    def connect(self) -> None:
        """Probe Kafka (bounded): BrokerUnavailable / TopicNotFound before any lease."""
        self.sender.connect(self.cfg.connect_timeout_s)

    def close(self, timeout: float = 0.0) -> None:
        """Give the producer back to the pool and close the Redis connections."""
        try:
            self.sender.close(timeout)
        finally:
            self.redis.close()

    def abort(self, lease: Lease | None, next_seq: int = 0) -> None:
        """Undo a half-done create/open/fork: release the lease, close the clients."""
        try:
            if lease is not None:
                self.leases.release(lease, next_seq, lease.last_event_id)
        except RedisUnavailable:
            log.warning("session %s: lease not released (Redis unreachable); it expires "
                        "in %d ms", lease.session_id if lease else "?", self.cfg.lease_ttl_ms)
        finally:
            self.close(0)

    def limit(self) -> int:
        """Bytes one record (key + value) may take on the events topic."""
        topic_limit = self.cfg.max_message_bytes or topic_max_message_bytes(
            self.cfg.bootstrap, self.cfg.topic, security=self.cfg.kafka_security
        )
        return min(topic_limit, CLIENT_MAX_MESSAGE_BYTES) - RECORD_OVERHEAD
