"""Sealing long-term memory: one data key per memory operation that carries content.

docs/adr/0030 (amended): the content of a ``propose`` or ``supersede`` record is sealed
under the data key ``mem/<namespace digest>/<op id>`` of the data class ``memory`` (the
key store's session slot holds the name). A memory version's content lives in the record
of the operation that placed it and in the records of the duplicates that collapsed into
it (``Version.content_ops``); every copy of it elsewhere — the namespace's Redis row, a
session's logged ``memory/recall`` — is sealed under the placing operation's key. So
forgetting a version is destroying those keys: the records in Kafka (every replica,
backup), the Redis rows (AOF, RDB) and every session that showed it to a model read
``[content deleted]`` from then on.

A key per operation, not per ``id@version``: the version number is decided by the fold,
after the record is written, so a writer cannot name it (two writers proposing new
versions of one id at once would both seal under ``@n+1``).

:class:`MemorySealer` seals and opens records and row fields; :class:`MemoryCascade` is
the port :class:`~sessionstream.governance.service.Governance` calls when it deletes a
session (the composition root wires the Kafka-backed one from ``producers``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sessionstream.core.errors import ContentKeyShredded, MovedCiphertext, SealedContentError
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, thaw
from sessionstream.core.memory.model import Namespace
from sessionstream.core.privacy import (
    DELETED_TEXT,
    SEALED_TEXT,
    UNAVAILABLE_TEXT,
    KeyState,
    associated_data,
    part_plaintext,
    part_values,
)
from sessionstream.core.rows import SEALED_PREFIX
from sessionstream.core.sealed import DataClass, SealedPart
from sessionstream.governance.crypto import NONCE_BYTES, AesGcm
from sessionstream.governance.keys import KeyStore
from sessionstream.governance.rows import row_ad

#: Where a record's content sits in its ``data`` (the one sealed path).
CONTENT_PATH = "/memory/content"
KEY_PREFIX = "mem/"


def key_name(namespace: Namespace | str, op_id: str) -> str:
    """The data-key name of an operation's content: ``mem/<namespace digest>/<op id>``."""
    digest = namespace.digest if isinstance(namespace, Namespace) else \
        Namespace.parse(namespace).digest
    return f"{KEY_PREFIX}{digest}/{op_id}"


def is_memory_key(name: str) -> bool:
    return name.startswith(KEY_PREFIX)


@dataclass
class Opened:
    """A record's ``data`` with its content put back, or a placeholder and why not."""

    data: Any
    readable: bool = True
    state: KeyState = KeyState.ACTIVE


class MemorySealer:
    """Seals and opens one tenant's memory content (``enabled=False``: the tenant opted
    out of encryption, content is written clear and still opened on read)."""

    def __init__(self, store: KeyStore | None, tenant: str, *, enabled: bool = True,
                 aead: AesGcm | None = None) -> None:
        self.store = store
        self.tenant = tenant
        self.enabled = enabled and store is not None
        self.aead = aead or AesGcm()

    @classmethod
    def of(cls, cipher: Any, tenant: str) -> MemorySealer:
        """From a session ``ContentCipher`` (None: no key store, clear)."""
        if cipher is None:
            return cls(None, tenant, enabled=False)
        return cls(cipher.store, tenant, enabled=bool(cipher.enabled), aead=cipher.aead)

    # -- records ----------------------------------------------------------------------
    def create_keys(self, names: Iterable[str]) -> None:
        """Create the data keys of a batch's operations at once (the file store: one
        sync for all of them instead of one each); :meth:`seal_record` then finds them."""
        wanted = [(name, DataClass.MEMORY) for name in names]
        if self.enabled and self.store is not None and len(wanted) > 1:
            self.store.data_keys(self.tenant, wanted)

    def seal_record(self, record: Mapping[str, Any]) -> tuple[dict[str, Any], list[SealedPart]]:
        """``record`` (``Op.to_json()``) with its content replaced by a placeholder, and
        the sealed part; unchanged when the operation has no content or sealing is off."""
        data = record["data"]
        memory = data.get("memory") if isinstance(data, Mapping) else None
        if not self.enabled or memory is None:
            return dict(record), []
        assert self.store is not None
        name = key_name(record["namespace"], record["op_id"])
        key = self.store.data_key(self.tenant, name, DataClass.MEMORY)
        paths = (CONTENT_PATH,)
        ad = associated_data(self.tenant, name, 0, record["op_id"], "memory/" + record["op"],
                             DataClass.MEMORY.value, paths)
        nonce, ct = self.aead.seal(key, part_plaintext([memory["content"]]), ad)
        clear = {**record, "data": {**data, "memory": {**memory, "content": SEALED_TEXT}}}
        return clear, [SealedPart(DataClass.MEMORY, name, record["op_id"], paths, nonce, ct)]

    def open_record(self, record: Mapping[str, Any], sealed: Iterable[SealedPart]) -> Opened:
        """The record's ``data`` with the content back; a shredded or missing key leaves
        :data:`DELETED_TEXT` / :data:`UNAVAILABLE_TEXT` (``readable`` False). A part that
        is not this record's own raises :class:`MovedCiphertext`."""
        data = record["data"]
        parts = list(sealed)
        if not parts:
            return Opened(data)
        name = key_name(record["namespace"], record["op_id"])
        (part,) = parts if len(parts) == 1 else _too_many(record)
        if (part.data_class is not DataClass.MEMORY or part.key_session != name
                or part.origin_event_id != record["op_id"] or part.paths != (CONTENT_PATH,)):
            raise MovedCiphertext(f"memory operation {record['op_id']!r}: its sealed part "
                                  "was sealed for another operation")
        memory = data.get("memory") if isinstance(data, Mapping) else None
        if memory is None:
            raise SealedContentError(f"memory operation {record['op_id']!r} has sealed "
                                     "content but no memory")
        found = self.store.lookup(self.tenant, name, DataClass.MEMORY) \
            if self.store is not None else None
        if found is None or found.key is None:
            state = KeyState.MISSING if found is None else found.state
            text = DELETED_TEXT if state is KeyState.SHREDDED else UNAVAILABLE_TEXT
            return Opened({**data, "memory": {**memory, "content": text}}, False, state)
        ad = associated_data(self.tenant, name, 0, record["op_id"], "memory/" + record["op"],
                             DataClass.MEMORY.value, part.paths)
        (content,) = part_values(self.aead.open(found.key, part.nonce, part.ciphertext, ad), 1)
        return Opened({**data, "memory": {**memory, "content": thaw(content)}})

    # -- row fields -------------------------------------------------------------------
    def seal_text(self, name: str, field: str, text: str) -> str:
        """``text`` sealed under the memory key ``name`` (bound to the row's field)."""
        if not self.enabled:
            return text
        assert self.store is not None
        try:
            key = self.store.data_key(self.tenant, name, DataClass.MEMORY)
        except ContentKeyShredded:
            return json.dumps(DELETED_TEXT)
        nonce, ct = self.aead.seal(key, text.encode("utf-8"), row_ad(self.tenant, name, field))
        return SEALED_PREFIX + base64.b64encode(nonce + ct).decode()

    def open_text(self, name: str, field: str, stored: str) -> str | None:
        """The clear text; None when the key is shredded or missing here."""
        if not stored.startswith(SEALED_PREFIX):
            return stored
        if self.store is None:
            return None
        found = self.store.lookup(self.tenant, name, DataClass.MEMORY)
        if found.key is None:
            return None
        try:
            blob = base64.b64decode(stored[len(SEALED_PREFIX):], validate=True)
            return self.aead.open(found.key, blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                  row_ad(self.tenant, name, field)).decode()
        except (MovedCiphertext, binascii.Error, ValueError, UnicodeDecodeError):
            return None

    def seal_value(self, name: str, field: str, value: JsonValue) -> str:
        return self.seal_text(name, field, canonical_dumps(value))

    # -- shredding --------------------------------------------------------------------
    def shred(self, names: Iterable[str], *, principal: str, reason: str) -> list[str]:
        """Destroy the memory keys ``names``; the ones this call destroyed."""
        if self.store is None:
            return []
        done = []
        for name in sorted(set(names)):
            if self.store.shred(self.tenant, name, (DataClass.MEMORY,), principal=principal,
                                reason=reason):
                done.append(name)
        return done


def _too_many(record: Mapping[str, Any]) -> Any:
    raise MovedCiphertext(f"memory operation {record['op_id']!r} has more than one sealed "
                          "part")


@dataclass
class MemoryForgetReport:
    """What deleting a session did to long-term memory (joins the deletion report)."""

    namespaces: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)  # versions whose content went
    narrowed: list[str] = field(default_factory=list)  # versions that lost the session
    keys_shredded: int = 0
    held: list[str] = field(default_factory=list)  # namespaces under a hold (waiting)

    def to_json(self) -> dict[str, Any]:
        return {"namespaces": self.namespaces, "forgotten": self.forgotten,
                "narrowed": self.narrowed, "keys_shredded": self.keys_shredded,
                "held": self.held}


class MemoryCascade(Protocol):
    """What a session's deletion asks of long-term memory (docs/adr/0030, "Deletion
    protocol"): mark the session deleted, forget what only it supports everywhere it is
    cited, shred those versions' keys, purge the Redis copies."""

    def forget_session(self, session_id: str, *, principal: str,
                       reason: str) -> MemoryForgetReport: ...

    def sweep(self, retention: Mapping[str, int], *, principal: str) -> Any:
        """Forget expired memories and those of a kind older than its retention."""
        ...
