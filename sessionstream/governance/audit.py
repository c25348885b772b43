"""The audit trail governance writes to: a port the composition root wires.

Deletion and holds record what they did as events in the session's own log
(``session/shred``, ``session/hold``). Governance only needs to take a session from its
writer, read its events and append one audit event durably; :class:`AuditLog` is that
port, and the edge that writes sessions implements it
(``producers.audit.WriterAuditLog``, wired by ``sessionstream.cli.governance``), so
this package never imports the writers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sessionstream.core.errors import SessionStreamError
from sessionstream.core.events import Event
from sessionstream.core.settings import Env


class SessionUnknown(SessionStreamError):
    """The session is not known here (no admitted events in the tenant's log)."""

    def __init__(self, session_id: str, where: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} has no events in {where}: nothing to delete or hold "
            f"(check the id and {Env.TENANT})")


class AuditedSession(Protocol):
    """One session taken for governance: its writer is fenced while this is open."""

    @property
    def events(self) -> Sequence[Event]:
        """The session's admitted events, in order, as read when it was taken."""
        ...

    def record(self, event_type: str, data: Mapping[str, Any]) -> int:
        """Append one audit event and return once it is durable and admitted; its seq."""
        ...


class AuditLog(Protocol):
    def session(self, session_id: str, *,
                principal: str) -> AbstractContextManager[AuditedSession]:
        """Take ``session_id`` from its writer (a live writer's later writes are
        rejected as a zombie's) on behalf of ``principal``; released on exit.

        Raises :class:`SessionUnknown` if the session has no events.
        """
        ...
