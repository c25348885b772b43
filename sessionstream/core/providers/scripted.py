"""A scripted provider: renders neutral replies as the APIs' real response shapes.

Offline tests, ``make demo`` and the fleet simulator run the harness loop against
:class:`ScriptedClient` instead of a network client: the request bodies are the real
builders' output, and the replies — whole bodies or streams of deltas — have the
shapes the official SDKs parse (the unit tests validate them against the SDK models).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.providers.common import APIS
from sessionstream.core.providers.errors import ProviderMappingError


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers: text, tool calls, how it stopped, usage."""

    text: str = ""
    tool_calls: Sequence[tuple[str, str, Mapping[str, Any]]] = ()  # (call id, name, args)
    stop: str = "auto"  # auto (tool_use if calls else end_turn) | max_tokens | refusal
    refusal: str = ""
    input_tokens: int = 100
    output_tokens: int = 20
    model: str = "scripted-1"
    response_id: str = "resp_scripted"
    chunk_words: int = 3  # words per streamed text delta
    #: the model's reasoning: an Anthropic thinking block (with a signature), a
    #: Responses reasoning item (summary and encrypted content) or a Gemini thought part
    #: (its signature on the first function call, else on the text); Chat has none
    thinking: str = ""
    redacted: bool = False  # Anthropic: a redacted_thinking block instead
    #: interleaved thinking: a second thought after the text, before the calls (an
    #: Anthropic thinking block with its own signature, a Gemini thought part); the
    #: other APIs' replies have none
    interleaved: str = ""

    @property
    def signature(self) -> str:
        """The opaque token the scripted API signs this reply's reasoning with."""
        digest = hashlib.sha256(f"{self.response_id}\0{self.thinking}".encode()).hexdigest()
        return "sig_" + digest[:24]

    @property
    def second_signature(self) -> str:
        """The signature of the interleaved thought."""
        digest = hashlib.sha256(f"{self.response_id}\1{self.interleaved}".encode()).hexdigest()
        return "sig_" + digest[:24]

    @property
    def stop_reason(self) -> str:
        if self.stop != "auto":
            return self.stop
        return "tool_use" if self.tool_calls else "end_turn"


def _args(reply: Reply, args: Mapping[str, Any]) -> str:
    text = json.dumps(dict(args), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    # cut at max_tokens: the arguments stop half-way, as a real truncation leaves them
    return text[: max(1, len(text) // 2)] if reply.stop_reason == "max_tokens" else text


def _pieces(text: str, words: int) -> list[str]:
    tokens = text.split(" ")
    out = [" ".join(tokens[i:i + words]) for i in range(0, len(tokens), words)]
    return [p + (" " if i < len(out) - 1 else "") for i, p in enumerate(out)] if text else []


# ---------------------------------------------------------------------------- openai chat

_CHAT_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length",
                "refusal": "stop"}


def _chat_usage(r: Reply) -> dict[str, Any]:
    return {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
            "total_tokens": r.input_tokens + r.output_tokens}


def chat_response(r: Reply) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": r.text or None,
                           "refusal": r.refusal or None}
    if r.tool_calls:
        msg["tool_calls"] = [{"id": cid, "type": "function",
                              "function": {"name": name, "arguments": _args(r, args)}}
                             for cid, name, args in r.tool_calls]
    return {"id": r.response_id, "object": "chat.completion", "created": 0, "model": r.model,
            "choices": [{"index": 0, "message": msg, "logprobs": None,
                         "finish_reason": _CHAT_FINISH[r.stop_reason]}],
            "usage": _chat_usage(r)}


def chat_stream(r: Reply) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": r.response_id, "object": "chat.completion.chunk", "created": 0,
                "model": r.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in _pieces(r.text, r.chunk_words)]
    if r.refusal:
        out += [chunk({"refusal": p}) for p in _pieces(r.refusal, r.chunk_words)]
    for i, (cid, name, args) in enumerate(r.tool_calls):
        text = _args(r, args)
        out.append(chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        for j in range(0, len(text), 8):
            out.append(chunk({"tool_calls": [{"index": i,
                                              "function": {"arguments": text[j:j + 8]}}]}))
    out.append(chunk({}, _CHAT_FINISH[r.stop_reason]))
    out.append({"id": r.response_id, "object": "chat.completion.chunk", "created": 0,
                "model": r.model, "choices": [], "usage": _chat_usage(r)})
    return out


# ------------------------------------------------------------------------ openai responses


def reasoning_of(r: Reply) -> dict[str, Any]:
    """The Responses reasoning item of ``r`` (with ``r.thinking``)."""
    return {"type": "reasoning", "id": f"rs_{r.response_id}",
            "summary": [{"type": "summary_text", "text": r.thinking}],
            "encrypted_content": "enc_" + r.signature, "status": "completed"}


def _resp_items(r: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [reasoning_of(r)] if r.thinking else []
    content: list[dict[str, Any]] = []
    if r.text:
        content.append({"type": "output_text", "text": r.text, "annotations": []})
    if r.refusal:
        content.append({"type": "refusal", "refusal": r.refusal})
    if content:
        items.append({"type": "message", "id": "msg_0", "role": "assistant",
                      "status": "completed", "content": content})
    for i, (cid, name, args) in enumerate(r.tool_calls):
        items.append({"type": "function_call", "id": f"fc_{i}", "call_id": cid, "name": name,
                      "arguments": _args(r, args), "status": "completed"})
    return items


def _resp(r: Reply, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    incomplete = status == "incomplete"
    return {
        "id": r.response_id, "object": "response", "created_at": 0, "model": r.model,
        "status": status, "output": output, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": None, "metadata": {}, "temperature": None, "top_p": None,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                  "total_tokens": r.input_tokens + r.output_tokens,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }


def responses_response(r: Reply) -> dict[str, Any]:
    status = "incomplete" if r.stop_reason == "max_tokens" else "completed"
    return _resp(r, status, _resp_items(r))


def responses_stream(r: Reply) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def ev(kind: str, **fields: Any) -> None:
        out.append({"type": kind, "sequence_number": len(out), **fields})

    ev("response.created", response={**_resp(r, "in_progress", []), "usage": None})
    for index, item in enumerate(_resp_items(r)):
        if item["type"] == "message":
            ev("response.output_item.added", output_index=index,
               item={**item, "status": "in_progress", "content": []})
            for ci, part in enumerate(item["content"]):
                empty = ({"type": "output_text", "text": "", "annotations": []}
                         if part["type"] == "output_text" else {"type": "refusal", "refusal": ""})
                ev("response.content_part.added", item_id=item["id"], output_index=index,
                   content_index=ci, part=empty)
                if part["type"] == "output_text":
                    for p in _pieces(part["text"], r.chunk_words):
                        ev("response.output_text.delta", item_id=item["id"],
                           output_index=index, content_index=ci, delta=p, logprobs=[])
                    ev("response.output_text.done", item_id=item["id"], output_index=index,
                       content_index=ci, text=part["text"], logprobs=[])
                else:
                    for p in _pieces(part["refusal"], r.chunk_words):
                        ev("response.refusal.delta", item_id=item["id"], output_index=index,
                           content_index=ci, delta=p)
                    ev("response.refusal.done", item_id=item["id"], output_index=index,
                       content_index=ci, refusal=part["refusal"])
                ev("response.content_part.done", item_id=item["id"], output_index=index,
                   content_index=ci, part=part)
        elif item["type"] == "reasoning":
            ev("response.output_item.added", output_index=index,
               item={**item, "summary": [], "encrypted_content": None,
                     "status": "in_progress"})
            for p in _pieces(r.thinking, r.chunk_words):
                ev("response.reasoning_summary_text.delta", item_id=item["id"],
                   output_index=index, summary_index=0, delta=p)
        else:
            ev("response.output_item.added", output_index=index,
               item={**item, "arguments": "", "status": "in_progress"})
            text = item["arguments"]
            for j in range(0, len(text), 8):
                ev("response.function_call_arguments.delta", item_id=item["id"],
                   output_index=index, delta=text[j:j + 8])
            ev("response.function_call_arguments.done", item_id=item["id"],
               output_index=index, arguments=text, name=item["name"])
        ev("response.output_item.done", output_index=index, item=item)
    final = responses_response(r)
    ev("response.incomplete" if final["status"] == "incomplete" else "response.completed",
       response=final)
    return out


# ------------------------------------------------------------------------------ anthropic


def _anthropic_blocks(r: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if r.thinking and r.redacted:
        blocks.append({"type": "redacted_thinking", "data": "redacted_" + r.signature})
    elif r.thinking:
        blocks.append({"type": "thinking", "thinking": r.thinking, "signature": r.signature})
    text = r.text or r.refusal
    if text:
        blocks.append({"type": "text", "text": text, "citations": None})
    if r.interleaved:
        blocks.append({"type": "thinking", "thinking": r.interleaved,
                       "signature": r.second_signature})
    for cid, name, args in r.tool_calls:
        # a call cut at max_tokens has no parsed input in a whole response
        blocks.append({"type": "tool_use", "id": cid, "name": name,
                       "input": {} if r.stop_reason == "max_tokens" else dict(args)})
    return blocks


def anthropic_response(r: Reply) -> dict[str, Any]:
    return {"id": r.response_id, "type": "message", "role": "assistant", "model": r.model,
            "content": _anthropic_blocks(r), "stop_reason": r.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens}}


def anthropic_stream(r: Reply) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "message_start", "message": {
        **anthropic_response(r), "content": [], "stop_reason": None,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": 1}}}]
    for index, block in enumerate(_anthropic_blocks(r)):
        if block["type"] == "text":
            out.append({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": "", "citations": None}})
            out += [{"type": "content_block_delta", "index": index,
                     "delta": {"type": "text_delta", "text": p}}
                    for p in _pieces(block["text"], r.chunk_words)]
        elif block["type"] == "thinking":
            out.append({"type": "content_block_start", "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            out += [{"type": "content_block_delta", "index": index,
                     "delta": {"type": "thinking_delta", "thinking": p}}
                    for p in _pieces(block["thinking"], r.chunk_words)]
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": block["signature"]}})
        elif block["type"] == "redacted_thinking":
            out.append({"type": "content_block_start", "index": index, "content_block": block})
        else:
            out.append({"type": "content_block_start", "index": index,
                        "content_block": {**block, "input": {}}})
            text = json.dumps(block["input"], ensure_ascii=False, sort_keys=True,
                              separators=(",", ":")) if block["input"] else ""
            out += [{"type": "content_block_delta", "index": index,
                     "delta": {"type": "input_json_delta", "partial_json": text[j:j + 8]}}
                    for j in range(0, len(text), 8)]
        out.append({"type": "content_block_stop", "index": index})
    out.append({"type": "message_delta",
                "delta": {"stop_reason": r.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": r.output_tokens}})
    out.append({"type": "message_stop"})
    return out


# --------------------------------------------------------------------------------- gemini
#
# The REST API's JSON (camelCase), as it arrives on the wire; the SDK's own client
# parses it (the unit tests check), and the parsers read it as well as the SDK's dumps.

_GEMINI_FINISH = {"end_turn": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS",
                  "refusal": "SAFETY"}


def gemini_signature(r: Reply) -> str:
    """The base64 thought signature the scripted Gemini gives ``r``'s reasoning."""
    return base64.b64encode(r.signature.encode()).decode()


def _gemini_parts(r: Reply) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": r.thinking, "thought": True}] if r.thinking else []
    if r.text and r.stop_reason != "refusal":
        parts.append({"text": r.text})
    if r.interleaved:
        parts.append({"text": r.interleaved, "thought": True})
    parts += [{"functionCall": {"id": cid, "name": name, "args": dict(args)}}
              for cid, name, args in r.tool_calls]
    if r.thinking and parts:  # Gemini signs the first call, else the last part
        signed = next((p for p in parts if "functionCall" in p), parts[-1])
        signed["thoughtSignature"] = gemini_signature(r)
    return parts


def _gemini_usage(r: Reply) -> dict[str, Any]:
    return {"promptTokenCount": r.input_tokens, "candidatesTokenCount": r.output_tokens,
            "totalTokenCount": r.input_tokens + r.output_tokens}


def _gemini_chunk(r: Reply, parts: list[dict[str, Any]], finish: str | None = None,
                  usage: bool = False) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [cand], "modelVersion": r.model,
                           "responseId": r.response_id}
    if usage:
        out["usageMetadata"] = _gemini_usage(r)
    return out


def gemini_response(r: Reply) -> dict[str, Any]:
    return _gemini_chunk(r, _gemini_parts(r), _GEMINI_FINISH[r.stop_reason], usage=True)


def gemini_stream(r: Reply) -> list[dict[str, Any]]:
    """Thought and text in pieces, the calls whole in the last chunk (with the finish),
    a text's signature alone in an empty text part at the end, as Gemini streams."""
    parts = _gemini_parts(r)
    out: list[dict[str, Any]] = []
    last: list[dict[str, Any]] = []
    for part in parts:
        if "functionCall" in part:
            last.append(part)
        elif part.get("thought"):
            out += [_gemini_chunk(r, [{"text": p, "thought": True}])
                    for p in _pieces(part["text"], r.chunk_words)]
            if "thoughtSignature" in part:
                last.append({"text": "", "thought": True,
                             "thoughtSignature": part["thoughtSignature"]})
        else:
            out += [_gemini_chunk(r, [{"text": p}]) for p in _pieces(part["text"],
                                                                      r.chunk_words)]
            if "thoughtSignature" in part:
                last.append({"text": "", "thoughtSignature": part["thoughtSignature"]})
    out.append(_gemini_chunk(r, last, _GEMINI_FINISH[r.stop_reason], usage=True))
    return out


_RENDER = {
    "openai-chat": (chat_response, chat_stream),
    "openai-responses": (responses_response, responses_stream),
    "anthropic": (anthropic_response, anthropic_stream),
    "gemini": (gemini_response, gemini_stream),
}


def render(api: str, reply: Reply, *, stream: bool = False) -> Any:
    """``reply`` as ``api``'s response body, or (``stream``) its list of stream events."""
    if api not in _RENDER:
        raise ProviderMappingError(f"unknown provider API {api!r} (known: {', '.join(APIS)})")
    whole, streamed = _RENDER[api]
    return streamed(reply) if stream else whole(reply)


Script = Callable[[Mapping[str, Any]], Reply]
"""Chooses the reply to one request body (a scripted model)."""


@dataclass
class ScriptedClient:
    """A provider client for the harness loop that answers from a script, offline.

    ``script`` is a list of replies (consumed in order) or a function of the request
    body. Each request body is kept in ``bodies``. A body with ``"stream": true`` gets
    the API's stream of events back (an iterator, like the SDKs' streams).
    """

    api: str
    script: Iterable[Reply] | Script
    bodies: list[dict[str, Any]] = field(default_factory=list)
    _replies: Iterator[Reply] | None = None

    def create(self, body: Mapping[str, Any]) -> Any:
        self.bodies.append(dict(body))
        if callable(self.script):
            reply = self.script(body)
        else:
            if self._replies is None:
                self._replies = iter(self.script)
            try:
                reply = next(self._replies)
            except StopIteration:
                raise ProviderMappingError("the scripted client has no reply left") from None
        stream = body.get("stream") is True
        rendered = render(self.api, reply, stream=stream)
        return iter(rendered) if stream else rendered
