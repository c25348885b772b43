"""What both attachment stores share: the digest check and the all-or-nothing write.

The plain store (``producers.attachments.LocalAttachmentStore``) and the sealed one
(``sessionstream.governance.opener.SealedAttachmentStore``) name blobs by the sha256
of their clear content and write them so a reader sees a whole blob or none. Standard
library only (files, no network).
"""

from __future__ import annotations

from pathlib import Path

from sessionstream.core import files
from sessionstream.core.errors import AttachmentError
from sessionstream.core.settings import Env

_HEX = frozenset("0123456789abcdef")


def check_digest(sha256: str) -> str:
    """``sha256`` if it is a lowercase sha256 hex digest, else :class:`AttachmentError`."""
    if len(sha256) != 64 or not _HEX.issuperset(sha256):
        raise AttachmentError(f"{sha256!r} is not a sha256 hex digest")
    return sha256


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so readers see all of it or nothing."""
    try:
        files.write_atomically(target, data)
    except OSError as exc:
        raise AttachmentError(
            f"cannot write attachment {target.name} under the attachment directory: {exc}; "
            f"check {Env.ATTACHMENT_DIR} exists and is writable"
        ) from exc
