"""The reader pipeline's content-opening stage, and a sealed attachment store.

:class:`SealedContentOpener` turns an admitted event whose content is sealed into the
event the projections fold: the content put back, or — for a class whose data key was
shredded or that this node lacks — the defined placeholders, never garbage and never an
exception. A part that fails authentication (tampered, moved from another event) is
refused: it raises, and the reader quarantines the session (or, in the writer's
read-back, records the record as corrupt). It also remembers, per session, what it
could not open (:attr:`SealedContentOpener.unopened`): the sources that are no longer
reconstructable (seq, class, when shredded), for explain, diagnose and the dashboard.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sessionstream.core.attachments import check_digest, write_atomically
from sessionstream.core.errors import (
    AttachmentError,
    CorruptRecord,
    MovedCiphertext,
    SealedContentError,
)
from sessionstream.core.events import Event
from sessionstream.core.pipeline import ContentUnavailable
from sessionstream.core.privacy import DataClass, Unopened
from sessionstream.governance import ContentCipher


class SealedContentOpener:
    """Opens sealed event content with one tenant's keys (``ContentOpener`` of the pipeline).

    Lineage (the ancestor a fork's seed came from and the seed length) is learnt from
    each session's ``session/start``, which is metadata; an inherited part is accepted
    only inside the seed. For a session whose start it has not seen, it relies on the
    associated data alone (it binds the ancestor's session, seq and event).
    """

    def __init__(self, cipher: ContentCipher, *, max_sessions: int = 100_000) -> None:
        self.cipher = cipher
        self._seeds: dict[str, int] = {}
        #: session id → the sealed parts it could not open (shredded or missing keys).
        self.unopened: dict[str, list[Unopened]] = {}
        #: (session id, seq) → (key session, origin event id) of inherited seed content.
        self.origins: dict[tuple[str, int], tuple[str, str]] = {}
        self._max = max_sessions

    def open(self, event: Event) -> Event:
        if event.type == "session/start":
            self._learn(event)
        if not event.sealed:
            return event
        try:
            opened = self.cipher.open(event, event.sealed, self._seeds.get(event.session_id))
        except SealedContentError as exc:  # moved or tampered: refused, never shown
            raise ContentUnavailable(str(exc)) from exc
        for part in event.sealed:
            if part.key_session != event.session_id:
                self.origins[(event.session_id, event.seq)] = (part.key_session,
                                                               part.origin_event_id)
                break
        if opened.unopened:
            if len(self.unopened) >= self._max:
                self.unopened.clear()
            known = self.unopened.setdefault(event.session_id, [])
            known[:] = [u for u in known if u.seq != event.seq] + list(opened.unopened)
        return event.replace(data=opened.data, sealed=())

    def _learn(self, event: Event) -> None:
        data = event.data
        lineage = data.get("lineage") if isinstance(data, Mapping) else None
        if len(self._seeds) >= self._max:
            self._seeds.clear()
        if isinstance(lineage, Mapping) and isinstance(lineage.get("seed_length"), int):
            # Any ancestor's content inside the seed is inherited (a fork of a fork
            # carries the grandparent's parts): the seed length bounds them all.
            self._seeds[event.session_id] = int(lineage["seed_length"])
        else:
            self._seeds[event.session_id] = 0
        self.unopened.pop(event.session_id, None)

    def decoder(self, decode: Callable[[Any], Event]) -> Callable[[Any], Event]:
        """``decode`` then open: for readers that only decode (the writer's read-back).

        A part that fails authentication makes the record a :class:`CorruptRecord`.
        """
        def decode_and_open(payload: Any) -> Event:
            event = decode(payload)
            try:
                return self.open(event)
            except ContentUnavailable as exc:
                raise CorruptRecord(
                    f"session {event.session_id!r} seq {event.seq}: {exc}") from exc
        return decode_and_open

    def seed_length(self, session_id: str) -> int | None:
        """The seed length learnt from the session's ``session/start`` (None: not seen)."""
        return self._seeds.get(session_id)

    def shredded(self, session_id: str) -> list[Unopened]:
        return list(self.unopened.get(session_id, ()))


ATTACHMENT_MAGIC = b"sessionstream-attachment-v1"


def attachment_ad(tenant: str, session_id: str, sha256: str) -> bytes:
    out = bytearray(ATTACHMENT_MAGIC)
    for text in (tenant, session_id, sha256):
        raw = text.encode("utf-8")
        out += struct.pack(">I", len(raw)) + raw
    return bytes(out)


class SealedAttachmentStore:
    """One session's attachments, encrypted with the session's ``raw`` data key.

    ``<root>/sealed/<tenant>/<sha256(session)>/<sha256(content)>``: nonce (12 bytes) +
    AES-256-GCM ciphertext, bound to tenant, session and the content digest. The event
    keeps the digest of the clear content as the reference (metadata). Deleting the
    session's raw class makes every blob unreadable; :meth:`purge` removes them.
    """

    def __init__(self, root: Path, cipher: ContentCipher, session_id: str) -> None:
        self.cipher = cipher
        self.session_id = session_id
        self.dir = Path(root) / "sealed" / cipher.tenant / hashlib.sha256(
            session_id.encode()).hexdigest()

    def _path(self, sha256: str) -> Path:
        return self.dir / check_digest(sha256)

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        key = self.cipher.store.data_key(self.cipher.tenant, self.session_id, DataClass.RAW)
        assert self.cipher.aead is not None
        nonce, ct = self.cipher.aead.seal(key, data, attachment_ad(
            self.cipher.tenant, self.session_id, digest))
        write_atomically(self._path(digest), nonce + ct)
        return digest

    def get(self, sha256: str) -> bytes:
        found = self.cipher.store.lookup(self.cipher.tenant, self.session_id, DataClass.RAW)
        if found.key is None:
            raise AttachmentError(
                f"attachment {sha256} of session {self.session_id!r} is unreadable: its raw "
                f"data key is {found.state.value}")
        try:
            blob = self._path(sha256).read_bytes()
        except OSError as exc:
            raise AttachmentError(f"attachment {sha256} is not in the store: {exc}") from exc
        assert self.cipher.aead is not None
        try:
            data = self.cipher.aead.open(found.key, blob[:12], blob[12:], attachment_ad(
                self.cipher.tenant, self.session_id, sha256))
        except MovedCiphertext as exc:
            raise AttachmentError(f"attachment {sha256} is corrupt: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != sha256:
            raise AttachmentError(f"attachment {sha256} is corrupt (digest mismatch)")
        return data

    def exists(self, sha256: str) -> bool:
        return self._path(sha256).exists()

    def purge(self) -> int:
        """Remove every attachment of the session; the number removed."""
        if not self.dir.is_dir():
            return 0
        count = sum(1 for p in self.dir.iterdir() if p.is_file())
        shutil.rmtree(self.dir)
        return count
