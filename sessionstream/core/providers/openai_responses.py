"""OpenAI Responses: the request body built from an assembled request.

system sections → ``instructions`` (joined by a blank line); user, context and summary
messages → ``message`` items with role ``user`` (a list content → ``input_text`` parts);
assistant text → a ``message`` item with role ``assistant`` (a string content as is, a
list content as ``output_text`` parts of an output message whose id is ``msg_ss<seq>``);
each tool call → a ``function_call`` item (arguments as a JSON string) and each result
→ a ``function_call_output`` item right after (an error's text starts with ``ERROR: ``).
``max_tokens`` → ``max_output_tokens``; ``reasoning_effort`` → ``reasoning.effort``.
The request is stateless (the whole surface is sent; no ``previous_response_id``).

Recorded ``reasoning`` items go back right before their assistant message's items, as
returned (id, summary, encrypted content). With ``stateless=True`` the body says
``store: false`` and asks for ``reasoning.encrypted_content`` (so the next request can
carry the reasoning without server-side state); a recorded item without encrypted
content cannot be resolved then and is not sent (a note).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sessionstream.core.jsonvalue import thaw
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
from sessionstream.core.providers.output import (
    ModelOutput,
    count_kinds,
    fail,
    finish_calls,
    get,
    reasoning_item,
    usage_of,
)
from sessionstream.core.providers.rules import check
from sessionstream.core.request import Request

API = "openai-responses"


def _user_content(m: Message) -> tuple[Any, bool]:
    if isinstance(m.content, str):
        return m.content, False
    parts = content_parts(m.content)
    return ([{"type": "input_text", "text": p.text} for p in parts],
            any(p.serialised for p in parts))


#: What a reasoning item keeps when recorded and sent back.
REASONING_KEYS = ("type", "id", "summary", "content", "encrypted_content", "status")


def _sendable(item: Mapping[str, Any]) -> bool:
    """Whether a recorded reasoning item has the shape the API takes back: summary and
    content lists of text parts, text for the encrypted content and the status."""
    for key in ("summary", "content"):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list | tuple) or not all(
                isinstance(p, Mapping) and isinstance(p.get("text"), str)
                and isinstance(p.get("type"), str) for p in parts):
            return False
    return all(item.get(k) is None or isinstance(item[k], str)
               for k in ("encrypted_content", "status"))


def _reasoning_items(request: Request, m: Message, c: Collector, path: str, stateless: bool
                     ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in reasoning_parts(request, m, API, c, path):
        if item.get("type") != "reasoning" or not isinstance(item.get("id"), str):
            c.note(path, f"recorded reasoning part {item.get('type')!r} without an id not "
                   "sent", m.seqs)
            continue
        if not _sendable(item):
            c.note(path, f"reasoning item {item['id']} not sent: its recorded summary, "
                   "content or encrypted content is not of the API's shape", m.seqs)
            continue
        if stateless and not item.get("encrypted_content"):
            c.note(path, f"reasoning item {item['id']} not sent: it has no encrypted content "
                   "and a stateless request (store false) cannot resolve its id", m.seqs)
            continue
        sent = {k: thaw(item[k]) for k in REASONING_KEYS if item.get(k) is not None}
        sent.setdefault("summary", [])
        out.append(sent)
    return out


def build(request: Request, *, stream: bool = False, stateless: bool = False) -> Built:
    """The Responses body for ``request`` (pure; validated against the SDK in tests).

    ``stateless``: ``store: false`` and ``include: ["reasoning.encrypted_content"]``, so
    reasoning items can be replayed without the provider keeping the response.
    """
    c = Collector()
    body: dict[str, Any] = {"model": request.header.model}
    c.origin("/model", part="header", field="model",
             source=request.header.source_of("model") or "request/header")
    if request.system:
        body["instructions"] = request.system_prompt
        c.origin("/instructions", **system_origin(request))
    items: list[dict[str, Any]] = []
    for item in group(request.messages):
        if item.kind == "results":
            for m in item.messages:
                path = f"/input/{len(items)}"
                text, why = tool_result_text(m)
                if why:
                    c.note(path, why, m.seqs)
                if m.status == "error":
                    text = ERROR_PREFIX + text
                    c.note(path, "status error carried as the text prefix 'ERROR: '", m.seqs)
                items.append({"type": "function_call_output", "call_id": m.call_id,
                              "output": text})
                c.origin(path, **message_source(m))
            continue
        m = item.messages[0]
        if item.kind == "assistant":
            order_not_kept(request, m, c, f"/input/{len(items)}", "the Responses builder "
                           "sends a message's text before its function calls")
            parts = [p for p in content_parts(m.content) if p.text]
            if parts or m.tool_calls:  # a reasoning item must be followed by its output
                for r in _reasoning_items(request, m, c, f"/input/{len(items)}", stateless):
                    c.origin(f"/input/{len(items)}", part="reasoning", seqs=list(m.seqs))
                    items.append(r)
            if any(p.serialised for p in parts):
                c.note(f"/input/{len(items)}",
                       "non-text assistant content serialised as JSON text", m.seqs)
            if parts and isinstance(m.content, str):
                path = f"/input/{len(items)}"
                items.append({"type": "message", "role": "assistant", "content": m.content})
                c.origin(path, **message_source(m))
            elif parts:
                # list content: an output message with output_text parts (the SDK type
                # needs an id and a status; the id is derived from the event's seq)
                path = f"/input/{len(items)}"
                items.append({
                    "type": "message", "role": "assistant", "id": f"msg_ss{m.seqs[0]}",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": p.text, "annotations": []}
                                for p in parts],
                })
                c.origin(path, **message_source(m))
            elif not m.tool_calls:
                c.note(f"/input/{len(items)}", "empty assistant message omitted", m.seqs)
            for tc in m.tool_calls:
                path = f"/input/{len(items)}"
                items.append({"type": "function_call", "call_id": tc.call_id, "name": tc.name,
                              "arguments": arguments_json(tc.arguments)})
                c.origin(path, part="tool_call", call_id=tc.call_id, seqs=list(m.seqs))
            continue
        path = f"/input/{len(items)}"
        if item.moved:
            c.note(path, MOVED, m.seqs)
        content, serialised = _user_content(m)
        if serialised:
            c.note(path, "non-text content part serialised as JSON text", m.seqs)
        items.append({"type": "message", "role": "user", "content": content})
        c.origin(path, **message_source(m))
    body["input"] = items
    if request.tools:
        body["tools"] = tools_of(request, c, "/tools", API)
    header_part(request, c, body, "max_tokens", "max_output_tokens")
    effort = request.header.reasoning_effort
    if effort is not None:
        body["reasoning"] = {"effort": effort}
        c.origin("/reasoning/effort", part="header", field="reasoning_effort",
                 source=request.header.source_of("reasoning_effort") or "request/header")
    if stateless:
        body["store"] = False
        body["include"] = ["reasoning.encrypted_content"]
        c.origin("/store", part="builder", option="stateless")
        c.origin("/include", part="builder", option="stateless")
    if stream:
        body["stream"] = True
        c.origin("/stream", part="builder", option="stream")
    check(API, body)  # what the API refuses beyond the SDK types: a named error
    return Built(API, body, tuple(c.origins), tuple(c.notes))



# ------------------------------------------------------------------------------ responses


def _usage(u: Any) -> dict[str, int] | None:
    if not isinstance(u, Mapping):
        return None
    pairs: dict[str, Any] = {"input_tokens": u.get("input_tokens"),
                             "output_tokens": u.get("output_tokens")}
    if isinstance(u.get("input_tokens_details"), Mapping):
        pairs["cached_input_tokens"] = u["input_tokens_details"].get("cached_tokens")
    if isinstance(u.get("output_tokens_details"), Mapping):
        pairs["reasoning_tokens"] = u["output_tokens_details"].get("reasoning_tokens")
    return usage_of(pairs)


def _fold_items(items: list[Any], path: str
                ) -> tuple[str, str | None, list[tuple[str, str, str]], list[str],
                           list[dict[str, Any]]]:
    omitted: list[str] = []
    text: list[str] = []
    refusal: list[str] = []
    raw: list[tuple[str, str, str]] = []
    reasoning: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        p = f"{path}[{i}]"
        kind = get(API, item, "type", p, str)
        if kind == "message":
            for j, part in enumerate(get(API, item, "content", p, list)):
                pk = get(API, part, "type", f"{p}.content[{j}]", str)
                if pk == "output_text":
                    text.append(get(API, part, "text", f"{p}.content[{j}]", str))
                elif pk == "refusal":
                    refusal.append(get(API, part, "refusal", f"{p}.content[{j}]", str))
        elif kind == "function_call":
            raw.append((get(API, item, "call_id", p, str), get(API, item, "name", p, str),
                        get(API, item, "arguments", p, str)))
        elif kind == "reasoning":
            get(API, item, "id", p, str)
            for key in ("summary", "content"):
                for j, part in enumerate(get(API, item, key, p, list, optional=True) or ()):
                    get(API, part, "text", f"{p}.{key}[{j}]", str)
            get(API, item, "encrypted_content", p, str, optional=True)
            reasoning.append(reasoning_item(API, item, REASONING_KEYS))
        else:  # built-in tool items and unknown ones: counted on the message
            omitted.append(kind)
    return "".join(text), "".join(refusal) or None, raw, omitted, reasoning


def _stop(status: str | None, details: Any, has_calls: bool, refusal: str | None,
          text: str) -> str:
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return {"max_output_tokens": "max_tokens",
                "content_filter": "content_filter"}.get(reason or "", "other")
    if refusal and not text:
        return "refusal"
    return "tool_use" if has_calls else "end_turn"


def _provider_stop(status: str | None, details: Any) -> str | None:
    if status == "incomplete" and isinstance(details, Mapping) and details.get("reason"):
        return f"incomplete:{details['reason']}"
    return status


def _output(resp: Mapping[str, Any], items: list[Any], path: str,
            chunks: tuple[str, ...] = ()) -> ModelOutput:
    status = get(API, resp, "status", "$", str, optional=True)
    if status == "failed":
        err = resp.get("error") or {}
        fail(API, "$.status", f"the response failed: {err.get('code')}: {err.get('message')}")
    text, refusal, raw, omitted, reasoning = _fold_items(items, path)
    details = resp.get("incomplete_details")
    stop = _stop(status, details, bool(raw), refusal, text)
    calls, withheld = finish_calls(raw, stop == "max_tokens")
    return ModelOutput(API, get(API, resp, "model", "$", str, optional=True),
                       get(API, resp, "id", "$", str, optional=True), text, calls, stop,
                       _provider_stop(status, details), _usage(resp.get("usage")), refusal,
                       withheld, chunks, count_kinds(omitted), tuple(reasoning))


def parse_response(body: Mapping[str, Any]) -> ModelOutput:
    """A Responses API response body (``Response`` as JSON) → ModelOutput."""
    return _output(body, get(API, body, "output", "$", list), "$.output")


class ResponsesStreamParser:
    """Folds Responses stream events (``ResponseStreamEvent`` as JSON) into a ModelOutput.

    Items are assembled from ``response.output_item.added`` and the deltas, and taken
    whole from ``response.output_item.done``; status and usage come from the terminal
    ``response.completed`` / ``response.incomplete`` event.
    """

    api = API

    def __init__(self) -> None:
        self._items: dict[int, dict[str, Any]] = {}
        self._done: set[int] = set()
        self._final: Mapping[str, Any] | None = None
        self._text: list[str] = []
        self._n = 0

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        path = f"event[{self._n}]"
        self._n += 1
        kind = get(API, event, "type", path, str)
        if kind == "error":
            fail(API, path, f"stream error: {event.get('code')}: {event.get('message')}")
        if kind == "response.failed":
            _output(get(API, event, "response", path, dict), [], path)  # raises
        if kind in ("response.completed", "response.incomplete"):
            self._final = get(API, event, "response", path, dict)
            return []
        if kind == "response.output_item.added":
            index = get(API, event, "output_index", path, int)
            item = dict(get(API, event, "item", path, dict))
            if item.get("type") == "message":
                item["content"] = [dict(p) for p in item.get("content") or ()]
            self._items[index] = item
            return []
        if kind == "response.output_item.done":
            index = get(API, event, "output_index", path, int)
            self._items[index] = dict(get(API, event, "item", path, dict))
            self._done.add(index)
            return []
        if kind == "response.output_text.delta":
            delta = get(API, event, "delta", path, str)
            item = self._item(event, path)
            ci = get(API, event, "content_index", path, int)
            parts = item.setdefault("content", [])
            while len(parts) <= ci:
                parts.append({"type": "output_text", "text": ""})
            parts[ci]["text"] = parts[ci].get("text", "") + delta
            self._text.append(delta)
            return [delta]
        if kind == "response.refusal.delta":
            item = self._item(event, path)
            ci = get(API, event, "content_index", path, int)
            parts = item.setdefault("content", [])
            while len(parts) <= ci:
                parts.append({"type": "refusal", "refusal": ""})
            parts[ci]["refusal"] = (parts[ci].get("refusal") or "") + get(
                API, event, "delta", path, str)
            return []
        if kind == "response.function_call_arguments.delta":
            item = self._item(event, path)
            item["arguments"] = (item.get("arguments") or "") + get(API, event, "delta", path,
                                                                    str)
            return []
        return []  # created, in_progress, content_part.*, *.done texts, reasoning…

    def _item(self, event: Mapping[str, Any], path: str) -> dict[str, Any]:
        index = get(API, event, "output_index", path, int)
        if index not in self._items:
            fail(API, f"{path}.output_index", f"delta for item {index}, which was never added")
        return self._items[index]

    def finish(self) -> ModelOutput:
        if self._final is None:
            open_calls = tuple(str(i.get("call_id") or i.get("name")) for n, i in
                               self._items.items()
                               if i.get("type") == "function_call" and n not in self._done)
            raise IncompleteStream(API, "the stream ended before response.completed",
                                   open_calls)
        items = [self._items[i] for i in sorted(self._items)]
        if not items:  # a stream that only sent the terminal event
            return _output(self._final, get(API, self._final, "output", "$", list), "$.output")
        return _output(self._final, items, "stream.output", tuple(self._text))


__all__ = ["API", "ResponsesStreamParser", "build", "parse_response"]
