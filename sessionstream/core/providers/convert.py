"""Import provider conversations as sessions, and export sessions as provider bodies.

:func:`import_conversation` reads a request body of one of the APIs (or a bare
list of its messages / input items) and writes it as a session through the real rules:
each user message opens a turn (or steers the open one while calls are pending), each
assistant message is one step (``request/header`` + ``assistant/message``), each tool
result becomes ``tool/call`` + ``tool/result`` in that step. The system prompt, the tool
schemas, the model and other request parameters are kept in ``session/start`` under
``imported``, so an export can send them again. Thinking blocks (with their
signatures), Gemini thoughts and Responses reasoning items become the assistant
message's ``reasoning`` (class ``reasoning``), sent back only to the same API, and an
answer's blocks keep their order (``blocks``: interleaved thinking, ADR 0028). Every
field goes by its field table (:mod:`~sessionstream.core.providers.fields`): mapped into
the events, kept verbatim (``provider_fields`` on the message's event: a Chat ``name``,
Responses item ids and statuses), or listed in the report (unknown item types, a field of
a text part); a field of the wrong JSON kind is a ``FieldTypeError`` and a body nested too
deep a ``NestingTooDeep``, both naming the JSON pointer.

:func:`export_session` builds the body for the session's next request with the
builders, and reports what the format could not carry (the builder's notes, plus the
kinds a provider does not know: context snapshots and compaction summaries are sent as
user messages), and puts the kept fields back for the same API (notes them for another).
Both directions keep the surface: importing an exported body gives the same messages,
calls, results and statuses, and exporting an imported body gives it back except what the
report names (tests check it per format and per field table).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.events import (
    FORMAT_VERSION,
    Clock,
    Event,
    IdSource,
    system_clock,
    uuid4_ids,
)
from sessionstream.core.jsonvalue import MAX_DEPTH, thaw
from sessionstream.core.messages import Kind
from sessionstream.core.providers import build, check_api
from sessionstream.core.providers.common import ERROR_PREFIX, Built, Note, Origin
from sessionstream.core.providers.errors import (
    ConversationImportError,
    FieldTypeError,
    NestingTooDeep,
)
from sessionstream.core.providers.fields import (
    MAX_BODY_DEPTH,
    TABLES,
    at,
    check_depth,
    escape,
    kind_of,
    overlay,
    take,
)
from sessionstream.core.providers.gemini import THINKING_LEVELS as GEMINI_LEVELS
from sessionstream.core.providers.gemini import gemini_key
from sessionstream.core.providers.openai_responses import REASONING_KEYS
from sessionstream.core.providers.output import block_order, reasoning_item
from sessionstream.core.providers.rules import GEMINI_SYNTH_PREFIX, from_anthropic_id
from sessionstream.core.request import (
    PromptRegistry,
    RequestHeader,
    Section,
    StaticTools,
    ToolSchema,
    assemble,
    blocks_of,
    context_snapshot_ids,
    header_from_event,
    reasoning_of,
    replaced_seqs,
)
from sessionstream.core.session import Session

#: The REST layout's top-level keys a Gemini import moves into ``config``.
_GEMINI_REST_KEYS = ("systemInstruction", "system_instruction", "tools", "toolConfig",
                     "tool_config", "safetySettings", "safety_settings", "generationConfig",
                     "generation_config", "cachedContent", "cached_content")
#: Body keys the importer maps itself; any other key is kept as a request parameter
#: (a Gemini body's unmapped ``config`` fields are kept as ``params.config``).
_MAPPED = {
    "openai-chat": {"model", "messages", "tools", "max_tokens", "max_completion_tokens",
                    "reasoning_effort"},
    "openai-responses": {"model", "input", "instructions", "tools", "max_output_tokens",
                         "reasoning"},
    "anthropic": {"model", "messages", "system", "tools", "max_tokens"},
    "gemini": {"model", "contents", "config", *_GEMINI_REST_KEYS},
}


@dataclass
class _Conv:
    """A conversation in neutral form, before it is written as events."""

    api: str
    source: str
    items: list[tuple[str, str, Any]] = field(default_factory=list)  # (kind, path, value)
    system: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    report: list[Note] = field(default_factory=list)
    #: fields kept verbatim (field tables), by the path of the item they belong to
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: fields kept verbatim of each tool call, by call id
    kept_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: fields kept verbatim of each text part (None: none), by the item's content path
    kept_parts: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    imported: dict[str, Any] = field(default_factory=dict)  # extra session/start.imported keys

    def fail(self, path: str, reason: str) -> ConversationImportError:
        return ConversationImportError(self.source, path, reason)

    def note(self, path: str, note: str) -> None:
        self.report.append(Note(path, note))

    def wrong_kind(self, path: str, expected: tuple[str, ...], got: str) -> FieldTypeError:
        return FieldTypeError(self.source, path, expected, got)

    def told_apart(self, obj: Mapping[str, Any], path: str, *keys: str) -> None:
        """The keys an object is told apart by (``type``, ``role``) must be text: a wrong
        kind is a FieldTypeError before the object is read as anything."""
        for key in keys:
            if key in obj and not isinstance(obj[key], str):
                raise self.wrong_kind(f"{path}/{key}", ("string",), kind_of(obj[key]))

    def take(self, table: str, obj: Mapping[str, Any], path: str) -> dict[str, Any]:
        """Type-check ``obj`` by its field table; the fields to keep verbatim."""
        tables = TABLES.get(self.api)
        if tables is None or table not in tables:
            return {}
        return take(tables[table], obj, path, self.wrong_kind, self.note,
                    _snake if self.api == "gemini" else str)


@dataclass(frozen=True)
class Imported:
    events: tuple[Event, ...]
    report: tuple[Note, ...]


# ----------------------------------------------------------------------------- reading


def _text_parts(conv: _Conv, content: Any, path: str, text_types: Sequence[str],
                table: str = "part") -> Any:
    """A user/assistant content as log content: a string, or a list of parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise conv.fail(path, f"content must be a string or a list of parts, got "
                        f"{kind_of(content)}")
    parts: list[Any] = []
    kept: list[dict[str, Any] | None] = []
    for i, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise conv.wrong_kind(f"{path}/{i}", ("object",), kind_of(part))
        conv.told_apart(part, f"{path}/{i}", "type")
        if not isinstance(part.get("type"), str):
            raise conv.fail(f"{path}/{i}", "a content part must be an object with a type")
        kept.append(None)
        if part["type"] in text_types:
            kept[-1] = conv.take(table, part, f"{path}/{i}") or None
            if not isinstance(part.get("text"), str):
                raise conv.fail(f"{path}/{i}/text", "a text part needs its text")
            parts.append({"type": "text", "text": part["text"]})
        else:
            parts.append(dict(part))
            conv.note(f"{path}/{i}", f"{part['type']} part kept as it is; the builders "
                      "send non-text parts as JSON text")
    if any(kept):
        conv.kept_parts[path] = kept
    return parts


def _joined(conv: _Conv, content: Any, path: str, what: str, table: str = "part") -> Any:
    """A content the log keeps as one text (system, tool output): its text parts joined;
    a part that is not an object is a FieldTypeError, one without text is noted."""
    if not isinstance(content, list):
        return content
    texts: list[str] = []
    for i, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise conv.wrong_kind(f"{path}/{i}", ("object",), kind_of(part))
        for key in conv.take(table, part, f"{path}/{i}"):
            conv.note(f"{path}/{i}/{key}", f"field {key!r} not imported: the log keeps "
                      f"{what} as one text")
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            conv.note(f"{path}/{i}", f"{part.get('type')} part not imported: the log keeps "
                      f"{what} as one text")
    if len(content) > 1:
        conv.note(path, f"{what} parts joined into one text (the log keeps it as text)")
    return "".join(texts)


def _args(conv: _Conv, text: Any, path: str) -> Any:
    if isinstance(text, Mapping):
        return dict(text)
    if not isinstance(text, str):
        raise conv.fail(path, "tool-call arguments must be a JSON string or an object")
    try:
        value = json.loads(text) if text.strip() else {}
    except RecursionError:
        raise NestingTooDeep(conv.source, path, _ARGS_DEPTH) from None
    except ValueError as exc:
        raise conv.fail(path, f"tool-call arguments are not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise conv.fail(path, "tool-call arguments must be a JSON object")
    check_depth(value, lambda p: NestingTooDeep(conv.source, f"{path} (parsed){p}",
                                                _ARGS_DEPTH), _ARGS_DEPTH)
    return value


#: Nesting of parsed tool-call arguments: they sit three levels deep in
#: ``assistant/message`` (``tool_calls[i].arguments``).
_ARGS_DEPTH = MAX_DEPTH - 3


def _result(text: str) -> tuple[str, str]:
    """(status, content) of a tool output whose format has no error flag."""
    if text.startswith(ERROR_PREFIX):
        return "error", text[len(ERROR_PREFIX):]
    return "ok", text


def _require_str(conv: _Conv, obj: Mapping[str, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise conv.fail(f"{path}/{key}", f"{key} must be a non-empty string")
    return value


def _system(conv: _Conv, path: str, role: Any, text: str) -> None:
    """A system or developer message of the conversation: one system section, with a
    note for what the sections cannot say (role, position, a separate message)."""
    if role == "developer":
        conv.note(path, "developer message imported as a system section (an export sends "
                  "system sections with role system)")
    if conv.items:
        conv.note(path, "system message moved before the conversation (the log keeps "
                  "system sections apart from the messages)")
    if conv.system:
        conv.note(path, "system message imported as one more system section (an export "
                  "sends the sections as one text, joined by a blank line)")
    conv.system.append(text)


def _read_tools(conv: _Conv, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    tools = body.get("tools") or ()
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            raise conv.wrong_kind(f"/tools/{i}", ("object",), kind_of(t))
        out.append((f"/tools/{i}", t))
    return out


def _tool(conv: _Conv, name: str, description: Any, parameters: Any,
          kept: dict[str, Any]) -> None:
    tool = {"name": name, "description": description if description is not None else "",
            "parameters": parameters if parameters is not None else {"type": "object"}}
    if kept:
        tool["provider_fields"] = {"api": conv.api, "fields": kept}
    conv.tools.append(tool)


_REFUSAL = ("refusal imported as the message's content with stop reason refusal (an "
            "export sends it as the content)")


def _read_chat(conv: _Conv, body: Mapping[str, Any]) -> None:
    conv.params.update(conv.take("body", body, ""))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise conv.fail("/messages", "an OpenAI chat body needs a messages list")
    for i, m in enumerate(messages):
        path = f"/messages/{i}"
        if not isinstance(m, Mapping):
            raise conv.fail(path, "a message must be an object")
        conv.told_apart(m, path, "role")
        role = m.get("role")
        if role in ("system", "developer"):
            conv.take("system", m, path)
            text = _joined(conv, m.get("content"), f"{path}/content", "system content")
            if not isinstance(text, str):
                raise conv.fail(f"{path}/content", "system content must be text")
            _system(conv, path, role, text)
        elif role == "user":
            kept = conv.take("user", m, path)
            if kept:
                conv.kept[path] = kept
            conv.items.append(("user", path, _text_parts(conv, m.get("content"),
                                                         f"{path}/content", ("text",))))
        elif role == "assistant":
            kept = conv.take("assistant", m, path)
            if kept:
                conv.kept[path] = kept
            content = m.get("content")
            text = "" if content is None else _text_parts(conv, content, f"{path}/content",
                                                          ("text",))
            calls = []
            for j, tc in enumerate(m.get("tool_calls") or ()):
                p = f"{path}/tool_calls/{j}"
                if not isinstance(tc, Mapping):
                    raise conv.wrong_kind(p, ("object",), kind_of(tc))
                kept_call = conv.take("tool_call", tc, p)
                fn = tc.get("function")
                if not isinstance(fn, Mapping):
                    raise conv.fail(p, "a tool call needs a function object")
                kept_fn = conv.take("call_function", fn, f"{p}/function")
                call_id = _require_str(conv, tc, "id", p)
                if kept_fn:
                    kept_call["function"] = kept_fn
                if kept_call:
                    conv.kept_calls[call_id] = kept_call
                calls.append((call_id, _require_str(conv, fn, "name", f"{p}/function"),
                              _args(conv, fn.get("arguments"), f"{p}/function/arguments")))
            if m.get("refusal"):
                conv.note(path, _REFUSAL)
            conv.items.append(("assistant", path, (text, calls, m.get("refusal"), [], ())))
        elif role == "tool":
            kept = conv.take("tool", m, path)
            if kept:
                conv.kept[path] = kept
            call_id = _require_str(conv, m, "tool_call_id", path)
            content = _joined(conv, m.get("content"), f"{path}/content", "tool content")
            if not isinstance(content, str):
                raise conv.fail(f"{path}/content", "tool content must be text")
            conv.items.append(("result", path, (call_id, *_result(content))))
        else:
            raise conv.fail(f"{path}/role", f"role {role!r} is not one of system, developer, "
                            "user, assistant, tool")
    if body.get("max_completion_tokens") is not None:
        conv.max_tokens = body["max_completion_tokens"]
        if body.get("max_tokens") is not None:
            conv.params["max_tokens"] = body["max_tokens"]  # both given: kept as sent
    else:
        conv.max_tokens = body.get("max_tokens")
        if conv.max_tokens is not None:
            conv.imported["max_tokens_key"] = "max_tokens"  # an export sends it back so
    conv.reasoning_effort = body.get("reasoning_effort")
    for p, t in _read_tools(conv, body):
        kept = conv.take("tools", t, p)
        fn = t.get("function")
        if not isinstance(fn, Mapping):
            raise conv.fail(p, "a tool needs a function object")
        kept_fn = conv.take("tool_function", fn, f"{p}/function")
        if kept_fn:
            kept["function"] = kept_fn
        _tool(conv, _require_str(conv, fn, "name", f"{p}/function"), fn.get("description"),
              fn.get("parameters"), kept)


def _read_responses(conv: _Conv, body: Mapping[str, Any]) -> None:
    conv.params.update(conv.take("body", body, ""))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list):
        raise conv.fail("/input", "a Responses body needs an input string or list")
    if isinstance(body.get("instructions"), str):
        conv.system.append(body["instructions"])
    pending_text: tuple[str, Any] | None = None  # an assistant message waiting for its calls
    calls: list[tuple[str, str, Any]] = []
    calls_path = ""  # the first function_call item of an assistant output without text
    thoughts: list[tuple[str, dict[str, Any]]] = []  # reasoning items before their output

    def flush_assistant() -> None:
        nonlocal pending_text, calls, thoughts
        if pending_text is not None or calls:
            path = pending_text[0] if pending_text else calls_path
            conv.items.append(("assistant", path,
                               (pending_text[1] if pending_text else "", calls, None,
                                [r for _p, r in thoughts], ())))
            thoughts = []
        pending_text, calls = None, []

    def orphan_thoughts() -> None:
        for p, _r in thoughts:
            conv.note(p, "reasoning item not imported: no assistant output follows it")
        thoughts.clear()

    for i, item in enumerate(items):
        path = f"/input/{i}"
        if not isinstance(item, Mapping):
            raise conv.fail(path, "an input item must be an object")
        conv.told_apart(item, path, "type", "role")
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role == "assistant":
            flush_assistant()
            kept = conv.take("assistant", item, path)
            if kept:
                conv.kept[path] = kept
            content = item.get("content")
            refusal = None
            if isinstance(content, list) and any(isinstance(p, Mapping) and
                                                 p.get("type") == "refusal" for p in content):
                refusal = "".join(p.get("refusal", "") for p in content
                                  if isinstance(p, Mapping) and p.get("type") == "refusal")
                content = [p for p in content if p.get("type") != "refusal"] or refusal
                conv.note(f"{path}/content", "refusal imported as the message's content with "
                          "stop reason refusal (an export to Responses sends it back as the "
                          "refusal part it was when the message kept its id; another API "
                          "gets it as the content)")
            pending_text = (path, _text_parts(conv, content, f"{path}/content",
                                              ("output_text", "text")))
            if refusal:
                conv.items.append(("assistant", path, (pending_text[1], [], refusal,
                                                       [r for _p, r in thoughts], ())))
                thoughts.clear()
                pending_text = None
        elif kind == "function_call":
            kept = conv.take("function_call", item, path)
            call_id = _require_str(conv, item, "call_id", path)
            if kept:
                conv.kept_calls[call_id] = kept
            if not calls:
                calls_path = path
            calls.append((call_id, _require_str(conv, item, "name", path),
                          _args(conv, item.get("arguments"), f"{path}/arguments")))
        elif kind == "reasoning":
            flush_assistant()
            conv.take("reasoning_item", item, path)
            _require_str(conv, item, "id", path)
            for key, table in (("summary", "reasoning_summary"),
                               ("content", "reasoning_content")):
                for j, part in enumerate(item.get(key) or ()):
                    if not isinstance(part, Mapping):
                        raise conv.wrong_kind(f"{path}/{key}/{j}", ("object",), kind_of(part))
                    conv.take(table, part, f"{path}/{key}/{j}")
            thoughts.append((path, reasoning_item(conv.api, item, REASONING_KEYS)))
        elif kind == "message" and role in ("system", "developer"):
            flush_assistant()
            orphan_thoughts()
            conv.take("system", item, path)
            text = _joined(conv, item.get("content"), f"{path}/content", "system content")
            _system(conv, path, role, str(text))
        elif kind == "message" and role == "user":
            flush_assistant()
            orphan_thoughts()
            kept = conv.take("user", item, path)
            if kept:
                conv.kept[path] = kept
            conv.items.append(("user", path, _text_parts(conv, item.get("content"),
                                                         f"{path}/content", ("input_text",))))
        elif kind == "function_call_output":
            flush_assistant()
            orphan_thoughts()
            kept = conv.take("function_call_output", item, path)
            if kept:
                conv.kept[path] = kept
            output = item.get("output")
            if not isinstance(output, str):
                raise conv.fail(f"{path}/output", "function_call_output output must be text")
            conv.items.append(("result", path, (_require_str(conv, item, "call_id", path),
                                                *_result(output))))
        else:
            flush_assistant()
            conv.note(path, f"{kind} item not imported: the session log has no event for it")
    flush_assistant()
    orphan_thoughts()
    conv.max_tokens = body.get("max_output_tokens")
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping):
        conv.reasoning_effort = reasoning.get("effort")
        kept = conv.take("reasoning", reasoning, "/reasoning")
        if kept:
            conv.params["reasoning"] = kept  # an export merges it with the effort
    for p, t in _read_tools(conv, body):
        conv.told_apart(t, p, "type")
        if t.get("type") != "function":  # a built-in tool: kept for the same API
            conv.imported.setdefault("other_tools", []).append({"at": int(p.rsplit("/", 1)[1]),
                                                                "tool": dict(t)})
            continue
        kept = conv.take("tools", t, p)
        _tool(conv, _require_str(conv, t, "name", p), t.get("description"),
              t.get("parameters"), kept)


def _user_run(conv: _Conv, path: str, parts: list[Any], kept: list[dict[str, Any] | None],
              whole: bool) -> None:
    """One user item of an Anthropic user message's blocks (between tool results); a
    message of one text block is a string."""
    if not parts:
        return
    single = parts[0]["text"] if whole and len(parts) == 1 and parts[0].get("type") == \
        "text" else parts
    conv.items.append(("user", path, single))
    if any(kept):
        conv.kept_parts[f"{path}/content"] = kept


def _read_anthropic(conv: _Conv, body: Mapping[str, Any]) -> None:
    conv.params.update(conv.take("body", body, ""))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise conv.fail("/messages", "an Anthropic body needs a messages list")
    system = body.get("system")
    if isinstance(system, str):
        conv.system.append(system)
    elif isinstance(system, list):
        for i, b in enumerate(system):
            if not isinstance(b, Mapping):
                raise conv.wrong_kind(f"/system/{i}", ("object",), kind_of(b))
            conv.told_apart(b, f"/system/{i}", "type")
            kept = conv.take("system", b, f"/system/{i}")
            if b.get("type") != "text":
                conv.note(f"/system/{i}", f"system block of type {b.get('type')!r} not "
                          "imported: system sections are text")
                continue
            if kept:  # by section number: an export finds the block by its section
                conv.imported.setdefault("system_fields", {})[str(len(conv.system))] = kept
            conv.system.append(b["text"])
    for i, m in enumerate(messages):
        path = f"/messages/{i}"
        if isinstance(m, Mapping):
            conv.told_apart(m, path, "role")
        if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant"):
            raise conv.fail(path, "a message must be an object with role user or assistant")
        conv.take("message", m, path)
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if m["role"] == "assistant" else content
            if isinstance(content, str):
                conv.items.append(("user", path, content))
                continue
        if not isinstance(content, list):
            raise conv.fail(f"{path}/content", "content must be a string or a list of blocks")
        if m["role"] == "assistant":
            texts: list[Any] = []
            text_kept: list[dict[str, Any] | None] = []
            calls: list[tuple[str, str, Any]] = []
            thinking: list[dict[str, Any]] = []
            order: list[str] = []  # the blocks' kinds as received (interleaved thinking)
            for j, block in enumerate(content):
                p = f"{path}/content/{j}"
                if not isinstance(block, Mapping):
                    raise conv.wrong_kind(p, ("object",), kind_of(block))
                conv.told_apart(block, p, "type")
                kind = block.get("type")
                if kind == "thinking":
                    conv.take("thinking", block, p)
                    _require_str(conv, block, "signature", p)
                    _require_str(conv, block, "thinking", p)
                    thinking.append(reasoning_item(conv.api, block,
                                                   ("type", "thinking", "signature")))
                    order.append("reasoning")
                elif kind == "redacted_thinking":
                    conv.take("redacted_thinking", block, p)
                    _require_str(conv, block, "data", p)
                    thinking.append(reasoning_item(conv.api, block, ("type", "data")))
                    order.append("reasoning")
                elif kind == "text":
                    text_kept.append(conv.take("text", block, p) or None)
                    if not isinstance(block.get("text"), str):
                        raise conv.fail(f"{p}/text", "a text block needs its text")
                    texts.append({"type": "text", "text": block["text"]})
                    order.append("text")
                elif kind == "tool_use":
                    kept = conv.take("tool_use", block, p)
                    call_id = from_anthropic_id(_require_str(conv, block, "id", p))
                    if kept:
                        conv.kept_calls[call_id] = kept
                    calls.append((call_id, _require_str(conv, block, "name", p),
                                  _args(conv, block.get("input", {}), f"{p}/input")))
                    order.append("call")
                else:
                    conv.note(p, f"{kind} block not imported: the session log has no event "
                              "for it")
            text: Any = texts[0]["text"] if len(texts) == 1 else texts
            if any(text_kept):
                conv.kept_parts[f"{path}/content"] = text_kept
            conv.items.append(("assistant", path, (text if texts else "", calls, None,
                                                   thinking, block_order(order))))
            continue
        others: list[Any] = []
        others_kept: list[dict[str, Any] | None] = []
        run = path  # a run of blocks after a tool_result is an item of its own
        for j, block in enumerate(content):
            p = f"{path}/content/{j}"
            if not others:
                run = path if j == 0 else p
            if not isinstance(block, Mapping):
                raise conv.wrong_kind(p, ("object",), kind_of(block))
            conv.told_apart(block, p, "type")
            if block.get("type") == "tool_result":
                kept = conv.take("tool_result", block, p)
                if kept:
                    conv.kept[p] = kept
                _user_run(conv, run, others, others_kept, len(content) == 1)
                others, others_kept = [], []
                result = block.get("content", "")
                if isinstance(result, list):
                    if all(isinstance(b, Mapping) and b.get("type") == "text" for b in result):
                        result = _joined(conv, result, f"{p}/content", "tool_result text",
                                         "text")
                    else:
                        conv.note(p, "non-text tool_result blocks kept as a list")
                status = "error" if block.get("is_error") else "ok"
                conv.items.append(("result", p, (from_anthropic_id(
                    _require_str(conv, block, "tool_use_id", p)), status, result)))
            elif block.get("type") == "text":
                others_kept.append(conv.take("text", block, p) or None)
                if not isinstance(block.get("text"), str):
                    raise conv.fail(f"{p}/text", "a text block needs its text")
                others.append({"type": "text", "text": block["text"]})
            else:
                if not isinstance(block.get("type"), str):
                    raise conv.fail(p, "a content block must be an object with a type")
                others_kept.append(None)
                others.append(dict(block))
                conv.note(p, f"{block['type']} part kept as it is; the builders send "
                          "non-text parts as JSON text")
        _user_run(conv, run, others, others_kept, len(content) == 1)
    conv.max_tokens = body.get("max_tokens")
    for p, t in _read_tools(conv, body):
        if "input_schema" not in t:  # a server tool: kept for the same API
            conv.imported.setdefault("other_tools", []).append({"at": int(p.rsplit("/", 1)[1]),
                                                                "tool": dict(t)})
            continue
        kept = conv.take("tools", t, p)
        _tool(conv, _require_str(conv, t, "name", p), t.get("description"),
              t["input_schema"], kept)


def _snake(key: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in key)


def _signature(conv: _Conv, value: Any, path: str) -> str | None:
    """A part's thought signature (bytes as base64 text, type-checked by the tables) in
    the canonical padded form the SDK writes; a different spelling is noted."""
    if value is None:
        return None
    canonical = base64.b64encode(base64.b64decode(value + "=" * (-len(value) % 4))).decode()
    if canonical != value:
        conv.note(path, "thought signature written as canonical base64 (the same bytes, "
                  "padded as the SDK writes them)")
    return canonical


def _gemini_system(conv: _Conv, system: Any, path: str) -> None:
    """``system_instruction``: a string, a Content, or a list of parts / strings."""
    if system is None:
        return
    if isinstance(system, str):
        conv.system.append(system)
        return
    if isinstance(system, Mapping):
        conv.take("content", system, path)
        parts, path = system.get(gemini_key(system, "parts")), f"{path}/parts"
        if not isinstance(parts, list):
            raise conv.wrong_kind(path, ("array",), kind_of(parts))
    else:
        parts = system
        conv.note(path, "system instruction as a list read as its parts: an export writes "
                  "a Content of text parts")
    for i, part in enumerate(parts):
        if isinstance(part, str):
            conv.system.append(part)
            continue
        if not isinstance(part, Mapping):
            raise conv.wrong_kind(f"{path}/{i}", ("object", "string"), kind_of(part))
        conv.take("system", part, f"{path}/{i}")
        text = part.get(gemini_key(part, "text"))
        if isinstance(text, str):
            conv.system.append(text)
        else:
            conv.note(f"{path}/{i}", "system instruction part without text not imported: "
                      "system sections are text")


def _gemini_model(conv: _Conv, i: int, parts: list[Any], path: str) -> None:
    """A ``model`` content: thoughts, text, calls and signatures, in the order received."""
    def k(obj: Any, key: str) -> Any:
        return obj.get(gemini_key(obj, key)) if isinstance(obj, Mapping) else None

    def answer_text(part: Any) -> bool:
        return isinstance(part, Mapping) and not k(part, "thought") and \
            not isinstance(k(part, "function_call"), Mapping) and bool(k(part, "text"))

    has_text = any(answer_text(part) for part in parts)
    texts: list[Any] = []
    calls: list[tuple[str, str, Any]] = []
    reasoning: list[dict[str, Any]] = []
    order: list[str] = []

    def text_signature(sig: str, index: int | None) -> None:
        item: dict[str, Any] = {"api": conv.api, "type": "signature", "anchor": "text",
                                "thought_signature": sig}
        if index is not None:
            item["index"] = index
        reasoning.append(item)

    for j, part in enumerate(parts):
        p = f"{path}/parts/{j}"
        if not isinstance(part, Mapping):
            raise conv.wrong_kind(p, ("object",), kind_of(part))
        fc = k(part, "function_call")
        text = k(part, "text")
        if gemini_key(part, "function_call") not in part and gemini_key(part, "text") not in part:
            conv.note(p, "part not imported: the session log has no event for it")
            continue
        conv.take("model_part", part, p)
        sig = _signature(conv, k(part, "thought_signature"),
                         f"{p}/{gemini_key(part, 'thought_signature')}")
        if fc is not None:
            fp = f"{p}/{gemini_key(part, 'function_call')}"
            conv.take("function_call", fc, fp)
            name = _require_str(conv, fc, gemini_key(fc, "name"), fp)
            call_id = k(fc, "id") or f"{GEMINI_SYNTH_PREFIX}{i}-{len(calls)}"
            if sig:
                reasoning.append({"api": conv.api, "type": "signature", "anchor": "call",
                                  "index": len(calls), "thought_signature": sig})
            calls.append((call_id, name, _args(conv, k(fc, "args") or {},
                                               f"{fp}/{gemini_key(fc, 'args')}")))
            order.append("call")
        elif k(part, "thought"):
            item = {"api": conv.api, "type": "thought", "text": text}
            if sig:
                item["thought_signature"] = sig
            reasoning.append(item)
            order.append("reasoning")
        elif text:
            if sig:
                text_signature(sig, len(texts))
            texts.append({"type": "text", "text": text})
            order.append("text")
        elif sig and not has_text:  # a signature alone, where the answer has no text
            if "text" in order:
                conv.note(p, "a second thought signature on an empty text part not "
                          "imported: the log keeps one where the answer has no text")
                continue
            text_signature(sig, None)
            order.append("text")
        elif sig:
            target = max(len(texts) - 1, 0)
            if any(r.get("anchor") == "text" and r.get("index") == target for r in reasoning):
                conv.note(p, "thought signature of an empty text part not imported: the text "
                          "part it would go on has its own")
                continue
            text_signature(sig, target)
            conv.note(p, "thought signature of an empty text part: an export sends it on "
                      "the text part " + ("before" if texts else "after") + " it")
        else:
            conv.note(p, "empty text part not imported (Gemini refuses empty parts)")
    last = len(texts) - 1
    for r in reasoning:  # the last text part's signature needs no index (the log's default)
        if r.get("anchor") == "text" and r.get("index") == last:
            del r["index"]
    content: Any = texts[0]["text"] if len(texts) == 1 else texts
    conv.items.append(("assistant", path, (content if texts else "", calls, None, reasoning,
                                           block_order(order))))


def _read_gemini(conv: _Conv, body: Mapping[str, Any]) -> None:
    """A generateContent body in the builder's (the SDK's) form; camelCase keys are read
    too (an export writes snake_case). Every field goes by the Gemini field tables:
    a wrong JSON kind is a FieldTypeError naming the pointer as the body spells it."""
    def k(obj: Any, key: str) -> Any:
        return obj.get(gemini_key(obj, key)) if isinstance(obj, Mapping) else None

    conv.params.update(conv.take("body", body, ""))
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise conv.fail("/contents", "a Gemini body needs a contents list")
    config: Mapping[str, Any] = body.get("config") or {}
    conv.take("config", config, "/config")
    where = {_snake(key): f"/config/{key}" for key in config}
    rest_layout = [key for key in _GEMINI_REST_KEYS if key in body]
    if rest_layout:  # the REST request: its generation config and tools sit at the top
        gen_key = next((key for key in ("generationConfig", "generation_config")
                        if key in body), None)
        generation = body.get(gen_key) or {} if gen_key else {}
        if gen_key:
            conv.take("config", generation, f"/{gen_key}")
        where.update({_snake(key): f"/{gen_key}/{key}" for key in generation})
        where.update({_snake(key): f"/{key}" for key in rest_layout
                      if not key.startswith("generation")})
        config = {**config, **generation, **{key: body[key] for key in rest_layout
                                             if not key.startswith("generation")}}
        for key in rest_layout:
            conv.note(f"/{key}", f"REST layout read: {key} goes into config (an export "
                      "writes the SDK form)")
        conv.note("/config", "REST layout read: an export writes the SDK form, with the "
                  "top-level keys in config")
    config = {_snake(key): v for key, v in config.items()}  # the SDK form's spelling
    thinking = config.get("thinking_config")
    if isinstance(thinking, Mapping):
        conv.take("thinking_config", thinking, where["thinking_config"])
        config["thinking_config"] = {_snake(key): v for key, v in thinking.items()}
    _gemini_system(conv, config.get("system_instruction"),
                   where.get("system_instruction", "/config/system_instruction"))
    pending: list[tuple[str, str]] = []  # (call id, name) of the last model content
    for i, content in enumerate(contents):
        path = f"/contents/{i}"
        if not isinstance(content, Mapping):
            raise conv.wrong_kind(path, ("object",), kind_of(content))
        conv.take("content", content, path)
        if content.get("role") not in ("user", "model"):
            raise conv.fail(f"{path}/role", "a content's role must be user or model")
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise conv.fail(f"{path}/parts", "parts must be a list")
        if content["role"] == "model":
            _gemini_model(conv, i, parts, path)
            pending = [(c, n) for c, n, _a in conv.items[-1][2][1]]
            continue
        others: list[Any] = []
        for j, part in enumerate(parts):
            p = f"{path}/parts/{j}"
            if not isinstance(part, Mapping):
                raise conv.wrong_kind(p, ("object",), kind_of(part))
            fr = k(part, "function_response")
            if gemini_key(part, "function_response") in part or gemini_key(part, "text") in part:
                conv.take("user_part", part, p)
            if fr is not None:
                fp = f"{p}/{gemini_key(part, 'function_response')}"
                conv.take("function_response", fr, fp)
                name = _require_str(conv, fr, gemini_key(fr, "name"), fp)
                call_id = k(fr, "id") or next((c for c, n in pending if n == name), None)
                if call_id is None:
                    raise conv.fail(p, f"a function response {name!r} without its call in "
                                    "the model content before it")
                pending = [(c, n) for c, n in pending if c != call_id]
                response = k(fr, "response")
                if isinstance(response, Mapping) and len(response) == 1 and (
                        "output" in response or "error" in response):
                    status = "error" if "error" in response else "ok"
                    result = response.get("output", response.get("error"))
                else:
                    status, result = "ok", response
                    conv.note(p, "a response object without a single output or error key "
                              "kept whole as the result: an export sends it under output")
                conv.items.append(("result", p, (call_id, status, result)))
            elif isinstance(k(part, "text"), str):
                others.append({"type": "text", "text": k(part, "text")})
            else:
                others.append(dict(part))
                conv.note(p, "non-text part kept as it is; the builders send non-text parts "
                          "as JSON text")
        if others:
            single = others[0]["text"] if len(others) == 1 and others[0].get("type") == \
                "text" else others
            conv.items.append(("user", path, single))
    conv.max_tokens = config.get("max_output_tokens")
    rest = {key: v for key, v in config.items()
            if key not in ("max_output_tokens", "system_instruction", "tools")}
    thinking = rest.get("thinking_config")
    level = k(thinking, "thinking_level")
    if isinstance(thinking, Mapping) and len(thinking) == 1 and isinstance(level, str) and \
            level.lower() in GEMINI_LEVELS:
        conv.reasoning_effort = level.lower()  # the builder sends it back as this level
        del rest["thinking_config"]
    if rest:
        conv.params["config"] = rest
    tools_path = where.get("tools", "/config/tools")
    for i, t in enumerate(config.get("tools") or ()):
        if not isinstance(t, Mapping):
            raise conv.wrong_kind(f"{tools_path}/{i}", ("object",), kind_of(t))
        decls = k(t, "function_declarations")
        if not isinstance(decls, list) or len(t) != 1:
            conv.note(f"{tools_path}/{i}", "a tool other than function declarations is not "
                      "imported")
        for j, d in enumerate(decls if isinstance(decls, list) else ()):
            p = f"{tools_path}/{i}/{gemini_key(t, 'function_declarations')}/{j}"
            if not isinstance(d, Mapping):
                raise conv.wrong_kind(p, ("object",), kind_of(d))
            conv.take("declaration", d, p)
            params = k(d, "parameters_json_schema")
            if params is None and k(d, "parameters") is not None:
                params = k(d, "parameters")
                conv.note(p, "parameters (an OpenAPI schema) imported as the tool's JSON "
                          "schema: an export sends it as parameters_json_schema")
            conv.tools.append({"name": _require_str(conv, d, "name", p),
                               "description": k(d, "description") or "",
                               "parameters": params if params is not None else
                               {"type": "object"}})


_READERS = {"openai-chat": _read_chat, "openai-responses": _read_responses,
            "anthropic": _read_anthropic, "gemini": _read_gemini}


# ----------------------------------------------------------------------------- writing


def import_conversation(api: str, body: Any, *, session_id: str, source: str = "<input>",
                        tenant: str = "default", clock: Clock = system_clock,
                        ids: IdSource = uuid4_ids) -> Imported:
    """Write ``body`` (an ``api`` request body, or a list of its messages) as a session."""
    check_api(api)
    conv = _Conv(api, source)
    if isinstance(body, list):
        key = {"openai-responses": "input", "gemini": "contents"}.get(api, "messages")
        body = {key: body}
    if not isinstance(body, Mapping):
        raise conv.fail("/", f"expected a request body object or a message list, got "
                        f"{kind_of(body)}")
    check_depth(body, lambda path: NestingTooDeep(source, path, MAX_BODY_DEPTH))
    _READERS[api](conv, body)
    model = body.get("model")
    conv.model = model if isinstance(model, str) else None
    conv.params = {**{k: v for k, v in body.items() if k not in _MAPPED[api]}, **conv.params}
    session = Session(session_id, clock=clock, ids=ids)
    imported: dict[str, Any] = {"format": api, "system": conv.system, "tools": conv.tools,
                                "model": conv.model, "max_tokens": conv.max_tokens,
                                "reasoning_effort": conv.reasoning_effort,
                                "params": conv.params, **conv.imported}
    session.append("session/start", {"format_version": FORMAT_VERSION, "tenant": tenant,
                                     "lineage": None, "imported": imported})
    _write(conv, session)
    return Imported(session.events, tuple(conv.report))


def _provider_fields(conv: _Conv, path: str, call_ids: Sequence[str] = ()) -> dict[str, Any]:
    """``provider_fields`` of the event written for the item at ``path``: the fields the
    field tables keep verbatim, with the API they belong to (empty when there are none)."""
    out: dict[str, Any] = {}
    if conv.kept.get(path):
        out["fields"] = conv.kept[path]
    calls = {c: conv.kept_calls[c] for c in call_ids if conv.kept_calls.get(c)}
    if calls:
        out["calls"] = calls
    if conv.kept_parts.get(f"{path}/content"):
        out["parts"] = conv.kept_parts[f"{path}/content"]
    return {"provider_fields": {"api": conv.api, **out}} if out else {}


def _write(conv: _Conv, s: Session) -> None:
    header: dict[str, Any] = {"provider": "imported", "model": conv.model or "unknown",
                              "api": conv.api}
    if conv.max_tokens is not None:
        header["max_tokens"] = conv.max_tokens
    if conv.reasoning_effort is not None:
        header["reasoning_effort"] = conv.reasoning_effort
    declared: dict[str, tuple[str, Any]] = {}  # unanswered calls of the open step
    answered: set[str] = set()
    last_answered = False  # the last item was an assistant message without calls
    refused = False
    for kind, path, value in conv.items:
        if kind == "user":
            if s.open_turn is not None and not declared and last_answered:
                s.append("step/end")
                s.append("turn/end", {"reason": "refused" if refused else "completed"})
            steering = s.open_turn is not None
            if s.open_turn is None:
                s.append("turn/start")
            s.append("user/message", {"content": value, **({"steering": True}
                                                            if steering else {}),
                                      **_provider_fields(conv, path)})
            last_answered = False
        elif kind == "assistant":
            text, calls, refusal, reasoning, blocks = value
            if declared:
                raise conv.fail(path, f"an assistant message while tool call(s) "
                                f"{', '.join(sorted(declared))} have no result")
            if s.open_turn is None:
                s.append("turn/start")
            if s.open_step is not None:
                s.append("step/end")
            s.append("step/start")
            s.append("request/header", header)
            data: dict[str, Any] = {
                "content": text if text or not refusal else refusal,
                "tool_calls": [{"call_id": c, "name": n, "arguments": a} for c, n, a in calls],
                "stop_reason": "refusal" if refusal else ("tool_use" if calls else "end_turn"),
                "provider": "imported", "api": conv.api,
            }
            if refusal:
                data["refusal"] = refusal
            if reasoning:
                data["reasoning"] = reasoning
            if blocks:
                data["blocks"] = list(blocks)
            data.update(_provider_fields(conv, path, [c for c, _n, _a in calls]))
            for c, _n, _a in calls:
                if c in declared or c in answered:
                    raise conv.fail(path, f"call id {c!r} is used twice")
            s.append("assistant/message", data)
            declared = {c: (n, a) for c, n, a in calls}
            last_answered = not calls
            refused = bool(refusal)
        else:
            call_id, status, content = value
            if call_id not in declared:
                why = "was already answered" if call_id in answered else \
                    "no earlier assistant message made"
                raise conv.fail(path, f"a tool result for call {call_id!r}, which {why}")
            name, args = declared.pop(call_id)
            s.append("tool/call", {"call_id": call_id, "name": name, "arguments": args})
            s.append("tool/result", {"call_id": call_id, "status": status, "content": content,
                                     **_provider_fields(conv, path)})
            answered.add(call_id)
            last_answered = False
    if declared:
        raise conv.fail("/", f"tool call(s) {', '.join(sorted(declared))} have no result: a "
                        "provider rejects such a conversation")
    if s.open_step is not None:
        s.append("step/end")
    if s.open_turn is not None and last_answered:
        s.append("turn/end", {"reason": "refused" if refused else "completed"})


# ----------------------------------------------------------------------------- export


def export_session(api: str, events: Sequence[Event], *, registry: PromptRegistry | None = None,
                   tools: Iterable[ToolSchema] | None = None,
                   header: RequestHeader | None = None) -> tuple[Built, tuple[Note, ...]]:
    """The ``api`` body of the session's next request, and what the format cannot carry.

    System sections and tools default to what an import recorded in ``session/start``;
    the header defaults to the log's last ``request/header``.
    """
    check_api(api)
    report: list[Note] = []
    imported = events[0].data.get("imported") if events else None
    imported = thaw(imported) if imported is not None else {}
    from_registry = registry is None
    if registry is None:
        registry = PromptRegistry(Section(f"imported-{i}", text.replace("{", "{{").replace(
            "}", "}}"), order=i) for i, text in enumerate(imported.get("system") or ()))
        if not imported.get("system"):
            report.append(Note("/", "no system prompt: the log carries none (a harness "
                               "registers its prompt sections; pass them to export)"))
    from_import = tools is None
    if tools is None:
        tools = [ToolSchema(t["name"], t.get("description", ""), t.get("parameters",
                                                                       {"type": "object"}))
                 for t in imported.get("tools") or ()]
    if header is None:
        last = next((e for e in reversed(events) if e.type == "request/header"), None)
        if last is not None:
            header = header_from_event(last)
        else:
            header = RequestHeader("imported", imported.get("model") or "unknown",
                                   imported.get("reasoning_effort"), imported.get("max_tokens"))
            if not imported.get("model"):
                report.append(Note("/model", "no request/header in the log: model unknown"))
    session = Session.from_events(events)
    messages = session.derive_messages()
    request = assemble(messages, registry, header=header,
                       providers=[StaticTools("export", list(tools))],
                       snapshot_ids=context_snapshot_ids(events), replaced=replaced_seqs(events),
                       reasoning=reasoning_of(events), blocks=blocks_of(events))
    params = imported.get("params") or {}
    options: dict[str, Any] = {}
    if imported.get("format") == api == "anthropic" and isinstance(params.get("thinking"),
                                                                    Mapping):
        options["thinking"] = params["thinking"]  # the builder checks the open round
    if imported.get("format") == api == "gemini" and isinstance(
            (params.get("config") or {}).get("thinking_config"), Mapping):
        options["thinking"] = params["config"]["thinking_config"]
    built = build(api, request, **options)
    origins = list(built.origins)
    same = imported.get("format") == api
    if params and same:  # the builder decides on its options (thinking may go off)
        _carry_params(built.body, {k: v for k, v in params.items() if k not in options},
                      origins)
    else:
        report += [Note(f"/{k}", f"request parameter {k!r} of {imported.get('format')} is "
                        f"not carried into {api}") for k in params]
    if (same and imported.get("max_tokens_key") == "max_tokens"
            and "max_completion_tokens" in built.body and "max_tokens" not in built.body):
        # Chat has two names for it: the import's body used the older one
        built.body["max_tokens"] = built.body.pop("max_completion_tokens")
        origins = [Origin("/max_tokens", o.source) if o.path == "/max_completion_tokens"
                   else o for o in origins]
    if from_import:
        _carry_tools(api, imported, built, report, origins)
    built = Built(built.api, built.body, tuple(origins), built.notes)
    if from_registry:
        _carry_system(api, imported, built, report)
    _carry_fields(api, events, built, report)
    for m in messages:
        if m.kind is Kind.CONTEXT:
            report.append(Note("", "context snapshot sent as a user message (its snapshot "
                               "id is not carried)", m.seqs))
        elif m.kind is Kind.SUMMARY:
            report.append(Note("", "compaction summary sent as a user message (the range it "
                               "replaced is not carried)", m.seqs))
    return built, tuple(built.notes) + tuple(report)


#: The origin of what an export takes from ``session/start.imported`` (seq 0).
_IMPORTED = {"part": "imported", "seqs": [0]}


def _carry_params(body: dict[str, Any], params: Mapping[str, Any],
                  origins: list[Origin]) -> None:
    """Put the imported request parameters back, each with its origin (a parameter
    merged into an object the builder made, e.g. Gemini's ``config``, key by key)."""
    merged = {k for k, v in params.items() if isinstance(v, Mapping)
              and isinstance(body.get(k), dict)}
    overlay(body, params)
    known = {o.path for o in origins}
    for key, value in params.items():
        paths = [(f"/{escape(key)}/{escape(sub)}", f"{key}.{sub}") for sub in value] \
            if key in merged else [(f"/{escape(key)}", key)]
        origins += [Origin(path, {**_IMPORTED, "param": name}) for path, name in paths
                    if path not in known]


def _carry_fields(api: str, events: Sequence[Event], built: Built, report: list[Note]) -> None:
    """Put each message's, call's and result's kept fields back where the builder put
    them (same API), or note them (another API)."""
    by_seq = {e.seq: e for e in events}
    for o in built.origins:
        part, seqs = o.source.get("part"), o.source.get("seqs") or ()
        event = by_seq.get(seqs[0]) if part in ("message", "tool_call") and seqs else None
        if event is None:
            continue
        carried = event.data.get("provider_fields")
        if not isinstance(carried, Mapping) or not isinstance(carried.get("api"), str):
            continue  # none, or sealed (a placeholder)
        kept = carried.get("fields") if part == "message" else \
            (carried.get("calls") or {}).get(o.source.get("call_id"))
        target = at(built.body, o.path)
        same = carried["api"] == api and isinstance(target, dict)
        if isinstance(kept, Mapping) and kept:
            if same:
                overlay(target, kept)
            else:
                report.append(Note(o.path, f"field(s) {', '.join(sorted(kept))} of "
                                   f"{carried['api']} not carried into {api}", tuple(seqs)))
        parts = carried.get("parts") if part == "message" else None
        if isinstance(parts, Sequence) and any(parts):
            lost = _carry_parts(target, event.data.get("content"), parts) if same else \
                sorted({k for p in parts if isinstance(p, Mapping) for k in p})
            if lost:
                report.append(Note(o.path, f"text-part field(s) {', '.join(lost)} of "
                                   f"{carried['api']} not carried into {api}", tuple(seqs)))
        if same and api == "openai-responses" and part == "message" and \
                target.get("role") == "assistant" and "id" in target:
            _output_message(target, event.data, report, o.path, tuple(seqs))


def _output_message(target: dict[str, Any], data: Mapping[str, Any], report: list[Note],
                    path: str, seqs: tuple[int, ...]) -> None:
    """A Responses assistant message that keeps its item id is an output message, whose
    content the SDK's types want as ``output_text`` and ``refusal`` parts: a refusal
    goes back as the refusal part it came as, a string content as one text part."""
    refusal = data.get("refusal")
    content = target.get("content")
    if isinstance(content, str):
        if isinstance(refusal, str) and content == refusal:
            target["content"] = [{"type": "refusal", "refusal": refusal}]
            return
        target["content"] = [{"type": "output_text", "text": content, "annotations": []}]
        report.append(Note(f"{path}/content", "content sent as one output_text part: an "
                           "assistant message with an item id is an output message", seqs))
    elif isinstance(content, list) and isinstance(refusal, str) and refusal:
        content.append({"type": "refusal", "refusal": refusal})


def _carry_parts(target: Any, content: Any, parts: Sequence[Any]) -> list[str]:
    """Put kept text-part fields back on the built text blocks, pairing the log's text
    parts with them in order by their text (a builder may omit a blank one or put
    reasoning first); the names of the fields that found no block."""
    blocks = target.get("content") if isinstance(target, dict) else None
    blocks = [b for b in blocks if isinstance(b, dict) and b.get("type") in (
        "text", "input_text", "output_text")] if isinstance(blocks, list) else []
    texts = [content] if isinstance(content, str) else [
        p.get("text") if isinstance(p, Mapping) else None for p in content or ()]
    lost: set[str] = set()
    pos = 0
    for text, kept in zip(texts, parts, strict=False):
        found = next((i for i in range(pos, len(blocks)) if blocks[i].get("text") == text),
                     None) if text is not None else None
        if found is not None:
            pos = found + 1
        if not isinstance(kept, Mapping):
            continue
        if found is None:
            lost.update(kept)
        else:
            overlay(blocks[found], kept)
    return sorted(lost)


def _carry_system(api: str, imported: Mapping[str, Any], built: Built,
                  report: list[Note]) -> None:
    """Kept fields of imported system blocks (e.g. ``cache_control``), by section."""
    kept = imported.get("system_fields") or {}
    if not kept:
        return
    placed: set[str] = set()
    if imported.get("format") == api:
        for o in built.origins:
            for section in o.source.get("sections") or () if o.source.get("part") == "system" \
                    else ():
                number = section.removeprefix("imported-")
                target = at(built.body, o.path)
                if number in kept and isinstance(target, dict) and len(
                        o.source["sections"]) == 1:
                    overlay(target, kept[number])
                    placed.add(number)
    for number in sorted(set(kept) - placed, key=int):
        report.append(Note("/system", f"field(s) {', '.join(sorted(kept[number]))} of system "
                           f"section {number} ({imported.get('format')}) not carried into "
                           f"{api}"))


def _carry_tools(api: str, imported: Mapping[str, Any], built: Built,
                 report: list[Note], origins: list[Origin]) -> None:
    """Kept fields of the imported tool schemas (e.g. ``strict``), by tool name, and the
    built-in tools the builders do not know, at their place."""
    sent = {(t.get("function") or {}).get("name") if api == "openai-chat" else t.get("name"): t
            for t in built.body.get("tools") or ()}
    for t in imported.get("tools") or ():
        carried = t.get("provider_fields")
        if not isinstance(carried, Mapping) or not carried.get("fields"):
            continue
        target = sent.get(t["name"])
        if carried.get("api") == api and target is not None:
            overlay(target, carried["fields"])
        else:
            report.append(Note("/tools", f"field(s) {', '.join(sorted(carried['fields']))} "
                               f"of tool {t['name']!r} ({carried.get('api')}) not carried "
                               f"into {api}"))
    for other in imported.get("other_tools") or ():
        if imported.get("format") == api:
            tools = built.body.setdefault("tools", [])
            at_index = min(other["at"], len(tools))
            tools.insert(at_index, thaw(other["tool"]))
            origins[:] = [_shifted(o, at_index) for o in origins]
            origins.append(Origin(f"/tools/{at_index}", {**_IMPORTED, "tool": other[
                "tool"].get("type")}))
        else:
            report.append(Note("/tools", f"built-in tool {other['tool'].get('type')!r} of "
                               f"{imported.get('format')} not carried into {api}"))


def _shifted(o: Origin, inserted: int) -> Origin:
    """``o`` after a tool was inserted at ``/tools/<inserted>`` (later tools move up)."""
    head, _, rest = o.path.removeprefix("/tools/").partition("/")
    if not o.path.startswith("/tools/") or not head.isdigit() or int(head) < inserted:
        return o
    return Origin(f"/tools/{int(head) + 1}" + (f"/{rest}" if rest else ""), o.source)


def surface_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The surface as a format can carry it: role, content, calls, results, status."""
    out = []
    for m in Session.from_events(events).derive_messages():
        entry: dict[str, Any] = {"role": m.role.value, "content": thaw(m.content)}
        if m.tool_calls:
            entry["tool_calls"] = [(c.call_id, c.name, thaw(c.arguments)) for c in m.tool_calls]
        if m.call_id is not None:
            entry["call_id"] = m.call_id
            entry["status"] = m.status
        out.append(entry)
    return out
