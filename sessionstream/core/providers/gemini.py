"""Gemini ``generateContent`` (the google-genai SDK): request bodies and response parsers.

The body is the SDK call in JSON form, ``{"model", "contents": [Content], "config":
GenerateContentConfig}``, with the SDK's snake_case field names and bytes
(``thought_signature``) as base64 text, as ``Content.model_dump(mode="json")`` gives them:
``client.models.generate_content(**body)`` sends it (``"stream": true`` is ours: it
selects ``generate_content_stream``, and a client removes it before the call).

system sections → ``config.system_instruction``, one text part per section; user,
context and summary messages → ``user`` contents of text parts; assistant messages →
``model`` contents: recorded thoughts, text parts and ``function_call`` parts (``args``
the object) in the order the model answered (``assistant/message.blocks``; without it
thoughts first, then the text, then the calls); all results of one call round → ONE
``user`` content right after, ``function_response`` parts in the order of the calls,
``response`` ``{"output": …}``, or ``{"error": …}`` for status error (a JSON result is
sent as it is, not as text). Tool schemas → one tool of ``function_declarations`` with
``parameters_json_schema``. ``max_tokens`` → ``config.max_output_tokens``;
``reasoning_effort`` (minimal, low, medium, high) →
``config.thinking_config.thinking_level``; the option ``thinking`` is
``config.thinking_config`` as is.

Call ids: Gemini may answer function calls without an id (responses then answer calls
by name and order). The parsers give such a call the id ``ssg-<response id>-<n>``, which
the builder never sends back (a provider id is sent as is).

Reasoning (class ``reasoning``, replayed to Gemini only): ``thought`` parts (the thought
summary, with its ``thought_signature`` when it has one) and the signatures Gemini puts
on other parts, anchored to them: ``{"type": "signature", "anchor": "call", "index": k}``
is the signature of the message's k-th function call (Gemini refuses a tool loop whose
call comes back without it), ``"anchor": "text"`` the one on its text: on text part
``index``, or (no index) on the last one, or alone in an empty text part where the
message has no text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sessionstream.core.jsonvalue import thaw
from sessionstream.core.messages import Message
from sessionstream.core.providers.common import (
    MOVED,
    Built,
    Collector,
    arrange,
    attachment_text,
    group,
    message_source,
    nonblank_system,
    nonblank_texts,
    reasoning_parts,
    round_source,
    text_entries,
)
from sessionstream.core.providers.errors import IncompleteStream
from sessionstream.core.providers.fields import is_base64, kind_of
from sessionstream.core.providers.output import (
    ModelOutput,
    block_order,
    count_kinds,
    fail,
    finish_calls,
    get,
    usage_of,
)
from sessionstream.core.providers.rules import (
    GEMINI_SYNTH_PREFIX,
    Problem,
    blank_message,
    check,
)
from sessionstream.core.request import Request

API = "gemini"

#: ``reasoning_effort`` values Gemini has a thinking level for.
THINKING_LEVELS = {"minimal": "MINIMAL", "low": "LOW", "medium": "MEDIUM", "high": "HIGH"}


def sent_id(call_id: str | None) -> str | None:
    """The id a function call / response carries to Gemini (None: one we made up)."""
    if not call_id or call_id.startswith(GEMINI_SYNTH_PREFIX):
        return None
    return call_id


_BLANK = "Gemini refuses empty parts"


def _text_parts(m: Message, c: Collector, path: str) -> list[dict[str, Any]]:
    return [{"text": t} for t in nonblank_texts(m, c, path, _BLANK)]


#: A text signature's anchor: the index of its text part (None: the last one, or an
#: empty text part of its own where the message has no text).
TextAnchor = tuple[str, int | None]


def _reasoning(request: Request, m: Message, c: Collector, path: str
               ) -> tuple[list[dict[str, Any]], dict[TextAnchor, str]]:
    """(thought parts, signatures by anchor) of ``m``'s recorded Gemini reasoning."""
    thoughts: list[dict[str, Any]] = []
    anchored: dict[TextAnchor, str] = {}
    for item in reasoning_parts(request, m, API, c, path):
        kind = item.get("type")
        sig = item.get("thought_signature")
        index = item.get("index")
        if sig is not None and not is_base64(sig):  # bytes travel as base64 text
            c.note(path, f"recorded reasoning part {kind!r} with a thought signature that is "
                   "not base64 text not sent", m.seqs)
            continue
        if isinstance(index, bool) or (isinstance(index, int) and index < 0):
            index = "invalid"  # not a part's place: the part is not sent (below)
        if kind == "thought" and isinstance(item.get("text"), str):
            part: dict[str, Any] = {"text": item["text"], "thought": True}
            if isinstance(sig, str):
                part["thought_signature"] = sig
            thoughts.append(part)
        elif kind == "signature" and isinstance(sig, str) and item.get("anchor") == "call" \
                and isinstance(index, int):
            anchored[("call", index)] = sig
        elif kind == "signature" and isinstance(sig, str) and item.get("anchor") == "text" \
                and (index is None or isinstance(index, int)):
            anchored[("text", index)] = sig
        else:
            c.note(path, f"recorded reasoning part {kind!r} without its text or signature "
                   "not sent", m.seqs)
    return thoughts, anchored


def _signed_texts(m: Message, c: Collector, path: str, anchored: dict[TextAnchor, str]
                  ) -> list[dict[str, Any] | None]:
    """The text parts of ``m`` (None: a blank one, left out) with their signatures: on
    the part they were given with, or alone in an empty text part where that part is
    blank or the message has no text (Gemini sends such a part itself)."""
    texts: list[dict[str, Any] | None] = [
        None if t is None else {"text": t} for t in text_entries(m, c, path, _BLANK)]
    for (kind, index), sig in sorted(anchored.items(), key=lambda a: (a[0][1] is None,
                                                                      a[0][1] or 0)):
        if kind != "text":
            continue
        if index is None:  # the last text part, or one of its own
            index = max((i for i, t in enumerate(texts) if t is not None),
                        default=len(texts) - 1 if texts else None)
        if index is None:
            texts.append({"text": "", "thought_signature": sig})
        elif index < len(texts):
            texts[index] = {**(texts[index] or {"text": ""}), "thought_signature": sig}
        else:
            c.note(path, f"thought signature of text part {index} not sent: the message has "
                   "no such part now", m.seqs)
    return texts


def _response(m: Message, c: Collector, path: str) -> dict[str, Any]:
    """A function_response's ``response`` object for tool result ``m``."""
    content = m.content
    value: Any
    if isinstance(content, Mapping) and set(content) == {"attachment"}:
        value = attachment_text(content["attachment"])
        c.note(path, "spilled attachment rendered as head/tail", m.seqs)
    else:
        value = "" if content is None else thaw(content)
    return {"error" if m.status == "error" else "output": value}


def build(request: Request, *, stream: bool = False,
          thinking: Mapping[str, Any] | None = None) -> Built:
    """The generateContent body for ``request`` (pure; validated against the SDK in tests).

    ``thinking``: ``config.thinking_config`` as is (e.g. ``{"include_thoughts": true,
    "thinking_budget": 1024}``); it replaces the level ``reasoning_effort`` would set.
    """
    c = Collector()
    body: dict[str, Any] = {"model": request.header.model}
    c.origin("/model", part="header", field="model",
             source=request.header.source_of("model") or "request/header")
    config: dict[str, Any] = {}
    system = nonblank_system(request, c, "/config/system_instruction",
                             "Gemini refuses empty parts")
    if system:
        config["system_instruction"] = {"parts": [{"text": p.text} for p in system]}
        for i, p in enumerate(system):
            c.origin(f"/config/system_instruction/parts/{i}", part="system",
                     sections=[p.section_id], variables=list(p.variables))
    contents: list[dict[str, Any]] = []
    blank: list[Problem] = []  # user messages left out as blank: named if they matter
    names: dict[str, str] = {}
    round_order: list[str] = []
    for item in group(request.messages):
        path = f"/contents/{len(contents)}"
        if item.kind == "results":
            by_id = {m.call_id: m for m in item.messages}
            ordered = [by_id[cid] for cid in round_order if cid in by_id]
            if [m.call_id for m in ordered] != [m.call_id for m in item.messages]:
                c.note(path, "function responses sent in the order of their calls (Gemini "
                       "matches them by name and order)", [s for m in ordered for s in m.seqs])
            parts = []
            for j, m in enumerate(ordered):
                fr: dict[str, Any] = {"name": names[str(m.call_id)],
                                      "response": _response(m, c, f"{path}/parts/{j}")}
                if sent_id(m.call_id):
                    fr["id"] = m.call_id
                parts.append({"function_response": fr})
                c.origin(f"{path}/parts/{j}", **message_source(m))
            contents.append({"role": "user", "parts": parts})
            c.origin(path, **round_source(ordered))
            continue
        m = item.messages[0]
        if item.kind == "assistant":
            thoughts, anchored = _reasoning(request, m, c, path)
            calls: list[dict[str, Any]] = []
            for k, tc in enumerate(m.tool_calls):
                fc: dict[str, Any] = {"name": tc.name, "args": thaw(tc.arguments)}
                if sent_id(tc.call_id):
                    fc["id"] = tc.call_id
                part: dict[str, Any] = {"function_call": fc}
                if ("call", k) in anchored:
                    part["thought_signature"] = anchored[("call", k)]
                calls.append(part)
                names[tc.call_id] = tc.name
            round_order = [tc.call_id for tc in m.tool_calls]
            blocks: dict[str, Sequence[dict[str, Any] | None]] = {
                "reasoning": thoughts, "text": _signed_texts(m, c, path, anchored),
                "call": calls}
            arranged = arrange(request.blocks_for(m.seqs[0]), blocks)
            if not calls and not any(kind == "text" and p["text"] for kind, p in arranged):
                c.note(path, "empty assistant message omitted", m.seqs)
                continue
            parts = [p for _kind, p in arranged]  # in the order the model answered
            prev = contents[-1] if contents else None
            if prev is not None and prev["role"] == "model":
                # turns alternate, and a function call turn must follow a user turn: two
                # assistant messages in a row (the user message between them was empty or
                # deleted) are sent as one model content
                at = len(prev["parts"])
                prev["parts"] += parts
                c.note(f"/contents/{len(contents) - 1}", "two assistant messages in a row "
                       "sent as one model content (Gemini wants a function call right after "
                       "a user turn)", m.seqs)
                path = f"/contents/{len(contents) - 1}"
                base = at
            else:
                contents.append({"role": "model", "parts": parts})
                c.origin(path, **message_source(m))
                base = 0
            calls_seen = 0
            for j, (kind, _p) in enumerate(arranged):
                if kind == "reasoning":
                    c.origin(f"{path}/parts/{base + j}", part="reasoning", seqs=list(m.seqs))
                elif kind == "call":
                    tc = m.tool_calls[calls_seen]
                    calls_seen += 1
                    c.origin(f"{path}/parts/{base + j}", part="tool_call",
                             call_id=tc.call_id, seqs=list(m.seqs))
            if base:
                c.origin(f"{path}/parts/{base}", **message_source(m))
            continue
        if item.moved:
            c.note(path, MOVED, m.seqs)
        parts = _text_parts(m, c, path)
        if not parts:
            c.note(path, "empty user message omitted", m.seqs)
            blank.append(blank_message(f"{path}/parts", m.seqs, _BLANK))
            continue
        contents.append({"role": "user", "parts": parts})
        c.origin(path, **message_source(m))
    body["contents"] = contents
    if request.tools:
        decls = []
        for i, t in enumerate(request.tools):
            d: dict[str, Any] = {"name": t.schema.name,
                                 "parameters_json_schema": thaw(t.schema.parameters)}
            if t.schema.description:
                d["description"] = t.schema.description
            decls.append(d)
            c.origin(f"/config/tools/0/function_declarations/{i}", part="tool",
                     name=t.schema.name, provider=t.provider)
        config["tools"] = [{"function_declarations": decls}]
    if request.header.max_tokens is not None:
        config["max_output_tokens"] = request.header.max_tokens
        c.origin("/config/max_output_tokens", part="header", field="max_tokens",
                 source=request.header.source_of("max_tokens") or "request/header")
    effort = request.header.reasoning_effort
    if thinking is not None:
        config["thinking_config"] = thaw(dict(thinking))
        c.origin("/config/thinking_config", part="builder", option="thinking")
        if effort is not None:
            c.note("/config/thinking_config", f"reasoning_effort {effort!r} not sent: the "
                   "thinking option sets the thinking configuration")
    elif effort is not None and effort.lower() in THINKING_LEVELS:
        config["thinking_config"] = {"thinking_level": THINKING_LEVELS[effort.lower()]}
        c.origin("/config/thinking_config/thinking_level", part="header",
                 field="reasoning_effort",
                 source=request.header.source_of("reasoning_effort") or "request/header")
    elif effort is not None:
        c.note("/config", f"reasoning_effort {effort!r} not sent: Gemini's thinking levels "
               f"are {', '.join(THINKING_LEVELS)}")
    if config:
        body["config"] = config
    if stream:
        body["stream"] = True
        c.origin("/stream", part="builder", option="stream")
    check(API, body, blank)  # what the API refuses beyond the SDK types: a named error
    return Built(API, body, tuple(c.origins), tuple(c.notes))


# ------------------------------------------------------------------------------ responses
#
# Responses come as the SDK's ``model_dump(mode="json")`` (snake_case) or as the REST
# API's JSON (camelCase); every field is read under either name.

_STOPS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens", "SAFETY": "content_filter",
          "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
          "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
          "IMAGE_SAFETY": "content_filter", "IMAGE_PROHIBITED_CONTENT": "content_filter",
          "IMAGE_RECITATION": "content_filter"}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.capitalize() for w in rest)


def gemini_key(obj: Any, key: str) -> str:
    """``key`` as ``obj`` spells it (snake_case or camelCase)."""
    if isinstance(obj, Mapping) and key not in obj and _camel(key) in obj:
        return _camel(key)
    return key


def _get(obj: Any, key: str, path: str, kind: type | tuple[type, ...], *,
         optional: bool = False) -> Any:
    return get(API, obj, gemini_key(obj, key), path, kind, optional=optional)


def _has(obj: Mapping[str, Any], key: str) -> bool:
    return obj.get(gemini_key(obj, key)) is not None


def _usage(u: Any) -> dict[str, int] | None:
    """Neutral usage: output_tokens counts the thoughts too (as OpenAI's do)."""
    if not isinstance(u, Mapping):
        return None
    prompt = u.get(gemini_key(u, "prompt_token_count"))
    candidates = u.get(gemini_key(u, "candidates_token_count"))
    thoughts = u.get(gemini_key(u, "thoughts_token_count"))
    counts = [n for n in (candidates, thoughts) if isinstance(n, int)]
    return usage_of({"input_tokens": prompt,
                     "output_tokens": sum(counts) if counts else None,
                     "cached_input_tokens": u.get(gemini_key(u, "cached_content_token_count")),
                     "reasoning_tokens": thoughts})


#: Part fields that carry content the log has no field for (counted on the message).
_OTHER_PARTS = ("executable_code", "code_execution_result", "inline_data", "file_data",
                "tool_call", "tool_response", "function_response")


class _Fold:
    """The parts of one answer (a whole response, or a stream's chunks in order), kept in
    the order received. A streamed text or thought arrives in pieces, one chunk after
    another: the first part of a chunk joins the last part of the chunk before when both
    are of the same kind; parts within one chunk (or one whole response) stay apart."""

    def __init__(self, response_id: str | None) -> None:
        self.response_id = response_id
        self.text: list[str] = []  # the answer's text parts
        self.raw: list[tuple[str, str, Any]] = []
        self.reasoning: list[dict[str, Any]] = []
        self.omitted: list[str] = []
        self.order: list[str] = []  # the kinds of the parts, as received

    def _sign_text(self, sig: str, index: int | None) -> None:
        """A text part's signature (a later one for the same part replaces it)."""
        self.reasoning = [r for r in self.reasoning if not (
            r.get("anchor") == "text" and r.get("index") == index)]
        item: dict[str, Any] = {"api": API, "type": "signature", "anchor": "text",
                                "thought_signature": sig}
        if index is not None:
            item["index"] = index
        self.reasoning.append(item)

    def part(self, part: Any, p: str, continues: bool = False) -> str | None:
        """Take one part; returns its text when it is answer text (a stream delta).
        ``continues``: the part opens a stream chunk (it may continue the last one)."""
        if not isinstance(part, Mapping):
            fail(API, p, f"expected an object, got {kind_of(part)}")
        sig = _get(part, "thought_signature", p, str, optional=True)
        previous = self.order[-1] if self.order else None
        if _has(part, "function_call"):
            fc = _get(part, "function_call", p, dict)
            fp = f"{p}.function_call"
            name = _get(fc, "name", fp, str)
            args = _get(fc, "args", fp, dict, optional=True) or {}
            call_id = _get(fc, "id", fp, str, optional=True) or \
                f"{GEMINI_SYNTH_PREFIX}{self.response_id or 'r'}-{len(self.raw)}"
            if sig:
                self.reasoning.append({"api": API, "type": "signature", "anchor": "call",
                                       "index": len(self.raw), "thought_signature": sig})
            self.raw.append((call_id, name, args))
            self.order.append("call")
            return None
        if _has(part, "text") or (sig and not any(_has(part, k) for k in _OTHER_PARTS)):
            text = _get(part, "text", p, str, optional=True) or ""
            if _get(part, "thought", p, bool, optional=True):
                last = self.reasoning[-1] if self.reasoning else None
                if continues and previous == "reasoning" and last is not None and \
                        last["type"] == "thought" and "thought_signature" not in last:
                    last["text"] += text  # a streamed thought arrives in pieces
                    if sig:
                        last["thought_signature"] = sig
                else:
                    item = {"api": API, "type": "thought", "text": text}
                    if sig:
                        item["thought_signature"] = sig
                    self.reasoning.append(item)
                    self.order.append("reasoning")
                return None
            if text and continues and previous == "text" and self.text:
                self.text[-1] += text  # a streamed text arrives in pieces
            elif text:
                self.text.append(text)
                self.order.append("text")
            if sig and self.text:  # on this text, or (streamed) after it: the text's
                self._sign_text(sig, len(self.text) - 1)
            elif sig and "text" not in self.order:  # a signature where there is no text
                self._sign_text(sig, None)
                self.order.append("text")
            return text or None
        kind = next((k for k in _OTHER_PARTS if _has(part, k)), "unknown")
        self.omitted.append(kind)
        return None

    def output(self, finish: str | None, model: str | None, usage: Any,
               chunks: tuple[str, ...] = ()) -> ModelOutput:
        stop = _STOPS.get(finish or "", "other")
        if stop == "end_turn" and self.raw:
            stop = "tool_use"  # Gemini stops with STOP whether or not it called tools
        calls, withheld = finish_calls(self.raw, stop == "max_tokens")
        reasoning = [dict(r) for r in self.reasoning]
        for r in reasoning:  # the last text part's signature needs no index (the default)
            if r.get("anchor") == "text" and r.get("index") == len(self.text) - 1:
                del r["index"]
        return ModelOutput(API, model, self.response_id, "".join(self.text), calls, stop,
                           finish, _usage(usage), None, withheld, chunks,
                           count_kinds(self.omitted), tuple(reasoning),
                           tuple(self.text) if len(self.text) > 1 else (),
                           block_order(self.order))


def _error(body: Mapping[str, Any], path: str) -> None:
    err = body.get("error")
    if isinstance(err, Mapping):
        fail(API, path, f"an error response: {err.get('status') or err.get('code')}: "
             f"{err.get('message')}")


def _candidate(body: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    candidates = _get(body, "candidates", path, list, optional=True) or []
    if not candidates:
        return None
    cand = candidates[0]
    if not isinstance(cand, Mapping):
        fail(API, f"{path}.candidates[0]", "expected an object")
    return cand


def _parts(cand: Mapping[str, Any], path: str) -> list[Any]:
    content = _get(cand, "content", path, dict, optional=True) or {}
    return _get(content, "parts", f"{path}.content", list, optional=True) or []


def _blocked(body: Mapping[str, Any]) -> str | None:
    feedback = body.get(gemini_key(body, "prompt_feedback"))
    if isinstance(feedback, Mapping):
        reason = feedback.get(gemini_key(feedback, "block_reason"))
        return str(reason) if reason else None
    return None


def parse_response(body: Mapping[str, Any]) -> ModelOutput:
    """A generateContent response (``GenerateContentResponse`` as JSON) → ModelOutput."""
    _error(body, "$")
    response_id = _get(body, "response_id", "$", str, optional=True)
    model = _get(body, "model_version", "$", str, optional=True)
    fold = _Fold(response_id)
    cand = _candidate(body, "$")
    if cand is None:
        blocked = _blocked(body)
        if blocked is None:
            fail(API, "$.candidates", "no candidate in the response")
        return ModelOutput(API, model, response_id, "", (), "content_filter", blocked,
                           _usage(body.get(gemini_key(body, "usage_metadata"))))
    for i, part in enumerate(_parts(cand, "$.candidates[0]")):
        fold.part(part, f"$.candidates[0].content.parts[{i}]")
    finish = _get(cand, "finish_reason", "$.candidates[0]", str, optional=True)
    return fold.output(finish, model, body.get(gemini_key(body, "usage_metadata")))


class GeminiStreamParser:
    """Folds ``generate_content_stream`` chunks (``GenerateContentResponse`` as JSON).

    Text and thoughts arrive in pieces, each function call whole in one chunk; the chunk
    with a ``finish_reason`` ends the answer (usage: the last chunk that has it wins).
    """

    api = API

    def __init__(self) -> None:
        self._fold = _Fold(None)
        self._finish: str | None = None
        self._model: str | None = None
        self._usage: Any = None
        self._blocked: str | None = None
        self._chunks: list[str] = []
        self._n = 0

    def feed(self, chunk: Mapping[str, Any]) -> list[str]:
        path = f"chunk[{self._n}]"
        self._n += 1
        if not isinstance(chunk, Mapping):
            fail(API, path, f"expected an object, got {kind_of(chunk)}")
        _error(chunk, path)
        self._fold.response_id = _get(chunk, "response_id", path, str, optional=True) or \
            self._fold.response_id
        self._model = _get(chunk, "model_version", path, str, optional=True) or self._model
        if chunk.get(gemini_key(chunk, "usage_metadata")) is not None:
            self._usage = chunk[gemini_key(chunk, "usage_metadata")]
        self._blocked = _blocked(chunk) or self._blocked
        cand = _candidate(chunk, path)
        if cand is None:
            return []
        deltas = []
        for i, part in enumerate(_parts(cand, f"{path}.candidates[0]")):
            text = self._fold.part(part, f"{path}.candidates[0].content.parts[{i}]",
                                   continues=i == 0)
            if text:
                deltas.append(text)
        self._chunks += deltas
        finish = _get(cand, "finish_reason", f"{path}.candidates[0]", str, optional=True)
        if finish:
            self._finish = finish
        return deltas

    def finish(self) -> ModelOutput:
        """The output; :class:`IncompleteStream` if no chunk carried a finish_reason."""
        if self._finish is None and self._blocked is None:
            raise IncompleteStream(API, "the stream ended before a finish_reason")
        if self._finish is None:
            return ModelOutput(API, self._model, self._fold.response_id, "", (),
                               "content_filter", self._blocked, _usage(self._usage))
        return self._fold.output(self._finish, self._model, self._usage, tuple(self._chunks))


__all__ = ["API", "THINKING_LEVELS", "GeminiStreamParser", "build", "gemini_key",
           "parse_response", "sent_id"]
