"""Governance of sensitive data: envelope encryption, crypto-shredding, holds, retention.

The edge that implements the core's privacy ports (``sessionstream.core.privacy``) with
``cryptography``: :mod:`.crypto` (AES-256-GCM), :mod:`.keys` (the key hierarchy and
its stores), :class:`ContentCipher` (seal an event's content on write, open it on read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sessionstream.core.catalog import Catalog
from sessionstream.core.events import Event
from sessionstream.core.privacy import (
    ALL_CLASSES,
    DataClass,
    Opened,
    SealedPart,
    open_data,
    seal_parts,
    split,
)
from sessionstream.governance.crypto import AesGcm
from sessionstream.governance.keys import KeyStore


@dataclass
class ContentCipher:
    """Seals and opens the content of one tenant's events with that tenant's key store.

    ``enabled=False`` is the tenant's explicit opt-out: events are written clear (and
    still opened on read, so a tenant can opt back in without losing history).
    """

    store: KeyStore
    tenant: str
    enabled: bool = True
    catalog: Catalog | None = None
    aead: AesGcm | None = None

    def __post_init__(self) -> None:
        if self.aead is None:
            self.aead = AesGcm()

    def seal(self, event: Event, classes: Sequence[DataClass] = ALL_CLASSES
             ) -> tuple[Event, tuple[SealedPart, ...]]:
        """The event with its content replaced by placeholders, and the sealed parts."""
        if not self.enabled:
            return event, ()
        parts = split(event.type, event.data, self.catalog, classes)
        if not parts.parts:
            return event, ()
        assert self.aead is not None
        sealed = seal_parts(self.aead, self.store, tenant=self.tenant,
                            session_id=event.session_id, seq=event.seq,
                            event_id=event.event_id, type_name=event.type, parts=parts.parts)
        return event.replace(data=parts.clear), sealed

    def open(self, event: Event, sealed: Sequence[SealedPart],
             ancestors: Mapping[str, int] | None = None) -> Opened:
        """The event's data with its sealed content put back (or deleted placeholders)."""
        assert self.aead is not None
        return open_data(self.aead, self.store, tenant=self.tenant,
                         session_id=event.session_id, seq=event.seq, event_id=event.event_id,
                         type_name=event.type, clear=event.data, sealed=sealed,
                         ancestors=ancestors, catalog=self.catalog)
