"""What both attachment stores share: the digest check and the all-or-nothing write.

The plain store (``producers.attachments.LocalAttachmentStore``) and the sealed one
(``sessionstream.governance.opener.SealedAttachmentStore``) name blobs by the sha256
of their clear content and write them so a reader sees a whole blob or none. Standard
library only (files, no network).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise AttachmentError(
            f"cannot write attachment {target.name} under the attachment directory: {exc}; "
            f"check {Env.ATTACHMENT_DIR} exists and is writable"
        ) from exc
