"""Model messages: the frozen values ``derive_messages()`` returns.

A message always carries the seqs of the events it came from, so every part of a
model request can be traced back to the log (seed §4.6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, freeze, thaw


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class Kind(StrEnum):
    """What produced the message; the surface keeps the distinction for explain()."""

    USER = "user"  # user/message, surface_op=append
    SUMMARY = "summary"  # user/message, surface_op=replace (a compaction summary)
    CONTEXT = "context"  # context/snapshot, a user-role message
    ASSISTANT = "assistant"  # assistant/message
    TOOL_RESULT = "tool_result"  # tool/result


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: JsonValue


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    kind: Kind
    content: JsonValue
    seqs: tuple[int, ...]  # the events this message was derived from
    tool_calls: tuple[ToolCall, ...] = ()  # assistant messages only
    call_id: str | None = None  # tool results only
    status: str | None = None  # tool results only: ok | error
    # canonical_dumps(to_json()), computed on first use: the surface view and the token
    # estimate need it for every message on every write; a message never changes.
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    def json_text(self) -> str:
        """Canonical JSON text of :meth:`to_json` (cached on the message)."""
        text = self._text
        if text is None:
            text = canonical_dumps(self.to_json())
            object.__setattr__(self, "_text", text)
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "role": self.role.value,
            "kind": self.kind.value,
            "content": thaw(self.content),
            "seqs": list(self.seqs),
        }
        if self.tool_calls:
            out["tool_calls"] = [
                {"call_id": c.call_id, "name": c.name, "arguments": thaw(c.arguments)}
                for c in self.tool_calls
            ]
        if self.call_id is not None:
            out["call_id"] = self.call_id
            out["status"] = self.status
        return out

    @classmethod
    def from_json(cls, data: Any) -> Message:
        """The message :meth:`to_json` described (projection states are kept this way)."""
        return cls(
            Role(data["role"]),
            Kind(data["kind"]),
            freeze(data["content"]),
            tuple(data["seqs"]),
            tuple(
                ToolCall(c["call_id"], c["name"], freeze(c["arguments"]))
                for c in data.get("tool_calls", ())
            ),
            data.get("call_id"),
            data.get("status"),
        )
