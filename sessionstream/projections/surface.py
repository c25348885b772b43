"""The current model-visible messages, with a token estimate, for readers of Redis.

Folds the surface rules of the architecture contract: user messages, context
snapshots, assistant messages (with their tool calls) and tool results are appended;
a ``user/message`` with ``surface_op=replace`` takes the place of the nodes it
shadows; a turn that ends failed/cancelled/interrupted drops its unanswered tool
calls, because a call without a result is never handed to a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.events import Event, SurfaceOp
from sessionstream.jsonvalue import JsonValue, canonical_dumps, freeze
from sessionstream.messages import Kind, Message, Role, ToolCall
from sessionstream.projections.base import ProjectionUnit
from sessionstream.projections.vec import Vec

#: Rough characters per token for the estimate; providers differ, dashboards only
#: need the order of magnitude and its trend.
CHARS_PER_TOKEN = 4
#: Fixed per-message overhead (role markers, separators) in tokens.
MESSAGE_OVERHEAD = 4


def message_tokens(message: Message) -> int:
    """Estimated tokens of one message: content, tool calls, plus a fixed overhead."""
    content = message.content
    size = len(content) if isinstance(content, str) else len(canonical_dumps(content))
    for call in message.tool_calls:
        size += len(call.name) + len(canonical_dumps(call.arguments))
    return MESSAGE_OVERHEAD + (size + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _tool_result_content(data: Any) -> JsonValue:
    content = data.get("content")
    attachment = data.get("attachment")
    if attachment is not None:  # spilled: the model sees head, tail and a reference
        return freeze({
            "attachment": attachment["sha256"],
            "size": attachment["size"],
            "head": attachment["head"],
            "tail": attachment["tail"],
        })
    return content


def message_of(event: Event) -> Message | None:
    """The surface message an event contributes, or None."""
    t = event.type
    data = event.data
    if t == "user/message":
        kind = Kind.SUMMARY if event.surface_op is SurfaceOp.REPLACE else Kind.USER
        return Message(Role.USER, kind, data["content"], (event.seq,))
    if t == "context/snapshot":
        return Message(Role.USER, Kind.CONTEXT, data["content"], (event.seq,))
    if t == "assistant/message":
        calls = tuple(
            ToolCall(c["call_id"], c["name"], c["arguments"]) for c in data.get("tool_calls") or ()
        )
        return Message(Role.ASSISTANT, Kind.ASSISTANT, data["content"], (event.seq,), calls)
    if t == "tool/result":
        return Message(
            Role.TOOL, Kind.TOOL_RESULT, _tool_result_content(data), (event.seq,),
            call_id=data["call_id"], status=data["status"],
        )
    return None


def message_from_json(data: Any) -> Message:
    return Message(
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


@dataclass(frozen=True, slots=True)
class SurfaceState:
    messages: Vec[Message]
    tokens: int  # token estimate of ``messages``, kept incrementally
    unanswered: frozenset[str]  # call ids of assistant tool calls with no result yet


def pending_calls(messages: Any) -> list[tuple[str, int]]:
    """(call_id, seq) of assistant tool calls on a surface with no tool result after them."""
    answered = {m.call_id for m in messages if m.kind is Kind.TOOL_RESULT}
    return [
        (c.call_id, m.seqs[0])
        for m in messages
        for c in m.tool_calls
        if c.call_id not in answered
    ]


def _tokens(messages: Any) -> int:
    return sum(message_tokens(m) for m in messages)


class SurfaceUnit(ProjectionUnit[SurfaceState]):
    key = "surface"
    state_version = 1
    types = frozenset(
        {"user/message", "context/snapshot", "assistant/message", "tool/result", "turn/end"}
    )

    def init(self) -> SurfaceState:
        return SurfaceState(Vec(), 0, frozenset())

    def apply(self, state: SurfaceState, event: Event) -> SurfaceState:
        if event.type == "turn/end":
            if not state.unanswered or event.data["reason"] in ("completed", "refused"):
                return state
            return self._drop_unanswered(state)
        message = message_of(event)
        if message is None:
            return state
        if event.surface_op is SurfaceOp.REPLACE:
            return self._replace(state, message, frozenset(event.source_event_seqs))
        unanswered = state.unanswered
        if message.tool_calls:
            unanswered = unanswered | {c.call_id for c in message.tool_calls}
        elif message.call_id is not None and message.call_id in unanswered:
            unanswered = unanswered - {message.call_id}
        return SurfaceState(
            state.messages.append(message), state.tokens + message_tokens(message), unanswered
        )

    @staticmethod
    def _replace(state: SurfaceState, summary: Message, shadowed: frozenset[int]) -> SurfaceState:
        """The summary takes the place of the shadowed run of nodes (a contiguous run
        by the session invariants; anything else falls back to a full filter)."""
        items = state.messages.to_list()
        at = next((i for i, m in enumerate(items) if m.seqs[0] in shadowed), None)
        if at is None:  # nothing to shadow: the summary still enters the surface
            kept, removed = [*items, summary], []
        else:
            end = at
            while end < len(items) and items[end].seqs[0] in shadowed:
                end += 1
            removed = items[at:end]
            rest = items[end:]
            if len(removed) < len(shadowed) and any(m.seqs[0] in shadowed for m in rest):
                removed += [m for m in rest if m.seqs[0] in shadowed]
                rest = [m for m in rest if m.seqs[0] not in shadowed]
            kept = [*items[:at], summary, *rest]
        gone = {c.call_id for m in removed for c in m.tool_calls}
        tokens = state.tokens - _tokens(removed) + message_tokens(summary)
        return SurfaceState(Vec(kept), tokens, state.unanswered - gone)

    @staticmethod
    def _drop_unanswered(state: SurfaceState) -> SurfaceState:
        """Remove the ending turn's unanswered calls; they are near the end of the surface."""
        items = state.messages.to_list()
        left = set(state.unanswered)
        tokens = state.tokens
        i = len(items)
        while left and i > 0:
            i -= 1
            m = items[i]
            hit = [c for c in m.tool_calls if c.call_id in left]
            if not hit:
                continue
            left -= {c.call_id for c in hit}
            tokens -= message_tokens(m)
            calls = tuple(c for c in m.tool_calls if c.call_id not in state.unanswered)
            if not calls and not m.content:
                del items[i]
                continue
            m = Message(m.role, m.kind, m.content, m.seqs, calls, m.call_id, m.status)
            items[i] = m
            tokens += message_tokens(m)
        return SurfaceState(Vec(items), tokens, frozenset())

    def view(self, state: SurfaceState) -> JsonValue:
        return {
            "messages": [m.to_json() for m in state.messages],
            "count": len(state.messages),
            "token_estimate": state.tokens,
        }

    def dump(self, state: SurfaceState) -> JsonValue:
        return {"messages": [m.to_json() for m in state.messages]}

    def load(self, data: JsonValue) -> SurfaceState:
        messages = [message_from_json(m) for m in data["messages"]]
        unanswered = frozenset(cid for cid, _seq in pending_calls(messages))
        return SurfaceState(Vec(messages), _tokens(messages), unanswered)


__all__ = ["SurfaceState", "SurfaceUnit", "message_of", "pending_calls"]
