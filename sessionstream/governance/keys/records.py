"""What the key stores report: a shredded key, a legal hold, a retirement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.core.privacy import DataClass


@dataclass(frozen=True)
class Shredded:
    """One destroyed data key: which, when, by whom, why."""

    tenant: str
    session_id: str
    data_class: DataClass
    at: int
    principal: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "session_id": self.session_id,
                "data_class": self.data_class.value, "at": self.at,
                "principal": self.principal, "reason": self.reason}


@dataclass(frozen=True)
class Hold:
    """A legal hold: on a session, or on the whole tenant (``session_id`` None)."""

    tenant: str
    session_id: str | None
    reason: str
    principal: str
    at: int

    @property
    def scope(self) -> str:
        return (f"session {self.session_id!r}" if self.session_id else "tenant") + \
            f" of tenant {self.tenant!r}"

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "session_id": self.session_id, "reason": self.reason,
                "principal": self.principal, "at": self.at}


@dataclass(frozen=True)
class Retirement:
    """What ``keys retire`` did for a tenant (see :meth:`KeyStore.retire`)."""

    tenant: str
    version: int  # the current tenant key version after it
    rewrapped: int  # live data keys rewrapped with it
    destroyed: list[int]  # tenant key versions destroyed
    shred_mark: int  # the highest version that ever wrapped a destroyed key
    pending: list[int]  # versions still held that did: not complete while non-empty
    rotated: bool  # a new version was made for it

    @property
    def complete(self) -> bool:
        return not self.pending

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "version": self.version, "rewrapped": self.rewrapped,
                "destroyed": self.destroyed, "shred_mark": self.shred_mark,
                "pending": self.pending, "rotated": self.rotated, "complete": self.complete}

