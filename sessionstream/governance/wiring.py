"""Build the governance pieces from Settings (called by the composition root)."""

from __future__ import annotations

from typing import Any

from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore, KeyStore, RedisKeyStore, TenantKeys
from sessionstream.governance.opener import SealedContentOpener
from sessionstream.governance.rows import RowCipher


def tenant_keys(settings: Settings) -> TenantKeys:
    """The node's tenant key rings: the settings' key for its tenant, else key files
    (``Settings.tenant_keys_dir``, apart from the data keys; an older tree's are moved).

    The file store (local stack) creates a missing tenant key file; the Redis store (a
    fleet) never does: every node must be given the same key (file or variable).
    """
    env = {settings.tenant: settings.tenant_key} if settings.tenant_key else {}
    return TenantKeys(settings.tenant_keys_dir, env=env, create=settings.key_store == "file",
                      legacy=settings.key_dir / "tenants")


def key_store(settings: Settings, redis_client: Any = None) -> KeyStore:
    if settings.key_store == "redis":
        if redis_client is None:
            from sessionstream import redisconn

            redis_client = redisconn.from_settings(settings)
        return RedisKeyStore(redis_client, tenant_keys(settings), prefix=settings.key_prefix)
    return FileKeyStore(settings.key_dir, tenant_keys(settings))


def content_cipher(settings: Settings, store: KeyStore | None = None) -> ContentCipher:
    return ContentCipher(store or key_store(settings), settings.tenant,
                         enabled=settings.encryption)


def content_opener(settings: Settings, store: KeyStore | None = None) -> SealedContentOpener:
    """The reader pipeline's opening stage for the settings' tenant (always on: a tenant
    that opted out still has sealed history to read)."""
    return SealedContentOpener(ContentCipher(store or key_store(settings), settings.tenant))


def row_cipher(settings: Settings, store: KeyStore | None = None) -> RowCipher:
    """Seals/opens the content-bearing Redis view and state fields of the tenant."""
    return RowCipher(content_cipher(settings, store))


def reader_pipeline(settings: Settings, store: KeyStore | None = None) -> ReaderPipeline:
    """The default reader pipeline with the tenant's content opener (and, with a schema
    registry configured, a codec that also reads Confluent-framed records)."""
    pipeline = ReaderPipeline.default(opener=content_opener(settings, store))
    if settings.wire == "confluent" or settings.schema_registry_url:
        from sessionstream.registry import reader_decode

        pipeline = ReaderPipeline(pipeline.registry, pipeline.catalog,
                                  decode=reader_decode(settings), opener=pipeline.opener)
    return pipeline
