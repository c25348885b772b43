"""The exceptions of long-term memory's pure core (docs/adr/0030-long-term-memory.md).

Every one derives from :class:`MemoryLogError`, itself a
:class:`~sessionstream.core.errors.SessionStreamError`, so a caller that catches the
product's root catches these too::

    SessionStreamError
    └── MemoryLogError
        ├── InvalidMemory        a record, operation or namespace that is not one (names the
        │                        JSON path and what is wrong there)
        ├── InvalidPolicy        an authorization policy that is not one (path and reason)
        ├── NamespaceMismatch    an operation handed to another namespace's fold (a routing bug)
        └── MemoryRefused        the policy refuses the actor this write or confirmation

The fold itself never raises for a well-formed operation that cannot apply (a confirmation
of a superseded version, a supersede of a forgotten memory): it records a
:class:`~sessionstream.core.memory.fold.Rejection` in the state, visible like the
admission rule's rejections, so every reader of the topic reaches the same state.
"""

from __future__ import annotations

from sessionstream.core.errors import SessionStreamError


class MemoryLogError(SessionStreamError):
    """Root of the errors of the memory log, its fold and its policy."""


class InvalidMemory(MemoryLogError):
    """Input that is not a valid memory record, operation or namespace."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"memory {path}: {reason}")


class InvalidPolicy(MemoryLogError):
    """An authorization policy (JSON) that cannot be used."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"memory policy {path}: {reason}")


class NamespaceMismatch(MemoryLogError):
    """An operation of one namespace folded into another namespace's state."""

    def __init__(self, expected: str, got: str, op_id: str) -> None:
        self.expected = expected
        self.got = got
        self.op_id = op_id
        super().__init__(
            f"operation {op_id!r} belongs to namespace {got!r}, not {expected!r}: each "
            "namespace is folded on its own (ops are keyed by namespace on the topic)")


class MemoryRefused(MemoryLogError):
    """The authorization policy refuses this actor this write (nothing was written)."""

    def __init__(self, actor: str, namespace: str, what: str, reason: str) -> None:
        self.actor = actor
        self.namespace = namespace
        self.what = what
        self.reason = reason
        super().__init__(f"{actor} may not {what} in memory namespace {namespace!r}: {reason}")
