"""The current model-visible messages, with a token estimate, for readers of Redis.

The unit holds the core :class:`~sessionstream.core.surface.Surface` and drives it event
by event with :meth:`Surface.apply`, so its view is exactly what
``Session.derive_messages()`` returns (same nodes, same seqs, same replace and
abandon rules, same :func:`~sessionstream.core.surface.message_tokens` estimate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.messages import Message
from sessionstream.core.projections.base import Collection, ProjectionUnit
from sessionstream.core.surface import Messages, Surface, message_tokens, token_estimate


@dataclass(frozen=True, slots=True)
class SurfaceState:
    """One version of the surface: an immutable ``messages`` view plus its token total.

    ``surface`` is the mutable surface that produced it, shared with later versions;
    it is only reused while ``surface.revision == revision`` (this is its newest
    version), like :class:`~sessionstream.core.projections.vec.Vec` — folding on from an
    older version rebuilds a surface from ``messages`` first.
    """

    messages: Messages
    tokens: int
    surface: Surface
    revision: int

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SurfaceState):
            return NotImplemented
        return self.tokens == other.tokens and self.messages == other.messages

    def __hash__(self) -> int:
        return hash((self.tokens, self.messages))


def _state(surface: Surface, tokens: int) -> SurfaceState:
    return SurfaceState(surface.messages(), tokens, surface, surface.revision)


class SurfaceUnit(ProjectionUnit[SurfaceState]):
    key = "surface"
    state_version = 2  # 2: the core surface rules, seqs of abandoning turn/ends, core tokens
    types = frozenset(
        {"user/message", "context/snapshot", "memory/recall", "assistant/message",
         "tool/result", "turn/end"}
    )

    def init(self) -> SurfaceState:
        return _state(Surface(), 0)

    def apply(self, state: SurfaceState, event: Event) -> SurfaceState:
        surface = state.surface
        if surface.revision != state.revision:  # a later version moved on: branch off
            surface = Surface.from_messages(state.messages)
        change = surface.apply(event)
        if change is None:
            return state
        tokens = state.tokens - token_estimate(change.removed) + token_estimate(change.added)
        return _state(surface, tokens)

    def view(self, state: SurfaceState) -> JsonValue:
        return {
            "messages": state.messages.to_json(),
            "count": len(state.messages),
            "token_estimate": state.tokens,
        }

    def dump(self, state: SurfaceState) -> JsonValue:
        return {"messages": state.messages.to_json()}

    def encode(self, state: SurfaceState) -> tuple[str, str]:
        # The message list is most of both texts and grows with the session: join the
        # messages' cached texts once and wrap it twice (canonical: keys sorted).
        messages = ",".join([m.json_text() for m in state.messages])
        view = (f'{{"count":{len(state.messages)},"messages":[{messages}],'
                f'"token_estimate":{state.tokens}}}')
        return view, f'{{"messages":[{messages}]}}'

    # -- chunked storage (ADR 0013): the messages, once, for both view and state --------
    collections = (Collection("messages", "messages", "messages"),)

    def heads(self, state: SurfaceState) -> tuple[str, str]:
        return (f'{{"count":{len(state.messages)},"token_estimate":{state.tokens}}}', "{}")

    def length(self, state: SurfaceState, name: str) -> int:
        return len(state.messages)

    def items(self, state: SurfaceState, name: str, start: int, stop: int) -> Sequence[str]:
        return [m.json_text() for m in state.messages[start:stop]]

    def unchanged(self, base: SurfaceState, new: SurfaceState, name: str) -> int:
        if base.surface is not new.surface or base.revision > new.revision:
            return 0  # folded on a branch (or loaded): compare nothing, rewrite all
        return new.surface.unchanged_since(base.revision, len(base.messages))

    def load(self, data: Any) -> SurfaceState:
        messages = [Message.from_json(m) for m in data["messages"]]
        return _state(Surface.from_messages(messages), sum(map(message_tokens, messages)))


__all__ = ["SurfaceState", "SurfaceUnit"]
