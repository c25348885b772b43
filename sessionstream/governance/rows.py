"""Sealed Redis rows: projection views and states encrypted with the session's keys.

A unit whose views can hold content (:data:`sessionstream.core.privacy.UNIT_CLASSES`:
surface, turns, business, todo, plan, goal) is stored as ``ss-aead1:<base64(nonce ||
AES-256-GCM ciphertext)>``, sealed with the session's data key of the unit's class and
bound to tenant, session and field name (a value cannot be moved to another row or
field). Metadata units (index, tools, usage, compaction, rejections) stay clear, so the
session list, watermarks and token counts need no key. Redis memory, AOF and RDB files
then hold no plaintext content, and a shred makes the Redis copies unreadable at once,
even before they are purged. A class whose key is already shredded is stored clear:
the processor refolds such a session from the log, where its content reads as
placeholders, so there is nothing left to hide.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

from sessionstream.core.errors import ContentKeyShredded, MovedCiphertext
from sessionstream.core.privacy import (
    DELETED_TEXT,
    UNAVAILABLE_TEXT,
    DataClass,
    KeyState,
    unit_class,
)
from sessionstream.core.rows import SEALED_PREFIX, SessionRow
from sessionstream.governance import ContentCipher
from sessionstream.governance.crypto import NONCE_BYTES

PREFIX = SEALED_PREFIX
ROW_MAGIC = b"sessionstream-row-v1"


def row_ad(tenant: str, session_id: str, field: str) -> bytes:
    out = bytearray(ROW_MAGIC)
    for text in (tenant, session_id, field):
        raw = text.encode("utf-8")
        out += struct.pack(">I", len(raw)) + raw
    return bytes(out)


def is_sealed(value: str) -> bool:
    return value.startswith(PREFIX)


class RowCipher:
    """Seals and opens the content-bearing fields of one tenant's session rows."""

    def __init__(self, cipher: ContentCipher) -> None:
        self.cipher = cipher
        self.tenant = cipher.tenant

    def row_key(self, session_id: str, cls: DataClass) -> bytes | None:
        """The data key the session's fields of ``cls`` are sealed with (created on first
        use), or None: they are stored clear (encryption off, or the key shredded)."""
        if not self.cipher.enabled:
            return None
        try:
            return self.cipher.store.data_key(self.tenant, session_id, cls)
        except ContentKeyShredded:
            return None  # folded from placeholders (see the module docstring)

    def seal(self, session_id: str, unit: str, field: str, text: str) -> str:
        cls = unit_class(unit)
        key = None if cls is None else self.row_key(session_id, cls)
        if key is None:
            return text
        assert self.cipher.aead is not None
        nonce, ct = self.cipher.aead.seal(key, text.encode("utf-8"),
                                          row_ad(self.tenant, session_id, field))
        return PREFIX + base64.b64encode(nonce + ct).decode()

    def open(self, session_id: str, unit: str, field: str, stored: str) -> str | None:
        """The clear text, or None when the key is shredded or missing (or tampered)."""
        if not is_sealed(stored):
            return stored
        cls = unit_class(unit)
        if cls is None:
            return None
        found = self.cipher.store.lookup(self.tenant, session_id, cls)
        if found.key is None:
            return None
        try:
            blob = base64.b64decode(stored[len(PREFIX):], validate=True)
            assert self.cipher.aead is not None
            return self.cipher.aead.open(found.key, blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                         row_ad(self.tenant, session_id, field)).decode()
        except (MovedCiphertext, binascii.Error, ValueError, UnicodeDecodeError):
            return None

    def view(self, session_id: str, unit: str, field: str, stored: str) -> Any:
        """A view as readers get it: opened, or a placeholder saying why not."""
        text = self.open(session_id, unit, field, stored)
        if text is not None:
            return json.loads(text)
        cls = unit_class(unit)
        state = (self.cipher.store.lookup(self.tenant, session_id, cls).state
                 if cls is not None else KeyState.MISSING)
        return {"unavailable": DELETED_TEXT if state is KeyState.SHREDDED else UNAVAILABLE_TEXT}


def open_fields(rows: RowCipher | None, session_id: str, fields: dict[str, str],
                view_prefix: str, state_prefix: str) -> dict[str, str]:
    """``fields`` of a row with every sealed view/state (and chunk, ADR 0013) replaced by
    its clear JSON text.

    Without a cipher (or without the key) a sealed view reads as a placeholder object
    (``{"unavailable": …}``), never as ciphertext; a sealed state is dropped. A chunked
    unit any of whose fields does not open loses its state, manifest and chunks, and its
    view reads as the placeholder.
    """
    out: dict[str, str] = {}
    broken: set[str] = set()
    placed: set[str] = set()  # units whose view is a placeholder already
    for name, value in fields.items():
        if not is_sealed(value):
            out[name] = value
            continue
        if name.startswith(SessionRow.PART):
            unit = SessionRow.part_unit(name)
            text = rows.open(session_id, unit, name, value) if rows is not None else None
            if text is None:
                broken.add(unit)
            else:
                out[name] = text
        elif name.startswith(view_prefix):
            unit = name[len(view_prefix):]
            text = rows.open(session_id, unit, name, value) if rows is not None else None
            if text is None:
                broken.add(unit)
                placed.add(unit)
                out[name] = _placeholder(rows, session_id, unit, name, value)
            else:
                out[name] = text
        elif name.startswith(state_prefix) and rows is not None:
            text = rows.open(session_id, name[len(state_prefix):], name, value)
            if text is not None:
                out[name] = text
    for unit in broken:
        if SessionRow.parts(unit) not in out:
            continue
        view = SessionRow.view(unit)
        for name in [n for n in out if n == SessionRow.parts(unit)
                     or n == SessionRow.state(unit)
                     or (n.startswith(SessionRow.PART) and SessionRow.part_unit(n) == unit)]:
            del out[name]
        if view in out and unit not in placed:
            out[view] = _placeholder(None, session_id, unit, view, fields[view])
    return out


def _placeholder(rows: RowCipher | None, session_id: str, unit: str, name: str,
                 value: str) -> str:
    obj = (rows.view(session_id, unit, name, value) if rows is not None and is_sealed(value)
           else {"unavailable": UNAVAILABLE_TEXT})
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
