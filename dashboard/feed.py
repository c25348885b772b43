"""Server-Sent Events framing and cursors over the tenant's Redis change feed.

An SSE event id is ``<generation>-<stream entry id>`` (e.g. ``1-1767225600000-0``): the
browser sends it back as ``Last-Event-ID`` when it reconnects, and the server resumes
the XREAD right after that entry, so nothing the capped stream still holds is missed.
A cursor from another generation (replay switched readers) or one older than what the
stream still holds cannot be resumed: the client is told to ``reset`` (re-read everything).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_STREAM_ID_RE = re.compile(r"^\d+-\d+$")


@dataclass(frozen=True)
class Cursor:
    """A position in one generation's change feed."""

    generation: int
    entry_id: str  # a Redis stream id, "<ms>-<n>"; "0-0" = before the first entry

    def event_id(self) -> str:
        return f"{self.generation}-{self.entry_id}"


def parse_event_id(text: str | None) -> Cursor | None:
    """The cursor a ``Last-Event-ID`` header names, or None if absent or malformed."""
    if not text:
        return None
    gen, sep, entry = text.strip().partition("-")
    if not sep or not gen.isdigit() or not _STREAM_ID_RE.match(entry):
        return None
    return Cursor(int(gen), entry)


def stream_id_key(entry_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair (Redis orders ids by ms, then sequence)."""
    ms, _, n = entry_id.partition("-")
    return int(ms), int(n or 0)


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    """One SSE message. ``data`` is JSON on one line (json.dumps never emits newlines)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), sort_keys=True))
    return ("\n".join(lines) + "\n\n").encode()


def comment(text: str) -> bytes:
    """An SSE comment line: ignored by the browser, keeps the connection (and proxies) alive."""
    return f": {text}\n\n".encode()
