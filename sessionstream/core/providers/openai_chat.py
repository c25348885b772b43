"""OpenAI Chat Completions: the request body built from an assembled request.

system sections → one ``system`` message (sections joined by a blank line); user,
context and summary messages → ``user`` messages; assistant messages → ``assistant``
with ``tool_calls`` (``id``, ``type: function``, arguments as a JSON string); tool
results → one ``tool`` message each, right after the assistant message
(``tool_call_id``; an error result's text starts with ``ERROR: ``). ``max_tokens`` →
``max_completion_tokens``; ``reasoning_effort`` is sent as is. Recorded reasoning is
never sent (the format has no field for it; a note says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sessionstream.core.messages import Message
from sessionstream.core.providers.common import (
    ERROR_PREFIX,
    MOVED,
    Built,
    Collector,
    arguments_json,
    content_parts,
    group,
    header_part,
    message_source,
    order_not_kept,
    reasoning_parts,
    system_origin,
    tool_result_text,
    tools_of,
)
from sessionstream.core.providers.errors import IncompleteStream
from sessionstream.core.providers.output import ModelOutput, fail, finish_calls, get, usage_of
from sessionstream.core.providers.rules import check
from sessionstream.core.request import Request

API = "openai-chat"


def _user_content(m: Message) -> tuple[Any, bool]:
    if isinstance(m.content, str):
        return m.content, False
    parts = content_parts(m.content)
    return [{"type": "text", "text": p.text} for p in parts], any(p.serialised for p in parts)


def build(request: Request, *, stream: bool = False) -> Built:
    """The Chat Completions body for ``request`` (pure; validated against the SDK in tests)."""
    c = Collector()
    body: dict[str, Any] = {"model": request.header.model}
    c.origin("/model", part="header", field="model",
             source=request.header.source_of("model") or "request/header")
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system_prompt})
        c.origin("/messages/0", **system_origin(request))
    for item in group(request.messages):
        if item.kind == "results":
            for m in item.messages:
                path = f"/messages/{len(messages)}"
                text, why = tool_result_text(m)
                if why:
                    c.note(path, why, m.seqs)
                if m.status == "error":
                    text = ERROR_PREFIX + text
                    c.note(path, "status error carried as the text prefix 'ERROR: '", m.seqs)
                messages.append({"role": "tool", "tool_call_id": m.call_id, "content": text})
                c.origin(path, **message_source(m))
            continue
        m = item.messages[0]
        path = f"/messages/{len(messages)}"
        if item.kind == "assistant":
            reasoning_parts(request, m, API, c, path)  # Chat takes no reasoning back: notes
            order_not_kept(request, m, c, path, "a Chat Completions message carries its "
                           "text apart from its tool calls")
            text, serialised = _assistant_text(m)
            if not text and not m.tool_calls:
                c.note(path, "empty assistant message omitted", m.seqs)
                continue
            if serialised:
                c.note(path, "non-text assistant content serialised as JSON text", m.seqs)
            content: Any = text or None
            if isinstance(m.content, list | tuple) and text:
                content = [{"type": "text", "text": p.text} for p in content_parts(m.content)
                           if p.text]
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {"id": tc.call_id, "type": "function",
                     "function": {"name": tc.name, "arguments": arguments_json(tc.arguments)}}
                    for tc in m.tool_calls
                ]
                for j, tc in enumerate(m.tool_calls):
                    c.origin(f"{path}/tool_calls/{j}", part="tool_call", call_id=tc.call_id,
                             seqs=list(m.seqs))
            messages.append(msg)
            c.origin(path, **message_source(m))
            continue
        if item.moved:
            c.note(path, MOVED, m.seqs)
        content, serialised = _user_content(m)
        if serialised:
            c.note(path, "non-text content part serialised as JSON text", m.seqs)
        messages.append({"role": "user", "content": content})
        c.origin(path, **message_source(m))
    body["messages"] = messages
    if request.tools:
        body["tools"] = tools_of(request, c, "/tools", API)
    header_part(request, c, body, "max_tokens", "max_completion_tokens")
    header_part(request, c, body, "reasoning_effort", "reasoning_effort")
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        c.origin("/stream", part="builder", option="stream")
    check(API, body)  # what the API refuses beyond the SDK types: a named error
    return Built(API, body, tuple(c.origins), tuple(c.notes))


def _assistant_text(m: Message) -> tuple[str, bool]:
    parts = content_parts(m.content)
    return "".join(p.text for p in parts), any(p.serialised for p in parts)



# ------------------------------------------------------------------------------ responses

_FINISH = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
           "length": "max_tokens", "content_filter": "content_filter"}


def _stop(finish: str | None, refusal: str | None) -> str:
    if refusal:
        return "refusal"
    return _FINISH.get(finish or "", "other")


def _usage(u: Any) -> dict[str, int] | None:
    if not isinstance(u, Mapping):
        return None
    pairs: dict[str, Any] = {"input_tokens": u.get("prompt_tokens"),
                             "output_tokens": u.get("completion_tokens")}
    details = u.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        pairs["cached_input_tokens"] = details.get("cached_tokens")
    out_details = u.get("completion_tokens_details")
    if isinstance(out_details, Mapping):
        pairs["reasoning_tokens"] = out_details.get("reasoning_tokens")
    return usage_of(pairs)


def parse_response(body: Mapping[str, Any]) -> ModelOutput:
    """A Chat Completions response body (``ChatCompletion`` as JSON) → ModelOutput."""
    choices = get(API, body, "choices", "$", list)
    if not choices:
        fail(API, "$.choices", "no choice in the response")
    choice = choices[0]
    msg = get(API, choice, "message", "$.choices[0]", dict)
    text = get(API, msg, "content", "$.choices[0].message", str, optional=True) or ""
    refusal = get(API, msg, "refusal", "$.choices[0].message", str, optional=True)
    finish = get(API, choice, "finish_reason", "$.choices[0]", str, optional=True)
    raw = []
    for i, tc in enumerate(get(API, msg, "tool_calls", "$.choices[0].message", list,
                               optional=True) or ()):
        p = f"$.choices[0].message.tool_calls[{i}]"
        fn = get(API, tc, "function", p, dict)
        raw.append((get(API, tc, "id", p, str), get(API, fn, "name", f"{p}.function", str),
                    get(API, fn, "arguments", f"{p}.function", str)))
    stop = _stop(finish, refusal)
    calls, withheld = finish_calls(raw, stop == "max_tokens")
    return ModelOutput(API, get(API, body, "model", "$", str, optional=True),
                       get(API, body, "id", "$", str, optional=True), text, calls, stop, finish,
                       _usage(body.get("usage")), refusal, withheld)


class ChatStreamParser:
    """Folds ``ChatCompletionChunk`` events (as JSON) into a ModelOutput."""

    api = API

    def __init__(self) -> None:
        self._id: str | None = None
        self._model: str | None = None
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self._finish: str | None = None
        self._usage: dict[str, int] | None = None
        self._n = 0

    def feed(self, chunk: Mapping[str, Any]) -> list[str]:
        """Take one chunk; returns the text deltas it carried (for assistant/chunk)."""
        path = f"chunk[{self._n}]"
        self._n += 1
        self._id = get(API, chunk, "id", path, str, optional=True) or self._id
        self._model = get(API, chunk, "model", path, str, optional=True) or self._model
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk["usage"])
        deltas: list[str] = []
        for i, choice in enumerate(get(API, chunk, "choices", path, list)):
            if choice.get("index", 0) != 0:
                continue
            delta = get(API, choice, "delta", f"{path}.choices[{i}]", dict, optional=True) or {}
            text = get(API, delta, "content", f"{path}.delta", str, optional=True)
            if text:
                self._text.append(text)
                deltas.append(text)
            refusal = get(API, delta, "refusal", f"{path}.delta", str, optional=True)
            if refusal:
                self._refusal.append(refusal)
            for j, tc in enumerate(get(API, delta, "tool_calls", f"{path}.delta", list,
                                       optional=True) or ()):
                p = f"{path}.delta.tool_calls[{j}]"
                index = get(API, tc, "index", p, int)
                slot = self._calls.setdefault(index, ["", "", ""])
                slot[0] = get(API, tc, "id", p, str, optional=True) or slot[0]
                fn = get(API, tc, "function", p, dict, optional=True) or {}
                slot[1] += get(API, fn, "name", f"{p}.function", str, optional=True) or ""
                slot[2] += get(API, fn, "arguments", f"{p}.function", str, optional=True) or ""
            finish = get(API, choice, "finish_reason", f"{path}.choices[{i}]", str,
                         optional=True)
            if finish:
                self._finish = finish
        return deltas

    def finish(self) -> ModelOutput:
        """The output; :class:`IncompleteStream` if no chunk carried a finish_reason."""
        if self._finish is None:
            raise IncompleteStream(API, "the stream ended before a finish_reason",
                                   tuple(s[0] or s[1] for s in self._calls.values()))
        refusal = "".join(self._refusal) or None
        stop = _stop(self._finish, refusal)
        raw = [(s[0], s[1], s[2]) for _, s in sorted(self._calls.items())]
        for call_id, name, _ in raw:
            if not call_id or not name:
                fail(API, "stream", f"a tool call without id or name ({call_id or name!r})")
        calls, withheld = finish_calls(raw, stop == "max_tokens")
        text = "".join(self._text)
        return ModelOutput(API, self._model, self._id, text, calls, stop, self._finish,
                           self._usage, refusal, withheld, tuple(self._text))


__all__ = ["API", "ChatStreamParser", "build", "parse_response"]
