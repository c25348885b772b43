"""Forgetting that follows lineage: what deleting a session does to memory (pure).

Each memory version cites the sessions it was derived from. When a session is deleted
(``sessionstream delete``), :func:`forget_plan` says, from the namespace's state alone:

- **forgotten**: the versions whose every source was that session — their content (and
  the digest derived from it) goes, history included: a superseded version derived only
  from the session is forgotten as well, so its text survives in no history;
- **narrowed**: the versions other sessions also support — they keep their content and
  lose the deleted session from their provenance (its seqs are no longer cited anywhere).

Versions with no session sources (an explicit memory an operator or API caller wrote
outside any session) are not touched: nothing of the session is in them. A memory whose
current version is forgotten is forgotten as a whole; an older version is never brought
back in its place (it may be the very statement the deleted session corrected).

The fold applies the same plan when it meets the deletion's ``forget`` operation
(:class:`~sessionstream.core.memory.model.Forget` with ``source_session``), so the plan a
deletion reports is the change every reader makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.core.memory.model import Ref


@dataclass(frozen=True, slots=True)
class ForgetPlan:
    """What deleting ``session_id`` does to one namespace."""

    session_id: str
    forgotten: tuple[Ref, ...]  # versions whose content goes
    narrowed: tuple[Ref, ...]  # versions that lose the session from their sources
    memories: tuple[str, ...]  # memories whose current version is forgotten

    @property
    def empty(self) -> bool:
        return not self.forgotten and not self.narrowed

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id,
                "forgotten": [str(r) for r in self.forgotten],
                "narrowed": [str(r) for r in self.narrowed],
                "memories_forgotten": list(self.memories)}


def forget_plan(state: Any, session_id: str) -> ForgetPlan:
    """The plan for deleting ``session_id`` from ``state`` (a
    :class:`~sessionstream.core.memory.fold.MemoryState`)."""
    forgotten: list[Ref] = []
    narrowed: list[Ref] = []
    memories: list[str] = []
    for memory_id, memory in sorted(state.memories.items()):
        for v in memory.versions:
            if v.forgotten is not None or not any(s.session_id == session_id
                                                  for s in v.sources):
                continue
            if all(s.session_id == session_id for s in v.sources):
                forgotten.append(v.ref)
                if v.ref == memory.current.ref:
                    memories.append(memory_id)
            else:
                narrowed.append(v.ref)
    return ForgetPlan(session_id, tuple(forgotten), tuple(narrowed), tuple(memories))
