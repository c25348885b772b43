"""Sealing and digests of the native fold's row writes, and the keys the extension opens with.

Content-bearing row fields are sealed in Redis as the codec seals them (ADR 0011): in the
extension with the governance row cipher (byte-compatible, the Python codec opens them),
else field by field through the codec's sealer. With ``keep_digests`` (replay) each
sealed field's digest is kept once its write applied, so replay's compare opens only the
live row (ADR 0015). :class:`WriteSealer` does it for
:class:`~sessionstream.streams.fold_native.NativeFolder`.

Sealed content in the log is opened in the extension when the pipeline's opener is the
governance one (:class:`~sessionstream.governance.opener.SealedContentOpener`): the key
store and the unwrapping stay here, the extension asks :func:`key_lookup` for each
(key session, class) and gets the unwrapped data key or "shredded" / "missing" (its
content then reads as the reference placeholders); it keeps an active or shredded key
across batches while the store's :func:`key_epoch` stays the same (a shred anywhere
changes it, within the store's shred-feed interval) and the store's own cache would
still answer it (a missing key is asked again each batch).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sessionstream.core.errors import ContentKeyShredded
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.privacy import DataClass, KeyState, unit_class
from sessionstream.core.rows import SEALED_PREFIX, SessionRow
from sessionstream.native import ext as _native  # absent: the Python fold
from sessionstream.streams.ports import SessionWrite

#: Sessions whose sealed fields' digests a replay keeps (``Folder.keep_digests``);
#: past it the compare opens both rows of the others (ADR 0015).
DIGEST_SESSIONS = 200_000
#: How a sealed row field value starts (sessionstream.governance.rows.PREFIX) and how
#: :func:`sealed_ref` starts.
SEALED_REF = SEALED_PREFIX + "sha1:"
_CLASSES = {c.value: c for c in DataClass}


class WriteSealer:
    """Seals a session write's content-bearing fields in place, with the codec's row
    sealer ``rows`` (None: rows are stored clear), and keeps their digests for replay."""

    def __init__(self, rows: Any, unit_keys: Iterable[str]) -> None:
        keys = list(unit_keys)
        self._rows = rows
        #: The governance row cipher, when the codec seals with it: the extension seals.
        self.row_cipher = _row_cipher_of(rows)
        self._unit_classes = {k: None if (c := unit_class(k)) is None else c.value
                              for k in keys}
        #: the classes a row's sealed fields need keys of (asked ahead for new sessions)
        self._row_classes = sorted({c for k in keys if (c := unit_class(k)) is not None},
                                   key=lambda c: c.value)
        #: With ``keep_digests`` (replay): per session, per sealed field written by this
        #: fold, (:func:`sealed_ref` of the value stored, the digest of its clear text).
        self.keep_digests = False
        self.digests: dict[str, dict[str, tuple[str, bytes]]] = {}
        #: the digests of writes not yet applied, per session (``digested`` keeps them)
        self.pending: dict[str, dict[str, tuple[str, bytes]]] = {}
        #: per session, its row keys by class value, until when (the store's clock) and
        #: from which store generation they may be used without asking it again
        self.keys: dict[str, tuple[dict[str, bytes | None], float, int]] = {}

    def prefetch_keys(self, sids: list[str]) -> None:
        """Look up (or create) the row keys of ``sids`` into the key store's cache, in
        one batch (the same keys the seal asks for, only earlier; a shred reaches that
        cache as it reaches any). An error is left to the seal, which asks again."""
        if self.row_cipher is not None:
            self.row_cipher.cipher.prefetch_keys(sids, self._row_classes)

    def sealed(self, w: SessionWrite) -> SessionWrite:
        """``w`` with its content-bearing fields sealed in place (and, with
        ``keep_digests``, their digests noted until the write applies)."""
        fields = w.fields
        assert isinstance(fields, dict)
        if self.keep_digests and self.row_cipher is not None:
            # sealed and hashed in the extension, without the GIL (ADR 0015)
            assert _native is not None  # a row cipher is kept only with the extension
            got = self._seal_native(w.session_id, fields, _native.seal_row_digested)
            if w.session_id in self.digests or len(self.digests) < DIGEST_SESSIONS:
                self.pending[w.session_id] = {name: (SEALED_REF + sha, digest)
                                              for name, sha, digest in got}
        elif self.keep_digests:
            clear = dict(fields)
            self.seal(w.session_id, fields)
            self._digest(w.session_id, clear, fields)
        else:
            self.seal(w.session_id, fields)
        return w

    def _digest(self, sid: str, clear: Mapping[str, str], sealed: Mapping[str, str]) -> None:
        """Note the digests of the fields the seal changed (replay's compare)."""
        if sid not in self.digests and len(self.digests) >= DIGEST_SESSIONS:
            return
        self.pending[sid] = {name: (sealed_ref(value), field_digest(clear[name]))
                             for name, value in sealed.items() if value is not clear[name]
                             and value.startswith(SEALED_PREFIX)}

    def digested(self, w: SessionWrite) -> None:
        """``w`` applied: its sealed fields' digests are the row's now."""
        sealing = self.pending.pop(w.session_id, None)
        if sealing is None:
            return
        kept = self.digests.setdefault(w.session_id, {})
        for name in (*w.fields, *w.deletes):
            kept.pop(name, None)
        kept.update(sealing)

    def refused(self, sid: str) -> None:
        """A write of ``sid`` did not apply: its digests are unknown (rewritten whole)."""
        self.digests.pop(sid, None)
        self.pending.pop(sid, None)

    def _seal_native(self, sid: str, fields: dict[str, str], seal: Any) -> Any:
        """``fields`` sealed in place by the extension with the governance row cipher
        (``seal``: ``seal_row`` or ``seal_row_digested``); what ``seal`` returns."""
        return seal(self.row_cipher.tenant, sid, fields, self._unit_classes,
                    self._keys_of(sid))

    def _keys_of(self, sid: str) -> Callable[[str], bytes | None]:
        """The session's row keys by class value, as a dict's ``get`` (the extension
        asks it per class without a Python frame), kept while the key store would give
        the same answers (``KeyStore.data_key_until``: a shred reaches them when it
        reaches the store; a store without that answer is asked per write)."""
        cipher = self.row_cipher
        store = cipher.cipher.store
        hit = self.keys.get(sid)
        if hit is not None and hit[2] == store.generation and store.monotonic() < hit[1]:
            return hit[0].get
        generation = store.generation
        until = getattr(store, "data_key_until", None)
        keys: dict[str, bytes | None] = {}
        good = math.inf
        for cls in self._row_classes:
            if not cipher.cipher.enabled:
                keys[cls.value] = None  # rows stored clear
            elif until is None:
                keys[cls.value] = cipher.row_key(sid, cls)
                good = -math.inf  # no freshness answer: asked again at the next write
            else:
                try:
                    keys[cls.value], fresh = until(cipher.tenant, sid, cls)
                except ContentKeyShredded:  # stored clear (governance.rows); asked again
                    keys[cls.value], fresh = None, -math.inf
                good = min(good, fresh)
        if good > -math.inf:
            self.keys[sid] = (keys, good, generation)
        return keys.get

    def seal(self, sid: str, fields: dict[str, str]) -> None:
        """Content-bearing fields are sealed in Redis, as the codec does: in the
        extension with the governance row cipher (byte-compatible, the Python codec
        opens them), else field by field through the codec's sealer."""
        rows = self._rows
        if rows is None:
            return
        if self.row_cipher is not None:
            assert _native is not None
            self._seal_native(sid, fields, _native.seal_row)
            return
        for name in list(fields):
            ukey = unit_of(name)
            if ukey is not None:
                fields[name] = rows.seal(sid, ukey, name, fields[name])


def field_digest(text: str) -> bytes:
    """The digest a replay keeps of a field's clear text (BLAKE2b, 128 bits)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def sealed_ref(value: str) -> str:
    """A sealed value as replay's compare script hands it back instead of the value:
    the prefix, ``sha1:`` and the SHA-1 of the whole stored value (binds a kept digest
    to exactly that value)."""
    return SEALED_REF + hashlib.sha1(value.encode("utf-8")).hexdigest()


def unit_of(field: str) -> str | None:
    """The unit owning a view, state or chunk field (the codec's sealing rule)."""
    if field.startswith(SessionRow.PART):
        return SessionRow.part_unit(field)
    for prefix in (SessionRow.VIEW, SessionRow.STATE):
        if field.startswith(prefix):
            return field[len(prefix):]
    return None


def opener_args(opener: Any) -> tuple[Any, ...] | None:
    """What ``Folder.set_opener`` takes for the pipeline's ``opener`` (tenant, key
    lookup, placeholder, key epoch), or None: no governance opener, and the extension
    hands sealed sessions back."""
    cipher = _cipher_of(opener)
    if cipher is None:
        return None
    return cipher.tenant, key_lookup(cipher), _placeholder(cipher), key_epoch(cipher)


def _cipher_of(opener: Any) -> Any:
    """The governance opener's cipher (None: no opener, or another kind of opener,
    whose sealed sessions the extension hands back)."""
    try:
        from sessionstream.governance.opener import SealedContentOpener
    except ImportError:  # pragma: no cover - the governance extra is part of the install
        return None
    return opener.cipher if isinstance(opener, SealedContentOpener) else None


def _row_cipher_of(rows: Any) -> Any:
    """The codec's sealer when it is the governance row cipher (whose format the
    extension writes), else None."""
    if rows is None or _native is None:
        return None
    try:
        from sessionstream.governance.rows import RowCipher
    except ImportError:  # pragma: no cover - the governance extra is part of the install
        return None
    return rows if type(rows) is RowCipher else None


def key_lookup(cipher: Any) -> Any:
    """What the extension asks per (key session, class): (state, unwrapped key), and
    until when it may keep the answer (with :func:`key_epoch`), when the store says."""
    store, tenant = cipher.store, cipher.tenant
    classes = {c.value: c for c in DataClass}
    until = getattr(store, "lookup_until", None)

    def lookup(key_session: str, data_class: str) -> tuple[Any, ...]:
        cls = classes.get(data_class) or DataClass(data_class)
        if until is None:
            found, at = store.lookup(tenant, key_session, cls), None
        else:
            found, at = until(tenant, key_session, cls)
        if found.state is KeyState.ACTIVE and found.key is not None:
            return "active", bytes(found.key), at
        return found.state.value, None, at
    return lookup


def key_epoch(cipher: Any) -> Any:
    """The store's (epoch, now) the extension checks its kept keys against at each batch
    (None: a store without one; keys are then asked again each batch)."""
    epoch = getattr(cipher.store, "cache_epoch", None)
    if epoch is None:
        return None
    tenant = cipher.tenant

    def current() -> tuple[int, float]:
        e, now = epoch(tenant)
        return int(e), float(now)
    return current


def _placeholder(cipher: Any) -> Any:
    """The reference placeholder at a path, as canonical JSON text."""
    from sessionstream.core.privacy import placeholder_at

    def placeholder(type_name: str, path: str, text: str) -> str:
        return canonical_dumps(placeholder_at(type_name, path, text, cipher.catalog))
    return placeholder


__all__ = ["DIGEST_SESSIONS", "SEALED_REF", "WriteSealer", "field_digest", "key_epoch",
           "key_lookup", "opener_args", "sealed_ref", "unit_of"]
