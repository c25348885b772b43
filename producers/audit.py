"""The governance audit trail, written by a session writer (``AuditLog`` of governance).

:class:`WriterAuditLog` takes a session with :meth:`SessionWriter.open` (``steal``: the
live writer is fenced; ``repair=False``: governance appends its audit event and no
repair events), and records each audit event with one append and a flush (acknowledged
by the broker and admitted by every reader) before it returns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sessionstream.core.events import Event
from sessionstream.governance.audit import AuditedSession, SessionUnknown
from sessionstream.producers.errors import SessionNotFound
from sessionstream.producers.writer import SessionWriter, WriterConfig

#: Seconds an audit event may take to be acknowledged and proven admitted.
FLUSH_TIMEOUT_S = 30.0


class _WriterSession:
    def __init__(self, writer: SessionWriter, flush_timeout: float) -> None:
        self._writer = writer
        self._flush_timeout = flush_timeout

    @property
    def events(self) -> Sequence[Event]:
        return self._writer.session.events

    def record(self, event_type: str, data: Mapping[str, Any]) -> int:
        event = self._writer.append(event_type, dict(data))
        self._writer.flush(self._flush_timeout)
        return event.seq


class WriterAuditLog:
    """Audit events appended to the session's log by a writer of ``cfg``'s tenant."""

    def __init__(self, cfg: WriterConfig, *, flush_timeout: float = FLUSH_TIMEOUT_S) -> None:
        self.cfg = cfg
        self.flush_timeout = flush_timeout

    @contextmanager
    def session(self, session_id: str, *, principal: str) -> Iterator[AuditedSession]:
        try:
            writer = SessionWriter.open(self.cfg, session_id, steal=True, repair=False,
                                        writer_id=f"governance/{principal}")
        except SessionNotFound:
            raise SessionUnknown(session_id, self.cfg.topic) from None
        try:
            yield _WriterSession(writer, self.flush_timeout)
        finally:
            writer.close()
