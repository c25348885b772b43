"""Response recorder: a provider's answer (whole or streamed) becomes events.

One model step's answer is recorded as ``request/header`` (the routing actually used:
the model the provider reports, the API, the response id), one ``assistant/chunk`` per
streamed text delta, and ``assistant/message`` with content, tool calls, stop reason,
usage and refusal. Everything goes through the session's rules (``Session.append`` or a
``SessionWriter``). Tool calls the output withheld (cut at max_tokens, unparseable
arguments) are kept on the message as ``withheld_tool_calls`` and never declared, so
nothing can execute a truncated call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sessionstream.core.catalog import Catalog, default_catalog
from sessionstream.core.events import Draft, Event
from sessionstream.core.providers import parse_response, stream_parser
from sessionstream.core.providers.output import ModelOutput
from sessionstream.core.request import RequestHeader


class Appender(Protocol):
    """What the recorder and the harness loop write through: a Session or a SessionWriter."""

    def append(self, draft_or_type: Draft | str, data: Any = None, **kw: Any) -> Event: ...


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


def message_data(output: ModelOutput, used_call_ids: Iterable[str] = ()) -> dict[str, Any]:
    """``assistant/message`` data for ``output``.

    A call id the session already used (some servers number calls per response) is
    suffixed so it stays unique; the provider's id is kept as ``provider_call_id``.
    """
    used = set(used_call_ids)
    calls = []
    for c in output.tool_calls:
        call: dict[str, Any] = {"call_id": c.call_id, "name": c.name, "arguments": c.arguments}
        if c.call_id in used:
            n = 2
            while f"{c.call_id}~{n}" in used:
                n += 1
            call["call_id"] = f"{c.call_id}~{n}"
            call["provider_call_id"] = c.call_id
        used.add(call["call_id"])
        calls.append(call)
    content = output.text or (output.refusal or "")
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
        data["withheld_tool_calls"] = [w.to_json() for w in output.withheld]
    if output.response_id:
        data["response_id"] = output.response_id
    return data


def used_call_ids(events: Iterable[Event]) -> set[str]:
    """Every call id the log's assistant messages declared."""
    return {c["call_id"] for e in events if e.type == "assistant/message"
            for c in e.data.get("tool_calls", ())}


def drafts_for(output: ModelOutput, header: RequestHeader | None, *,
               used: Iterable[str] = (), provider: str | None = None,
               catalog: Catalog | None = None) -> list[Draft]:
    """The drafts recording ``output`` (schema-checked before anything is appended)."""
    hdata = header_data(output, header)
    mdata = message_data(output, used)
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
           events: Iterable[Event] = ()) -> list[Event]:
    """Append the events of one model answer; ``events``: the log so far (call ids)."""
    return [log.append(d) for d in drafts_for(output, header, used=used_call_ids(events))]


def parse(api: str, raw: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> ModelOutput:
    """A whole response body (a mapping) or a stream of events (any other iterable)."""
    if isinstance(raw, Mapping):
        return parse_response(api, raw)
    parser = stream_parser(api)
    for event in raw:
        parser.feed(event)
    return parser.finish()
