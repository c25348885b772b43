"""Governance of sensitive data: envelope encryption, crypto-shredding, holds, retention.

The edge that implements the core's privacy ports (``sessionstream.core.privacy``) with
``cryptography``: :mod:`.crypto` (AES-256-GCM), :mod:`.keys` (the key hierarchy and
its stores), :class:`ContentCipher` (seal an event's content on write, open it on read).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.catalog import Catalog
from sessionstream.core.errors import ContentKeyShredded
from sessionstream.core.events import Event
from sessionstream.core.privacy import (
    ALL_CLASSES,
    DELETED_TEXT,
    DataClass,
    Opened,
    SealedPart,
    memory_key_of,
    open_data,
    seal_parts,
    split,
)
from sessionstream.governance.crypto import AesGcm
from sessionstream.governance.keys import KeyStore

log = logging.getLogger(__name__)


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

    def prefetch_keys(self, session_ids: Sequence[str],
                      classes: Sequence[DataClass] = ALL_CLASSES) -> None:
        """Make (or read) the data keys of ``session_ids`` in ``classes`` into the key
        store's cache in one batch (the file store: one fsync; Redis: one round trip
        each way): the same keys a later seal asks for, only earlier, so a shred reaches
        that cache as it reaches any. Only a warm-up: an error is left to the seal,
        which asks again and raises it."""
        if not self.enabled or not session_ids:
            return
        try:
            self.store.data_keys(self.tenant, [(sid, cls) for sid in session_ids
                                               for cls in classes])
        except Exception as exc:  # the seal that needs the key raises it
            log.debug("data keys of %d session(s) not prefetched: %s", len(session_ids),
                      type(exc).__name__)

    def seal(self, event: Event, classes: Sequence[DataClass] = ALL_CLASSES, *,
             origin: tuple[str, str] | None = None) -> tuple[Event, tuple[SealedPart, ...]]:
        """The event with its content replaced by placeholders, and the sealed parts.

        ``origin`` (key session, event id): a fork's inherited seed event is sealed with
        its ancestor's data key and bound to the ancestor's event, so deleting the
        ancestor makes the child's copy unreadable too. An ancestor class already
        shredded leaves :data:`DELETED_TEXT` in the copy.
        """
        if not self.enabled:
            return event, ()
        clear, sealed = self._seal(event, classes, origin)
        return (event, ()) if clear is event.data else (event.replace(data=clear), sealed)

    def _seal(self, event: Event, classes: Sequence[DataClass],
              origin: tuple[str, str] | None) -> tuple[Any, tuple[SealedPart, ...]]:
        memory_key = memory_key_of(event.type, event.data)
        if memory_key is not None and DataClass.MEMORY not in classes:
            classes = (*classes, DataClass.MEMORY)  # a memory's copy is always sealed
        parts = split(event.type, event.data, self.catalog, classes)
        if not parts.parts:
            return event.data, ()
        assert self.aead is not None
        key_session, origin_id = origin or (event.session_id, event.event_id)
        sealed: list[SealedPart] = []
        gone: list[DataClass] = []
        for part in parts.parts:
            try:
                sealed += seal_parts(self.aead, self.store, tenant=self.tenant,
                                     session_id=key_session, seq=event.seq,
                                     event_id=origin_id, type_name=event.type, parts=(part,),
                                     memory_key=memory_key)
            except ContentKeyShredded:
                if origin is None and part.data_class is not DataClass.MEMORY:
                    raise  # (a memory forgotten before its recall was logged: deleted)
                gone.append(part.data_class)
        clear = parts.clear
        if gone:
            clear = split(event.type, event.data, self.catalog, gone, text=DELETED_TEXT).clear
            clear = split(event.type, clear, self.catalog,
                          [c for c in classes if c not in gone]).clear
        return clear, tuple(sealed)

    def seal_event(self, event: Event, *, origin: tuple[str, str] | None = None) -> Event:
        """The event as it goes on the wire: placeholders in ``data``, content in ``sealed``."""
        if event.sealed or not self.enabled:
            return event
        clear, sealed = self._seal(event, ALL_CLASSES, origin)
        if clear is event.data:
            return event
        return event.replace(data=clear, sealed=sealed)

    def open(self, event: Event, sealed: Sequence[SealedPart],
             seed_length: int | None = 0) -> Opened:
        """The event's data with its sealed content put back (or deleted placeholders)."""
        assert self.aead is not None
        return open_data(self.aead, self.store, tenant=self.tenant,
                         session_id=event.session_id, seq=event.seq, event_id=event.event_id,
                         type_name=event.type, clear=event.data, sealed=sealed,
                         seed_length=seed_length, catalog=self.catalog)
