"""Content-addressed attachment store: large tool results live here, not in the log.

A tool result whose content exceeds the threshold (default 256 KiB) is spilled: the
bytes go to the store under their sha256, and the event carries ``attachment``
{sha256, size, media_type, head, tail} instead of the content, so the log stays small
and the model surface can show head/tail without loading the blob.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from sessionstream.core.attachments import check_digest, write_atomically
from sessionstream.core.errors import AttachmentError

DEFAULT_SPILL_THRESHOLD = 256 * 1024
#: Characters of the content kept in the event as head and tail.
PREVIEW_CHARS = 2048


class AttachmentStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store ``data``; returns its sha256 hex digest (idempotent)."""
        ...

    def get(self, sha256: str) -> bytes: ...

    def exists(self, sha256: str) -> bool: ...


class LocalAttachmentStore:
    """Blobs in a local directory: ``<root>/ab/cd/<sha256>``, written atomically."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        check_digest(sha256)
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path(digest)
        if target.exists():
            return digest
        write_atomically(target, data)
        return digest

    def get(self, sha256: str) -> bytes:
        try:
            data = self.path(sha256).read_bytes()
        except OSError as exc:
            raise AttachmentError(f"attachment {sha256} is not in the store: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != sha256:
            raise AttachmentError(f"attachment {sha256} is corrupt (digest mismatch)")
        return data

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).exists()


def content_bytes(content: Any) -> tuple[bytes, str, str]:
    """The bytes, media type and text form of a tool result's content."""
    if isinstance(content, str):
        return content.encode(), "text/plain; charset=utf-8", content
    text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text.encode(), "application/json", text


def spill_tool_result(
    data: Mapping[str, Any],
    store: AttachmentStore,
    threshold: int = DEFAULT_SPILL_THRESHOLD,
) -> dict[str, Any] | None:
    """The data with ``content`` replaced by an ``attachment``, or None if small enough."""
    content = data.get("content")
    if content is None or "attachment" in data:
        return None
    raw, media_type, text = content_bytes(content)
    if len(raw) <= threshold:
        return None
    digest = store.put(raw)
    out = {k: v for k, v in data.items() if k != "content"}
    out["attachment"] = {
        "sha256": digest,
        "size": len(raw),
        "media_type": media_type,
        "head": text[:PREVIEW_CHARS],
        "tail": text[-PREVIEW_CHARS:] if len(text) > PREVIEW_CHARS else "",
    }
    return out
