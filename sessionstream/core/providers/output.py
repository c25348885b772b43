"""The neutral form of one model response, whatever API produced it.

A :class:`ModelOutput` is what the response parsers of the APIs return, from a
whole response body or from a stream of deltas, and what
:mod:`sessionstream.core.recorder` turns into events. Tool calls whose arguments are
not a complete JSON object — the output was cut at max_tokens, or the model wrote
something that does not parse — are *withheld*: kept for audit on the assistant
message, never declared as calls the harness could run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.providers.errors import ProviderResponseError
from sessionstream.core.providers.fields import kind_of

#: Neutral stop reasons (the provider's own value is kept as provider_stop_reason).
STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal",
                "content_filter", "pause_turn", "other")

#: Provider stop reasons that mean the model made a tool call the provider could not
#: return (Gemini: MALFORMED_FUNCTION_CALL and its kin): the answer carries no call, so
#: the harness ends the turn ``failed`` instead of ``completed`` with whatever text came.
LOST_CALL_STOPS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL",
                             "TOO_MANY_TOOL_CALLS"})


@dataclass(frozen=True)
class OutputCall:
    call_id: str
    name: str
    arguments: JsonValue  # a JSON object


@dataclass(frozen=True)
class WithheldCall:
    """A tool call that is not recorded as one: cut at max_tokens, or unparseable."""

    call_id: str
    name: str
    arguments_text: str
    reason: str  # "truncated" | "invalid-arguments"

    def to_json(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name,
                "arguments_text": self.arguments_text, "reason": self.reason}


@dataclass(frozen=True)
class ModelOutput:
    api: str
    model: str | None
    response_id: str | None
    text: str
    tool_calls: tuple[OutputCall, ...]
    stop_reason: str
    provider_stop_reason: str | None
    usage: Mapping[str, int] | None
    refusal: str | None = None
    withheld: tuple[WithheldCall, ...] = ()
    chunks: tuple[str, ...] = field(default=(), compare=False)  # streamed text deltas
    #: output parts the log has no field for (built-in tool calls, unknown blocks),
    #: counted by kind so the message says they existed
    omitted: tuple[tuple[str, int], ...] = ()
    #: the model's reasoning as the API returned it (thinking blocks with signatures,
    #: redacted thinking, reasoning items), each with its ``api``: recorded as content
    #: of class ``reasoning`` and replayed only to that API
    reasoning: tuple[Mapping[str, Any], ...] = ()
    #: the text of each text block (part) when there are several: kept apart, so the
    #: assistant turn goes back to its API block for block
    text_parts: tuple[str, ...] = ()
    #: the kinds of the answer's blocks in the order received, when it is not the usual
    #: one (:func:`block_order`): interleaved thinking, text after a call
    blocks: tuple[str, ...] = ()

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "max_tokens"

    @property
    def lost_call(self) -> bool:
        """The model called a tool but the provider returned no usable call."""
        return not self.tool_calls and self.provider_stop_reason in LOST_CALL_STOPS


#: The kinds of block an assistant turn's order names: a reasoning block (Anthropic
#: thinking or redacted thinking, a Gemini thought part), a text part, a tool call.
BLOCK_KINDS = ("reasoning", "text", "call")


def block_order(kinds: Sequence[str]) -> tuple[str, ...]:
    """``assistant/message.blocks`` for an answer whose blocks came in this order: empty
    when the order is the usual one — every reasoning block, then the text, then the
    calls — which every builder produces without it (so the log only says so when the
    order says something)."""
    ranks = [BLOCK_KINDS.index(k) for k in kinds]
    return () if ranks == sorted(ranks) else tuple(kinds)


def fail(api: str, path: str, reason: str) -> NoReturn:
    raise ProviderResponseError(api, path, reason)


_KIND_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object",
               bool: "a boolean"}


def get(api: str, obj: Any, key: str, path: str, kind: type | tuple[type, ...],
        *, optional: bool = False) -> Any:
    """``obj[key]`` checked to be of ``kind`` (None allowed when ``optional``)."""
    if not isinstance(obj, Mapping):
        fail(api, path, f"expected an object, got {kind_of(obj)}")
    value = obj.get(key)
    if value is None and optional:
        return None
    if value is None and key not in obj:
        fail(api, f"{path}.{key}", "required field missing")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        want = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        fail(api, f"{path}.{key}", f"expected {want}, got {kind_of(value)}")
    return value


def finish_calls(raw: Sequence[tuple[str, str, str | Mapping[str, Any]]], truncated: bool
                 ) -> tuple[tuple[OutputCall, ...], tuple[WithheldCall, ...]]:
    """(call id, name, arguments as JSON text or object) → complete and withheld calls.

    When the output was cut at max_tokens no call is trusted complete (the last one
    may be cut mid-arguments, and a round is only meaningful whole): all are withheld.
    """
    calls: list[OutputCall] = []
    withheld: list[WithheldCall] = []
    for call_id, name, args in raw:
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        if truncated:
            withheld.append(WithheldCall(call_id, name, text, "truncated"))
            continue
        if isinstance(args, Mapping):
            calls.append(OutputCall(call_id, name, dict(args)))
            continue
        try:
            value = json.loads(args) if args.strip() else {}
        except ValueError:
            value = None
        if isinstance(value, dict):
            calls.append(OutputCall(call_id, name, value))
        else:
            withheld.append(WithheldCall(call_id, name, text, "invalid-arguments"))
    return tuple(calls), tuple(withheld)


def usage_of(pairs: Mapping[str, Any]) -> dict[str, int] | None:
    """Neutral usage from (neutral name → value) pairs; None without both token counts."""
    out = {k: v for k, v in pairs.items() if isinstance(v, int) and not isinstance(v, bool)}
    if "input_tokens" not in out or "output_tokens" not in out:
        return None
    return out


def reasoning_item(api: str, block: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """One recorded reasoning part: its ``api`` and the block's ``keys`` that are set."""
    out: dict[str, Any] = {"api": api}
    out.update({k: block[k] for k in keys if block.get(k) is not None})
    return out


def count_kinds(kinds: list[str]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return tuple(sorted(counts.items()))
