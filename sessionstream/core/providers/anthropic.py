"""Anthropic Messages: the request body built from an assembled request.

system sections → top-level ``system``, one text block per section; user, context and
summary messages → ``user`` messages (text blocks); assistant messages → ``assistant``
with a text block and ``tool_use`` blocks (``input`` is the arguments object); all the
results of one call round → ONE ``user`` message right after the assistant message,
``tool_result`` blocks with ``is_error`` for an error (a user message that arrived
during the round follows it). Tool schemas carry ``input_schema``. ``max_tokens`` is
required: without one in the header the builder sends :data:`DEFAULT_MAX_TOKENS` (and
says so). ``reasoning_effort`` has no Messages field: it is reported, not sent; extended
thinking is the ``thinking`` option (the body's ``thinking`` as is).

Recorded thinking (``thinking`` blocks with their signatures, ``redacted_thinking``)
goes back unmodified in its assistant message, every block where the model put it
(``assistant/message.blocks``: interleaved thinking, text after a call), so the turn is
sent back exactly as received, as the API requires; with thinking on, an open tool round
whose assistant message has no thinking (compacted, deleted, recorded from another API)
would be refused, so the request turns thinking off (a note) rather than send it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.jsonvalue import thaw
from sessionstream.core.messages import Message, ToolCall
from sessionstream.core.providers.common import (
    MOVED,
    Built,
    Collector,
    arrange,
    group,
    header_part,
    message_source,
    nonblank_system,
    nonblank_texts,
    reasoning_parts,
    round_source,
    text_entries,
    tool_result_text,
    tools_of,
)
from sessionstream.core.providers.errors import IncompleteStream
from sessionstream.core.providers.output import (
    ModelOutput,
    block_order,
    count_kinds,
    fail,
    finish_calls,
    get,
    reasoning_item,
    usage_of,
)
from sessionstream.core.providers.rules import (
    ANTHROPIC_ID,
    Problem,
    anthropic_id,
    blank_message,
    check,
)
from sessionstream.core.request import Request

API = "anthropic"

#: max_tokens sent when no header layer supplies one (the Messages API requires it).
DEFAULT_MAX_TOKENS = 4096


_BLANK = "Anthropic refuses such text blocks"


def _text_blocks(m: Message, c: Collector, path: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t} for t in nonblank_texts(m, c, path, _BLANK)]


def _id(call_id: str | None, c: Collector, path: str, seqs: tuple[int, ...]) -> str:
    """A call id in Anthropic's form (``rules.anthropic_id``), with a note when mapped."""
    sent = anthropic_id(call_id or "")
    if sent != call_id:
        c.note(path, f"call id {call_id!r} sent as {sent!r} (Anthropic ids match "
               f"{ANTHROPIC_ID.pattern}; an import maps it back)", seqs)
    return sent


#: The block types of Anthropic's reasoning (recorded as class ``reasoning``).
THINKING_TYPES = ("thinking", "redacted_thinking")


def _thinking_blocks(request: Request, m: Message, c: Collector, path: str
                     ) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for item in reasoning_parts(request, m, API, c, path):
        kind = item.get("type")
        if kind == "thinking" and isinstance(item.get("thinking"), str) and isinstance(
                item.get("signature"), str):
            blocks.append({"type": "thinking", "thinking": item["thinking"],
                           "signature": item["signature"]})
        elif kind == "redacted_thinking" and isinstance(item.get("data"), str):
            blocks.append({"type": "redacted_thinking", "data": item["data"]})
        else:
            c.note(path, f"recorded reasoning part {kind!r} without its signature or data "
                   "not sent", m.seqs)
    return blocks


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Whether a Messages body turns extended thinking on."""
    thinking = body.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive")


def _thinking_first(body: dict[str, Any], c: Collector) -> None:
    """With thinking on, the last assistant message, when it opened a tool round, must
    start with its thinking: without one recorded, thinking goes off for this request."""
    if not thinking_enabled(body):
        return
    for i in range(len(body["messages"]) - 1, -1, -1):
        msg = body["messages"][i]
        if msg["role"] != "assistant":
            continue
        blocks = msg["content"]
        if any(b["type"] == "tool_use" for b in blocks) and blocks[0]["type"] not in \
                THINKING_TYPES:
            del body["thinking"]
            c.origins[:] = [o for o in c.origins if o.path != "/thinking"]
            c.note("/thinking", f"thinking turned off for this request: the assistant "
                   f"message /messages/{i} of the open tool round has no recorded thinking "
                   "of this API (compacted, deleted or from another API), and the API "
                   "requires it first")
        return


def build(request: Request, *, stream: bool = False,
          thinking: Mapping[str, Any] | None = None) -> Built:
    """The Messages body for ``request`` (pure; validated against the SDK in tests).

    ``thinking``: the body's ``thinking`` configuration (e.g. ``{"type": "enabled",
    "budget_tokens": 2048}``), sent as is.
    """
    c = Collector()
    body: dict[str, Any] = {"model": request.header.model}
    c.origin("/model", part="header", field="model",
             source=request.header.source_of("model") or "request/header")
    if request.header.max_tokens is None:
        body["max_tokens"] = DEFAULT_MAX_TOKENS
        c.origin("/max_tokens", part="builder", default=DEFAULT_MAX_TOKENS)
        c.note("/max_tokens", f"no max_tokens in the header: the builder sent {DEFAULT_MAX_TOKENS}")
    else:
        header_part(request, c, body, "max_tokens", "max_tokens")
    if request.header.reasoning_effort is not None:
        c.note("/", f"reasoning_effort {request.header.reasoning_effort!r} not sent: the "
               "Messages API has no such field (configure extended thinking instead)")
    system = nonblank_system(request, c, "/system", "Anthropic refuses such text blocks")
    if system:
        body["system"] = [{"type": "text", "text": p.text} for p in system]
        for i, p in enumerate(system):
            c.origin(f"/system/{i}", part="system", sections=[p.section_id],
                     variables=list(p.variables))
    messages: list[dict[str, Any]] = []
    blank: list[Problem] = []  # user messages left out as blank: named if they matter
    for item in group(request.messages):
        path = f"/messages/{len(messages)}"
        if item.kind == "results":
            blocks: list[dict[str, Any]] = []
            for j, m in enumerate(item.messages):
                text, why = tool_result_text(m)
                if why:
                    c.note(f"{path}/content/{j}", why, m.seqs)
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": _id(
                    m.call_id, c, f"{path}/content/{j}/tool_use_id", m.seqs)}
                if text.strip():
                    block["content"] = text
                elif text:
                    c.note(f"{path}/content/{j}", "whitespace-only tool result sent without "
                           "content (Anthropic refuses whitespace-only text)", m.seqs)
                if m.status == "error":
                    block["is_error"] = True
                blocks.append(block)
                c.origin(f"{path}/content/{j}", **message_source(m))
            messages.append({"role": "user", "content": blocks})
            c.origin(path, **round_source(item.messages))
            continue
        m = item.messages[0]
        if item.kind == "assistant":
            kinds: dict[str, Sequence[dict[str, Any] | ToolCall | None]] = {
                "reasoning": _thinking_blocks(request, m, c, path),
                "text": [None if t is None else {"type": "text", "text": t}
                         for t in text_entries(m, c, path, _BLANK)],
                "call": m.tool_calls}
            arranged: list[tuple[str, dict[str, Any] | ToolCall]] = arrange(
                request.blocks_for(m.seqs[0]), kinds)
            if all(kind == "reasoning" for kind, _b in arranged):
                c.note(path, "empty assistant message omitted", m.seqs)
                continue
            content: list[dict[str, Any]] = []
            for kind, part in arranged:  # in the order the model answered
                at = f"{path}/content/{len(content)}"
                if isinstance(part, ToolCall):
                    c.origin(at, part="tool_call", call_id=part.call_id, seqs=list(m.seqs))
                    content.append({"type": "tool_use", "id": _id(
                        part.call_id, c, f"{at}/id", m.seqs), "name": part.name,
                        "input": thaw(part.arguments)})
                    continue
                if kind == "reasoning":
                    c.origin(at, part="reasoning", seqs=list(m.seqs))
                content.append(part)
            messages.append({"role": "assistant", "content": content})
            c.origin(path, **message_source(m))
            continue
        if item.moved:
            c.note(path, MOVED, m.seqs)
        content = _text_blocks(m, c, path)
        if not content:
            c.note(path, "empty user message omitted", m.seqs)
            blank.append(blank_message(f"{path}/content", m.seqs, _BLANK))
            continue
        messages.append({"role": "user", "content": content})
        c.origin(path, **message_source(m))
    body["messages"] = messages
    if request.tools:
        body["tools"] = tools_of(request, c, "/tools", API)
    if thinking is not None:
        body["thinking"] = dict(thinking)
        c.origin("/thinking", part="builder", option="thinking")
        _thinking_first(body, c)
    if stream:
        body["stream"] = True
        c.origin("/stream", part="builder", option="stream")
    check(API, body, blank)  # what the API refuses beyond the SDK types: a named error
    return Built(API, body, tuple(c.origins), tuple(c.notes))





# ------------------------------------------------------------------------------ responses

_STOPS = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
          "stop_sequence": "stop_sequence", "refusal": "refusal", "pause_turn": "pause_turn",
          "model_context_window_exceeded": "max_tokens"}


def _usage(u: Any) -> dict[str, int] | None:
    if not isinstance(u, Mapping):
        return None
    return usage_of({
        "input_tokens": u.get("input_tokens"), "output_tokens": u.get("output_tokens"),
        "cache_read_input_tokens": u.get("cache_read_input_tokens"),
        "cache_creation_input_tokens": u.get("cache_creation_input_tokens"),
    })


@dataclass
class _Folded:
    """The blocks of one answer, by kind, and their kinds in the order received."""

    text: list[str] = field(default_factory=list)
    raw: list[tuple[str, str, Any]] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    order: list[str] = field(default_factory=list)


def _fold(blocks: list[Any], path: str) -> _Folded:
    out = _Folded()
    for i, block in enumerate(blocks):
        p = f"{path}[{i}]"
        kind = get(API, block, "type", p, str)
        if kind == "text":
            out.text.append(get(API, block, "text", p, str))
            out.order.append("text")
        elif kind == "tool_use":
            out.raw.append((get(API, block, "id", p, str), get(API, block, "name", p, str),
                            get(API, block, "input", p, (dict, str))))
            out.order.append("call")
        elif kind == "thinking":
            get(API, block, "thinking", p, str)
            get(API, block, "signature", p, str)
            out.reasoning.append(reasoning_item(API, block, ("type", "thinking", "signature")))
            out.order.append("reasoning")
        elif kind == "redacted_thinking":
            get(API, block, "data", p, str)
            out.reasoning.append(reasoning_item(API, block, ("type", "data")))
            out.order.append("reasoning")
        else:  # server-tool blocks and unknown ones: counted on the message
            out.omitted.append(kind)
    return out


def _output(msg: Mapping[str, Any], blocks: list[Any], path: str, usage: Any,
            chunks: tuple[str, ...] = ()) -> ModelOutput:
    f = _fold(blocks, path)
    text = "".join(f.text)
    provider_stop = get(API, msg, "stop_reason", "$", str, optional=True)
    stop = _STOPS.get(provider_stop or "", "other")
    calls, withheld = finish_calls(f.raw, stop == "max_tokens")
    return ModelOutput(API, get(API, msg, "model", "$", str, optional=True),
                       get(API, msg, "id", "$", str, optional=True), text, calls, stop,
                       provider_stop, _usage(usage), text if stop == "refusal" else None,
                       withheld, chunks, count_kinds(f.omitted), tuple(f.reasoning),
                       tuple(f.text) if len(f.text) > 1 else (), block_order(f.order))


def parse_response(body: Mapping[str, Any]) -> ModelOutput:
    """A Messages API response body (``Message`` as JSON) → ModelOutput."""
    if body.get("type") == "error":
        err = body.get("error") or {}
        fail(API, "$", f"an error response: {err.get('type')}: {err.get('message')}")
    return _output(body, get(API, body, "content", "$", list), "$.content", body.get("usage"))


class AnthropicStreamParser:
    """Folds Messages stream events (``RawMessageStreamEvent`` as JSON) into a ModelOutput.

    ``tool_use`` input arrives as ``input_json_delta`` fragments; a block that never
    reached ``content_block_stop`` is open when the stream is cut.
    """

    api = API

    def __init__(self) -> None:
        self._msg: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._stopped: set[int] = set()
        self._usage: dict[str, Any] = {}
        self._ended = False
        self._text: list[str] = []
        self._n = 0

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        path = f"event[{self._n}]"
        self._n += 1
        kind = get(API, event, "type", path, str)
        if kind == "error":
            err = event.get("error") or {}
            fail(API, path, f"stream error: {err.get('type')}: {err.get('message')}")
        if kind == "message_start":
            self._msg = dict(get(API, event, "message", path, dict))
            self._usage.update({k: v for k, v in (self._msg.get("usage") or {}).items()
                                if v is not None})
        elif kind == "content_block_start":
            index = get(API, event, "index", path, int)
            self._blocks[index] = dict(get(API, event, "content_block", path, dict))
        elif kind == "content_block_delta":
            index = get(API, event, "index", path, int)
            if index not in self._blocks:
                fail(API, f"{path}.index", f"delta for block {index}, which never started")
            delta = get(API, event, "delta", path, dict)
            dk = get(API, delta, "type", f"{path}.delta", str)
            if dk == "text_delta":
                piece = get(API, delta, "text", f"{path}.delta", str)
                self._blocks[index]["text"] = self._blocks[index].get("text", "") + piece
                self._text.append(piece)
                return [piece]
            if dk == "input_json_delta":
                self._json.setdefault(index, []).append(
                    get(API, delta, "partial_json", f"{path}.delta", str))
            elif dk in ("thinking_delta", "signature_delta"):
                key = "thinking" if dk == "thinking_delta" else "signature"
                piece = get(API, delta, key, f"{path}.delta", str)
                block = self._blocks[index]
                block[key] = (block.get(key) or "") + piece
        elif kind == "content_block_stop":
            self._stopped.add(get(API, event, "index", path, int))
        elif kind == "message_delta":
            if self._msg is None:
                fail(API, path, "message_delta before message_start")
            delta = get(API, event, "delta", path, dict)
            if delta.get("stop_reason") is not None:
                self._msg["stop_reason"] = delta["stop_reason"]
            self._usage.update({k: v for k, v in (event.get("usage") or {}).items()
                                if v is not None})
        elif kind == "message_stop":
            self._ended = True
        return []

    def finish(self) -> ModelOutput:
        open_calls = tuple(str(b.get("id")) for i, b in self._blocks.items()
                           if b.get("type") == "tool_use" and i not in self._stopped)
        if self._msg is None or not self._ended:
            raise IncompleteStream(API, "the stream ended before message_stop", open_calls)
        blocks = []
        for i in sorted(self._blocks):
            block = dict(self._blocks[i])
            if block.get("type") == "tool_use" and i in self._json:
                block["input"] = "".join(self._json[i])  # JSON text: finish_calls parses it
            elif block.get("type") == "tool_use" and not block.get("input"):
                block["input"] = {}
            blocks.append(block)
        return _output(self._msg, blocks, "stream.content", self._usage, tuple(self._text))


__all__ = ["API", "DEFAULT_MAX_TOKENS", "AnthropicStreamParser", "build", "parse_response"]
