"""Response recorder: a provider's answer (whole or streamed) becomes events.

One model step's answer is recorded as ``request/header`` (the routing actually used:
the model the provider reports, the API, the response id), one ``assistant/chunk`` per
streamed text delta, and ``assistant/message`` with content, tool calls, stop reason,
usage and refusal. Everything goes through the session's rules (``Session.append`` or a
``SessionWriter``). Tool calls the output withheld (cut at max_tokens, unparseable
arguments) are kept on the message as ``withheld_tool_calls`` with their raw text. A
truncated call is never declared, so nothing can execute it; a call whose arguments do
not parse is declared with empty arguments so the model can be told (the harness
answers it with an error result and never runs the tool, ADR 0010). The model's
reasoning (thinking blocks with their
signatures, reasoning items) is kept as ``reasoning``, content of its own data class;
when the answer's blocks came in another order than reasoning, text, calls (interleaved
thinking), ``blocks`` says in which, so the turn goes back to its API as received.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from sessionstream.core.catalog import Catalog, default_catalog
from sessionstream.core.events import Draft, Event
from sessionstream.core.providers import parse_response, stream_parser
from sessionstream.core.providers.output import ModelOutput, OutputCall, WithheldCall
from sessionstream.core.request import RequestHeader
from sessionstream.core.session import Session


class Appender(Protocol):
    """What the recorder and the harness loop write through: a Session or a SessionWriter."""

    def append(self, draft: Draft, /) -> Event: ...


def header_data(output: ModelOutput, header: RequestHeader | None) -> dict[str, Any]:
    """``request/header`` data: the requested routing, corrected by what was used."""
    if header is None:
        data: dict[str, Any] = {"provider": output.api, "model": output.model or "unknown",
                                "defaults_source": {"model": "response"}}
    else:
        data = header.to_json()
        if output.model and output.model != header.model:
            data["requested_model"] = header.model
            data["model"] = output.model
            data["defaults_source"] = {**data["defaults_source"], "model": "response"}
    data["api"] = output.api
    if output.response_id:
        data["response_id"] = output.response_id
    return data


def message_data(output: ModelOutput,
                 is_used: Callable[[str], bool] = lambda call_id: False) -> dict[str, Any]:
    """``assistant/message`` data for ``output``.

    A call id the session already used (some servers number calls per response) is
    suffixed so it stays unique; the provider's id is kept as ``provider_call_id``.
    """
    used: set[str] = set()

    def taken(call_id: str) -> bool:
        return call_id in used or is_used(call_id)

    calls = []
    invalid = [w for w in output.withheld if w.reason == "invalid-arguments"]
    withheld_ids: dict[int, str] = {}
    declared: list[OutputCall | WithheldCall] = [*output.tool_calls, *invalid]
    for c in declared:
        call: dict[str, Any] = {"call_id": c.call_id, "name": c.name,
                                "arguments": c.arguments if isinstance(c, OutputCall) else {}}
        if taken(c.call_id):
            n = 2
            while taken(f"{c.call_id}~{n}"):
                n += 1
            call["call_id"] = f"{c.call_id}~{n}"
            call["provider_call_id"] = c.call_id
        used.add(call["call_id"])
        calls.append(call)
        if not isinstance(c, OutputCall):
            withheld_ids[id(c)] = call["call_id"]
    content: Any = output.text or (output.refusal or "")
    if output.text_parts:  # several text blocks: kept apart, to go back block for block
        content = [{"type": "text", "text": t} for t in output.text_parts]
    data: dict[str, Any] = {"content": content, "tool_calls": calls,
                            "stop_reason": output.stop_reason}
    if output.usage is not None:
        data["usage"] = dict(output.usage)
    if output.model:
        data["model"] = output.model
    data["api"] = output.api
    if output.provider_stop_reason is not None:
        data["provider_stop_reason"] = output.provider_stop_reason
    if output.refusal:
        data["refusal"] = output.refusal
    if output.withheld:
        data["withheld_tool_calls"] = [
            {**w.to_json(), "call_id": withheld_ids.get(id(w), w.call_id)}
            for w in output.withheld]
    if output.omitted:
        data["omitted_output"] = dict(output.omitted)
    if output.reasoning:
        data["reasoning"] = [dict(r) for r in output.reasoning]
    if output.blocks:
        data["blocks"] = list(output.blocks)
    if output.response_id:
        data["response_id"] = output.response_id
    return data


def drafts_for(output: ModelOutput, header: RequestHeader | None, *,
               is_used: Callable[[str], bool] = lambda call_id: False,
               provider: str | None = None, catalog: Catalog | None = None) -> list[Draft]:
    """The drafts recording ``output`` (schema-checked before anything is appended)."""
    hdata = header_data(output, header)
    mdata = message_data(output, is_used)
    mdata["provider"] = provider or hdata["provider"]
    drafts = [Draft("request/header", hdata)]
    drafts += [Draft("assistant/chunk", {"text": t, "index": i})
               for i, t in enumerate(output.chunks)]
    drafts.append(Draft("assistant/message", mdata))
    cat = catalog or default_catalog()
    for d in drafts:
        cat.validate(d.type, d.data)
    return drafts


def record(log: Appender, output: ModelOutput, header: RequestHeader | None, *,
           session: Session | None = None) -> list[Event]:
    """Append the events of one model answer through ``log``'s rules.

    ``session``: the session behind ``log`` (default: ``log`` itself, or its
    ``.session``), asked which call ids are already used.
    """
    s = session if session is not None else getattr(log, "session", log)
    is_used = s.call_id_used if isinstance(s, Session) else (lambda call_id: False)
    return [log.append(d) for d in drafts_for(output, header, is_used=is_used,
                                              catalog=getattr(s, "catalog", None))]


def parse(api: str, raw: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> ModelOutput:
    """A whole response body (a mapping) or a stream of events (any other iterable)."""
    if isinstance(raw, Mapping):
        return parse_response(api, raw)
    parser = stream_parser(api)
    for event in raw:
        parser.feed(event)
    return parser.finish()
