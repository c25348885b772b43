"""The field tables of import and export: what happens to every field of a request body.

One :class:`Table` per kind of object in a body of each API (the body itself, a message or
input item of one role or type, a content block, a tool, a tool call). A field is

* **mapped**: the importer translates it into the log's own events (content, calls,
  results, the header, system sections, tool schemas), and every builder sends it;
* **kept**: stored verbatim beside the event it belongs to (``provider_fields`` on
  ``user/message``, ``assistant/message`` and ``tool/result``; ``params`` and the tool
  entries in ``session/start.imported``) and sent back, where it was, by an export to the
  same API; an export to another API notes each one;
* **noted**: the log has no place for it (a field of a system message, or of a part the
  log joins into one text): the import report names it.

A field a table does not name is handled by the table's ``rest``: kept where the object is
one event's own or one of its text parts (a provider adds fields faster than these
tables), noted where it is not.
Every named field has the JSON kinds it accepts; :func:`take` checks them, so a wrong kind
is a :class:`~sessionstream.core.providers.errors.FieldTypeError` naming the JSON pointer,
never a body that no provider accepts. :func:`check_depth` bounds the nesting first.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.jsonvalue import MAX_DEPTH, thaw

#: Nesting a body may have: the log nests a body's values at most two levels deeper
#: (``imported.params.<key>`` for a top-level key), and event data stops at MAX_DEPTH.
MAX_BODY_DEPTH = MAX_DEPTH - 2

_NULL = ("null",)


@dataclass(frozen=True)
class Table:
    """The fields of one kind of object: JSON kinds of the mapped and kept ones, and what
    happens to a field it does not name (``rest``: "kept" or "noted")."""

    where: str
    mapped: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kept: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    rest: str = "kept"


def _params(**kinds: str) -> dict[str, tuple[str, ...]]:
    """Request parameters kept verbatim; the SDKs accept null for each of them."""
    return {k: (*v.split("|"), "null") for k, v in kinds.items()}


_CHAT_PARAMS = _params(
    stream="boolean", stream_options="object", temperature="number", top_p="number",
    n="integer", stop="string|array", seed="integer", tool_choice="string|object",
    parallel_tool_calls="boolean", response_format="object", user="string", metadata="object",
    store="boolean", logprobs="boolean", top_logprobs="integer", presence_penalty="number",
    frequency_penalty="number", logit_bias="object", modalities="array", audio="object",
    prediction="object", service_tier="string", verbosity="string",
    web_search_options="object", prompt_cache_key="string", safety_identifier="string")

_RESPONSES_PARAMS = _params(
    stream="boolean", stream_options="object", store="boolean", include="array",
    previous_response_id="string", temperature="number", top_p="number",
    tool_choice="string|object", parallel_tool_calls="boolean", text="object",
    truncation="string", metadata="object", user="string", service_tier="string",
    background="boolean", max_tool_calls="integer", prompt="object",
    prompt_cache_key="string", safety_identifier="string", top_logprobs="integer",
    conversation="string|object")

_ANTHROPIC_PARAMS = _params(
    stream="boolean", thinking="object", stop_sequences="array", metadata="object",
    tool_choice="object", service_tier="string", container="string|object",
    cache_control="object", inference_geo="string", output_config="object", speed="string",
    diagnostics="object", user_profile_id="string", workspace_id="string",
    # earlier versions' sampling parameters and the beta API's MCP servers
    temperature="number", top_p="number", top_k="integer", mcp_servers="array")

_TEXT_PART = {"type": ("string",), "text": ("string",)}

#: google-genai's ``GenerateContentConfig`` fields a Gemini import keeps (in
#: ``imported.params.config``) and type-checks; any other config field is kept unchecked.
_GEMINI_CONFIG = _params(
    temperature="number", top_p="number", top_k="number", candidate_count="integer",
    stop_sequences="array", presence_penalty="number", frequency_penalty="number",
    seed="integer", response_mime_type="string", response_json_schema="object|boolean",
    response_schema="object", response_logprobs="boolean", logprobs="integer",
    safety_settings="array", tool_config="object", labels="object", cached_content="string",
    response_modalities="array", media_resolution="string", speech_config="object|string",
    audio_timestamp="boolean", automatic_function_calling="object", image_config="object")

TABLES: Mapping[str, Mapping[str, Table]] = {
    "openai-chat": {
        "body": Table("/", {
            "model": ("string",), "messages": ("array",), "tools": ("array", "null"),
            "max_tokens": ("integer", "null"), "max_completion_tokens": ("integer", "null"),
            "reasoning_effort": ("string", "null")}, _CHAT_PARAMS),
        "system": Table("/messages/* (role system, developer)",
                        {"role": ("string",), "content": ("string", "array")}, rest="noted"),
        "user": Table("/messages/* (role user)",
                      {"role": ("string",), "content": ("string", "array")},
                      {"name": ("string",)}),
        "assistant": Table("/messages/* (role assistant)", {
            "role": ("string",), "content": ("string", "array", "null"),
            "tool_calls": ("array", "null"), "refusal": ("string", "null")},
            {"name": ("string",), "audio": ("object", "null")}),
        "tool": Table("/messages/* (role tool)", {
            "role": ("string",), "tool_call_id": ("string",),
            "content": ("string", "array")}),
        "tool_call": Table("/messages/*/tool_calls/*", {
            "id": ("string",), "type": ("string",), "function": ("object",)}),
        "call_function": Table("/messages/*/tool_calls/*/function", {
            "name": ("string",), "arguments": ("string",)}),
        "part": Table("/messages/*/content/* (text)", _TEXT_PART),
        "tools": Table("/tools/*", {"type": ("string",), "function": ("object",)}),
        "tool_function": Table("/tools/*/function", {
            "name": ("string",), "description": ("string",), "parameters": ("object",)},
            {"strict": ("boolean", "null")}),
    },
    "openai-responses": {
        "body": Table("/", {
            "model": ("string",), "input": ("string", "array"),
            "instructions": ("string", "null"), "tools": ("array", "null"),
            "max_output_tokens": ("integer", "null"), "reasoning": ("object", "null")},
            _RESPONSES_PARAMS),
        "reasoning": Table("/reasoning", {"effort": ("string", "null")},
                           {"summary": ("string", "null"),
                            "generate_summary": ("string", "null")}),
        "system": Table("/input/* (message, role system, developer)", {
            "type": ("string",), "role": ("string",), "content": ("string", "array")},
            rest="noted"),
        "user": Table("/input/* (message, role user)", {
            "type": ("string",), "role": ("string",), "content": ("string", "array")},
            {"id": ("string",), "status": ("string",)}),
        "assistant": Table("/input/* (message, role assistant)", {
            "type": ("string",), "role": ("string",), "content": ("string", "array")},
            {"id": ("string",), "status": ("string",)}),
        "function_call": Table("/input/* (function_call)", {
            "type": ("string",), "call_id": ("string",), "name": ("string",),
            "arguments": ("string",)}, {"id": ("string",), "status": ("string",)}),
        "function_call_output": Table("/input/* (function_call_output)", {
            "type": ("string",), "call_id": ("string",), "output": ("string",)},
            {"id": ("string",), "status": ("string",)}),
        "reasoning_item": Table("/input/* (reasoning)", {
            "type": ("string",), "id": ("string",), "summary": ("array",),
            "content": ("array", "null"), "encrypted_content": ("string", "null"),
            "status": ("string", "null")}, rest="noted"),
        "reasoning_summary": Table("/input/* (reasoning)/summary/*", _TEXT_PART),
        "reasoning_content": Table("/input/* (reasoning)/content/*", _TEXT_PART),
        "part": Table("/input/*/content/* (input_text, output_text)", _TEXT_PART,
                      {"annotations": ("array",), "logprobs": ("array",)}),
        "tools": Table("/tools/* (function)", {
            "type": ("string",), "name": ("string",), "description": ("string", "null"),
            "parameters": ("object", "null")}, {"strict": ("boolean", "null")}),
    },
    "anthropic": {
        "body": Table("/", {
            "model": ("string",), "messages": ("array",),
            "system": ("string", "array", "null"), "tools": ("array", "null"),
            "max_tokens": ("integer",)}, _ANTHROPIC_PARAMS),
        "system": Table("/system/*", _TEXT_PART, {"cache_control": ("object", "null")}),
        "message": Table("/messages/*", {"role": ("string",),
                                         "content": ("string", "array")}, rest="noted"),
        "text": Table("/messages/*/content/* (text)", _TEXT_PART,
                      {"cache_control": ("object", "null"), "citations": ("array", "null")}),
        "tool_use": Table("/messages/*/content/* (tool_use)", {
            "type": ("string",), "id": ("string",), "name": ("string",),
            "input": ("object",)}),
        "tool_result": Table("/messages/*/content/* (tool_result)", {
            "type": ("string",), "tool_use_id": ("string",),
            "content": ("string", "array"), "is_error": ("boolean",)}),
        "thinking": Table("/messages/*/content/* (thinking)", {
            "type": ("string",), "thinking": ("string",), "signature": ("string",)},
            rest="noted"),
        "redacted_thinking": Table("/messages/*/content/* (redacted_thinking)", {
            "type": ("string",), "data": ("string",)}, rest="noted"),
        "tools": Table("/tools/*", {
            "name": ("string",), "description": ("string",), "input_schema": ("object",)}),
    },
    # Gemini bodies are read in snake_case and camelCase alike (a pointer names the key as
    # the body spells it); the REST layout's top-level keys are read into config.
    "gemini": {
        "body": Table("/", {
            "model": ("string",), "contents": ("array",), "config": ("object", "null"),
            "system_instruction": ("object", "string", "null"), "tools": ("array", "null"),
            "tool_config": ("object", "null"), "safety_settings": ("array", "null"),
            "generation_config": ("object", "null"), "cached_content": ("string", "null")},
            {"stream": ("boolean", "null")}),
        "config": Table("/config", {
            "system_instruction": ("object", "string", "null"), "tools": ("array", "null"),
            "max_output_tokens": ("integer", "null"), "thinking_config": ("object", "null")},
            _GEMINI_CONFIG),
        "thinking_config": Table("/config/thinking_config", {
            "thinking_level": ("string", "null")},
            {"include_thoughts": ("boolean", "null"), "thinking_budget": ("integer", "null")}),
        "system": Table("/config/system_instruction/parts/*", {"text": ("string",)},
                        rest="noted"),
        "content": Table("/contents/*", {"role": ("string",), "parts": ("array",)},
                         rest="noted"),
        "model_part": Table("/contents/* (role model)/parts/* (text, function_call)", {
            "text": ("string",), "thought": ("boolean", "null"),
            "thought_signature": ("base64 text", "null"), "function_call": ("object",)},
            rest="noted"),
        "user_part": Table("/contents/* (role user)/parts/* (text, function_response)", {
            "text": ("string",), "function_response": ("object",)}, rest="noted"),
        "function_call": Table("/contents/*/parts/*/function_call", {
            "id": ("string", "null"), "name": ("string",), "args": ("object", "null")},
            rest="noted"),
        "function_response": Table("/contents/*/parts/*/function_response", {
            "id": ("string", "null"), "name": ("string",), "response": ("object",)},
            rest="noted"),
        "declaration": Table("/config/tools/*/function_declarations/*", {
            "name": ("string",), "description": ("string", "null"),
            "parameters_json_schema": ("object", "boolean", "null"),
            "parameters": ("object", "null")}, rest="noted"),
    },
}


def kind_of(value: Any) -> str:
    """The JSON kind of a parsed value, as the tables and error messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def is_base64(value: Any) -> bool:
    """Whether ``value`` is text in the standard base64 alphabet (padding optional), as
    the Gemini SDK reads bytes from JSON."""
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except ValueError:
        return False
    return True


def _accepts(kinds: tuple[str, ...], value: Any) -> bool:
    kind = kind_of(value)
    return kind in kinds or (kind == "integer" and "number" in kinds) or (
        "base64 text" in kinds and is_base64(value))


def _got(kinds: tuple[str, ...], value: Any) -> str:
    """How an error names a refused value (a string that is no base64 says so)."""
    if "base64 text" in kinds and isinstance(value, str):
        return "text that is not base64"
    return kind_of(value)


#: ``fail(pointer, expected kinds, got)``: raises the caller's named error.
TypeFail = Callable[[str, tuple[str, ...], str], Exception]
#: ``note(pointer, text)``: adds one line to the import report.
NoteFn = Callable[[str, str], None]


def take(table: Table, obj: Mapping[str, Any], path: str, fail: TypeFail,
         note: NoteFn, name: Callable[[str], str] = str) -> dict[str, Any]:
    """Check the kinds of ``obj``'s named fields; return the fields to keep verbatim.

    Mapped fields are the caller's to translate; a field the table does not name is kept
    or noted by the table's ``rest`` (a noted field with an empty value — ``[]``, ``{}``,
    null — carries nothing and is not noted). ``name`` gives the table's name of a key
    (Gemini: snake_case of a camelCase key); pointers name the key as ``obj`` spells it.
    """
    kept: dict[str, Any] = {}
    for key, value in obj.items():
        field_name = name(key)
        kinds = table.mapped.get(field_name) or table.kept.get(field_name)
        if kinds is not None and not _accepts(kinds, value):
            raise fail(f"{path}/{escape(key)}", kinds, _got(kinds, value))
        if field_name in table.mapped:
            continue
        if field_name in table.kept or table.rest == "kept":
            kept[key] = value
        elif value not in (None, [], {}):
            note(f"{path}/{key}", f"field {key!r} not imported: the session log has no place "
                 f"for it at {table.where}")
    return kept


def check_depth(value: Any, fail: Callable[[str], Exception],
                limit: int = MAX_BODY_DEPTH) -> None:
    """Raise ``fail(pointer)`` at the first container nested ``limit`` levels deep
    (iterative: a pathological body must not exhaust the interpreter's stack)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = ((f"{path}/{escape(str(k))}", v) for k, v in item.items())
        elif isinstance(item, list):
            children = ((f"{path}/{i}", v) for i, v in enumerate(item))
        else:
            continue
        if depth >= limit:
            raise fail(path or "/")
        stack.extend((v, p, depth + 1) for p, v in children)


def escape(token: str) -> str:
    """One JSON pointer token."""
    return token.replace("~", "~0").replace("/", "~1")


def at(body: Any, pointer: str) -> Any:
    """The value at a JSON pointer of ``body`` (None when the path is not there)."""
    node = body
    for token in pointer.split("/")[1:] if pointer else ():
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def overlay(target: dict[str, Any], kept: Mapping[str, Any]) -> None:
    """Put kept fields back into a built object (objects merge key by key: a kept
    ``function.strict`` joins the builder's ``function``)."""
    for key, value in kept.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            overlay(target[key], value)
        else:
            target[key] = thaw(value)


def render_tables() -> str:
    """The tables as Markdown (docs/harness.md, sync-tested)."""
    lines: list[str] = []
    for api, tables in TABLES.items():
        lines += [f"**{api}**", "", "| object | mapped | kept | other fields |",
                  "|---|---|---|---|"]
        for t in tables.values():
            mapped = ", ".join(f"`{k}`" for k in t.mapped) or "—"
            kept = ", ".join(f"`{k}`" for k in t.kept) or "—"
            if t is tables["body"]:
                kept = f"every request parameter; these type-checked: {kept}"
            lines.append(f"| `{t.where}` | {mapped} | {kept} | {t.rest} |")
        lines.append("")
    return "\n".join(lines)
