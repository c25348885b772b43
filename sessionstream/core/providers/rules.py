"""What each provider API refuses that its SDK's request types do not check.

The SDK types say which keys and shapes a body may have; the APIs refuse more, with a
400 at request time. :func:`problems` lists, for a built body, every rule of its API it
breaks (a JSON pointer, the rule's name, what is wrong); the builders run
:func:`check` on every body they return, so a body a provider would refuse is a
:class:`BodyRefused` naming where and why, never a request that fails remotely.

* Anthropic Messages: a non-empty ``messages`` starting with a user message; ``tool_use``
  ids (and ``tool_result.tool_use_id``) match ``^[a-zA-Z0-9_-]+$``; no empty or
  whitespace-only text block (messages and ``system``); every ``tool_use`` answered by
  a ``tool_result`` in the very next message, a user message whose results come first,
  and no result without its call there; with thinking on, the last assistant message
  that calls tools starts with a ``thinking`` / ``redacted_thinking`` block, and
  ``budget_tokens`` is at least 1024 and below ``max_tokens``.
* OpenAI Chat Completions: a non-empty ``messages``; every ``tool_calls`` id answered by
  a ``tool`` message before the next assistant or user message, and no ``tool`` message
  without its call in the assistant message it follows.
* OpenAI Responses: a non-empty ``input``; every ``function_call`` answered by a later
  ``function_call_output`` and no output before or without its call; a ``reasoning``
  item followed by the item it preceded (not another reasoning item, not the end).
* Gemini generateContent: a non-empty ``contents`` of roles ``user`` and ``model`` only,
  each with parts, none of them empty (an empty text is refused; a text part that only
  carries a ``thought_signature`` is what Gemini itself sends); function calls only in
  ``model`` contents, right after a ``user`` content; every content with function calls
  answered by the next content, a ``user`` one whose ``function_response`` parts name
  the calls in their order (and carry their ids when both have one), and no response
  without its call there; not both ``thinking_budget`` and ``thinking_level``.

Ids: :func:`anthropic_id` maps a call id that breaks Anthropic's pattern (a duplicate
suffixed ``~2``, an OpenAI-compatible server's ``functions.lookup:0``) to a valid one,
stably and reversibly (``ssx-`` + the id with each byte other than a letter, digit or
``-`` as ``_`` and two hex digits); :func:`from_anthropic_id` maps it back on import. A
valid id is sent as is (unless it starts with ``ssx-`` itself).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.providers.errors import ProviderMappingError

#: Anthropic's pattern for tool_use ids.
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
#: The prefix of an id :func:`anthropic_id` had to map.
MAPPED_PREFIX = "ssx-"
_KEEP = re.compile(r"[a-zA-Z0-9-]")
_ESCAPE = re.compile(r"_([0-9a-f]{2})")
#: The prefix of a Gemini call id the parsers made up (Gemini sent none): never sent back.
GEMINI_SYNTH_PREFIX = "ssg-"
#: Anthropic's smallest thinking budget.
MIN_THINKING_BUDGET = 1024


@dataclass(frozen=True)
class Problem:
    """One rule of the API a body breaks."""

    path: str  # JSON pointer into the body
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}: {self.detail}"


class BodyRefused(ProviderMappingError):
    """A built body breaks a rule its API enforces (a 400 at request time)."""

    def __init__(self, api: str, found: list[Problem]) -> None:
        self.api = api
        self.problems = tuple(found)
        shown = "; ".join(str(p) for p in found[:5])
        more = f" (+{len(found) - 5} more)" if len(found) > 5 else ""
        super().__init__(f"{api} would refuse this body: {shown}{more}")


class EmptyRequest(ProviderMappingError):
    """Nothing to send: the surface has no message a provider takes (e.g. a session that
    crashed right after turn/start, before its user message)."""


def anthropic_id(call_id: str) -> str:
    """``call_id`` in Anthropic's id form: as is when valid, else mapped reversibly (a
    valid id that starts with the mapping's prefix is mapped too, so no two ids meet)."""
    if ANTHROPIC_ID.match(call_id) and not call_id.startswith(MAPPED_PREFIX):
        return call_id
    out = []
    for ch in call_id:
        if _KEEP.match(ch):
            out.append(ch)
        else:
            out += [f"_{b:02x}" for b in ch.encode("utf-8")]
    return MAPPED_PREFIX + "".join(out)


def from_anthropic_id(sent: str) -> str:
    """The log's call id of an id :func:`anthropic_id` sent (any other id as is)."""
    if not sent.startswith(MAPPED_PREFIX):
        return sent
    body = sent[len(MAPPED_PREFIX):]
    data = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "_":
            pair = body[i + 1:i + 3]
            if not _ESCAPE.fullmatch("_" + pair):
                return sent
            data.append(int(pair, 16))
            i += 3
        elif _KEEP.match(ch):
            data += ch.encode("ascii")
            i += 1
        else:
            return sent
    try:
        original = data.decode("utf-8")
    except UnicodeDecodeError:
        return sent
    # only an id that needed mapping is ever mapped: anything else is the provider's own
    needed = not ANTHROPIC_ID.match(original) or original.startswith(MAPPED_PREFIX)
    return original if needed else sent


def _blank(text: Any) -> bool:
    return isinstance(text, str) and not text.strip()


# --------------------------------------------------------------------------- anthropic


def _anthropic(body: Mapping[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    messages = body.get("messages") or []
    if not messages:
        return [Problem("/messages", "non-empty", "the API needs at least one message")]
    if messages[0].get("role") != "user":
        out.append(Problem("/messages/0", "user-first", "the first message must be the user's"))
    for i, block in enumerate(body.get("system") or ()):
        if isinstance(block, Mapping) and _blank(block.get("text")):
            out.append(Problem(f"/system/{i}", "no-blank-text",
                               "a text block must contain non-whitespace text"))
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str):
            if _blank(content):
                out.append(Problem(f"/messages/{i}/content", "no-blank-text",
                                   "message content must contain non-whitespace text"))
            continue
        if not content:
            out.append(Problem(f"/messages/{i}/content", "non-empty",
                               "a message needs at least one block"))
            continue
        for j, b in enumerate(content):
            p = f"/messages/{i}/content/{j}"
            kind = b.get("type")
            if kind == "text" and _blank(b.get("text")):
                out.append(Problem(p, "no-blank-text",
                                   "a text block must contain non-whitespace text"))
            if kind == "tool_use" and not ANTHROPIC_ID.match(str(b.get("id", ""))):
                out.append(Problem(f"{p}/id", "id-pattern",
                                   f"{b.get('id')!r} does not match {ANTHROPIC_ID.pattern}"))
            if kind == "tool_result" and not ANTHROPIC_ID.match(str(b.get("tool_use_id", ""))):
                out.append(Problem(f"{p}/tool_use_id", "id-pattern",
                                   f"{b.get('tool_use_id')!r} does not match "
                                   f"{ANTHROPIC_ID.pattern}"))
        uses = [b.get("id") for b in content if b.get("type") == "tool_use"] \
            if m.get("role") == "assistant" else []
        prev = messages[i - 1] if i else None
        prev_uses = {b.get("id") for b in prev.get("content") or () if isinstance(b, Mapping)
                     and b.get("type") == "tool_use"} if prev and prev.get("role") == \
            "assistant" and isinstance(prev.get("content"), list) else set()
        results = [(j, b.get("tool_use_id")) for j, b in enumerate(content)
                   if b.get("type") == "tool_result"]
        for j, rid in results:
            if m.get("role") != "user" or rid not in prev_uses:
                out.append(Problem(f"/messages/{i}/content/{j}", "result-after-call",
                                   f"tool_result {rid!r} has no tool_use in the message "
                                   "right before it"))
        if results and [k for k, _ in results] != list(range(len(results))):
            out.append(Problem(f"/messages/{i}/content", "results-first",
                               "tool_result blocks must come before any other block"))
        if uses:
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = {b.get("tool_use_id") for b in (nxt or {}).get("content") or ()
                        if isinstance(b, Mapping) and b.get("type") == "tool_result"} \
                if nxt and isinstance(nxt.get("content"), list) else set()
            missing = [u for u in uses if u not in answered]
            if nxt is not None and missing:
                out.append(Problem(f"/messages/{i + 1}", "result-after-call",
                                   f"tool_use {', '.join(map(str, missing))} not answered in "
                                   "the next message"))
    out += _anthropic_thinking(body, messages)
    return out


def _anthropic_thinking(body: Mapping[str, Any], messages: list[Any]) -> list[Problem]:
    thinking = body.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled",
                                                                         "adaptive"):
        return []
    out: list[Problem] = []
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        max_tokens = body.get("max_tokens")
        if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
            out.append(Problem("/thinking/budget_tokens", "thinking-budget",
                               f"must be at least {MIN_THINKING_BUDGET}"))
        elif isinstance(max_tokens, int) and budget >= max_tokens:
            out.append(Problem("/thinking/budget_tokens", "thinking-budget",
                               f"{budget} must be less than max_tokens {max_tokens}"))
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        blocks = m["content"]
        if any(b.get("type") == "tool_use" for b in blocks) and blocks[0].get("type") not in (
                "thinking", "redacted_thinking"):
            out.append(Problem(f"/messages/{i}/content/0", "thinking-first",
                               "with thinking on, the assistant message of a tool round "
                               "must start with its thinking block"))
        break
    return out


# ------------------------------------------------------------------------------ openai


def _chat(body: Mapping[str, Any]) -> list[Problem]:
    messages = body.get("messages") or []
    if not [m for m in messages if m.get("role") not in ("system", "developer")]:
        return [Problem("/messages", "non-empty", "no message besides the system prompt")]
    out: list[Problem] = []
    open_calls: dict[str, int] = {}  # unanswered id -> the assistant message's index
    current: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in current:
                out.append(Problem(f"/messages/{i}", "result-after-call",
                                   f"tool message {cid!r} does not answer a call of the "
                                   "assistant message before it"))
            open_calls.pop(cid, None)
            continue
        if role in ("assistant", "user"):
            for cid, at in open_calls.items():
                out.append(Problem(f"/messages/{at}", "calls-answered",
                                   f"tool call {cid!r} has no tool message before "
                                   f"/messages/{i}"))
            open_calls = {}
            current = set()
        if role == "assistant":
            ids = [c.get("id") for c in m.get("tool_calls") or ()]
            current = set(ids)
            open_calls = {cid: i for cid in ids}
            if len(current) != len(ids):
                out.append(Problem(f"/messages/{i}/tool_calls", "unique-ids",
                                   "two tool calls share an id"))
    for cid, at in open_calls.items():
        out.append(Problem(f"/messages/{at}", "calls-answered",
                           f"tool call {cid!r} has no tool message"))
    return out


def _responses(body: Mapping[str, Any]) -> list[Problem]:
    items = body.get("input")
    if isinstance(items, str):
        return [] if items else [Problem("/input", "non-empty", "empty input")]
    if not items:
        return [Problem("/input", "non-empty", "the API needs at least one input item")]
    out: list[Problem] = []
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "function_call":
            cid = item.get("call_id")
            if cid in calls:
                out.append(Problem(f"/input/{i}/call_id", "unique-ids",
                                   f"call id {cid!r} is used twice"))
            calls[cid] = i
        elif kind == "function_call_output":
            cid = item.get("call_id")
            if cid not in calls:
                out.append(Problem(f"/input/{i}", "result-after-call",
                                   f"output {cid!r} has no function_call before it"))
            answered.add(cid)
        elif kind == "reasoning":
            nxt = items[i + 1] if i + 1 < len(items) else None
            if nxt is None or nxt.get("type") == "reasoning":
                out.append(Problem(f"/input/{i}", "reasoning-followed",
                                   "a reasoning item must be followed by the item it "
                                   "preceded"))
    for cid, at in calls.items():
        if cid not in answered:
            out.append(Problem(f"/input/{at}", "calls-answered",
                               f"function_call {cid!r} has no function_call_output"))
    return out


# ------------------------------------------------------------------------------ gemini

#: The data fields of a Gemini part (one of them makes a part non-empty).
_GEMINI_DATA = ("text", "function_call", "function_response", "inline_data", "file_data",
                "executable_code", "code_execution_result", "tool_call", "tool_response")


def _gemini_part_problems(part: Any, p: str, role: Any) -> list[Problem]:
    if not isinstance(part, Mapping) or not any(part.get(k) is not None for k in _GEMINI_DATA):
        if isinstance(part, Mapping) and part.get("thought_signature"):
            return []
        return [Problem(p, "no-empty-part", "a part needs text, a function call or response, "
                        "or data")]
    out = []
    if part.get("text") == "" and not part.get("thought_signature"):
        out.append(Problem(f"{p}/text", "no-empty-part", "an empty text part is refused"))
    if part.get("function_call") is not None and role != "model":
        out.append(Problem(p, "role-parts", "a function call belongs to a model content"))
    if part.get("function_response") is not None and role != "user":
        out.append(Problem(p, "role-parts", "a function response belongs to a user content"))
    return out


def _named(parts: Any, key: str) -> list[tuple[int, Any, Any]]:
    return [(j, x[key].get("name"), x[key].get("id")) for j, x in enumerate(parts or ())
            if isinstance(x, Mapping) and isinstance(x.get(key), Mapping)]


def _gemini(body: Mapping[str, Any]) -> list[Problem]:
    contents = body.get("contents") or []
    if not contents:
        return [Problem("/contents", "non-empty", "the API needs at least one content")]
    out: list[Problem] = []
    config = body.get("config") or {}
    system = config.get("system_instruction") if isinstance(config, Mapping) else None
    system_parts = system.get("parts") if isinstance(system, Mapping) else None
    for j, part in enumerate(system_parts or ()):
        if isinstance(part, Mapping) and _blank(part.get("text")):
            out.append(Problem(f"/config/system_instruction/parts/{j}", "no-empty-part",
                               "a system instruction part must contain non-whitespace text"))
    thinking = config.get("thinking_config") if isinstance(config, Mapping) else None
    if isinstance(thinking, Mapping) and thinking.get("thinking_budget") is not None and \
            thinking.get("thinking_level") is not None:
        out.append(Problem("/config/thinking_config", "thinking-config",
                           "thinking_budget and thinking_level cannot both be set"))
    for i, content in enumerate(contents):
        path = f"/contents/{i}"
        role = content.get("role") if isinstance(content, Mapping) else None
        if role not in ("user", "model"):
            out.append(Problem(f"{path}/role", "role", f"{role!r} is not user or model"))
        parts = content.get("parts") if isinstance(content, Mapping) else None
        if not parts:
            out.append(Problem(f"{path}/parts", "non-empty", "a content needs at least one "
                               "part"))
            continue
        for j, part in enumerate(parts):
            out += _gemini_part_problems(part, f"{path}/parts/{j}", role)
        calls = _named(parts, "function_call")
        prev = contents[i - 1] if i else None
        prev_role = prev.get("role") if isinstance(prev, Mapping) else None
        if calls and role == "model" and prev_role != "user":
            out.append(Problem(path, "call-after-user", "a function call turn must come right "
                               "after a user turn or a function response turn"))
        responses = _named(parts, "function_response")
        prev_calls = _named(prev.get("parts"), "function_call") \
            if isinstance(prev, Mapping) and prev_role == "model" else []
        if responses and not prev_calls:
            out.append(Problem(f"{path}/parts/{responses[0][0]}", "response-after-call",
                               "a function response without the function call in the content "
                               "right before it"))
        if calls and role == "model":
            nxt = contents[i + 1] if i + 1 < len(contents) else None
            answers = _named(nxt.get("parts"), "function_response") \
                if isinstance(nxt, Mapping) and nxt.get("role") == "user" else []
            want = [(n, c) for _j, n, c in calls]
            got = [(n, c) for _j, n, c in answers]
            if [n for n, _ in want] != [n for n, _ in got] or any(
                    a and b and a != b for (_, a), (_, b) in zip(want, got, strict=False)):
                out.append(Problem(f"/contents/{i + 1}" if nxt is not None else path,
                                   "responses-answer-calls",
                                   f"function call(s) {', '.join(str(n) for n, _ in want)} must "
                                   "be answered by function responses of the same names, in "
                                   "order, in the next (user) content; found "
                                   f"{', '.join(str(n) for n, _ in got) or 'none'}"))
    return out


_RULES = {"anthropic": _anthropic, "openai-chat": _chat, "openai-responses": _responses,
          "gemini": _gemini}


def problems(api: str, body: Mapping[str, Any]) -> list[Problem]:
    """Every rule of ``api`` the request ``body`` breaks (empty: the API accepts it as
    far as these rules go; the SDK types check the shapes)."""
    return _RULES[api](body)


def check(api: str, body: Mapping[str, Any], omitted: Sequence[Problem] = ()) -> None:
    """Raise :class:`BodyRefused` (or :class:`EmptyRequest`) when ``body`` breaks a rule.

    ``omitted``: the user messages the builder left out because the API refuses them as
    they are (blank text), each named where it would have been: when the body has no
    message left, or does not start with the user's, they are the reason, and the error
    names them (a surface with no message at all is :class:`EmptyRequest`).
    """
    found = problems(api, body)
    if not found:
        return
    if all(p.rule == "non-empty" and p.path in ("/messages", "/input", "/contents")
           for p in found):
        if omitted:
            raise BodyRefused(api, list(omitted))
        raise EmptyRequest(f"{api}: nothing to send ({found[0].detail}): the surface has no "
                           "message yet (a session that stopped right after turn/start?)")
    if any(p.rule == "user-first" for p in found):
        found += omitted
    raise BodyRefused(api, found)


def blank_message(path: str, seqs: Sequence[int], api_refuses: str) -> Problem:
    """The problem of a user message left out because all its text is blank."""
    return Problem(path, "no-blank-text", f"the user message of seq "
                   f"{', '.join(map(str, seqs))} is empty or only whitespace ({api_refuses})")


__all__ = ["ANTHROPIC_ID", "GEMINI_SYNTH_PREFIX", "BodyRefused", "EmptyRequest", "Problem",
           "anthropic_id", "blank_message", "check",
           "from_anthropic_id", "problems"]
