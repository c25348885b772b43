"""Provider request builders and response recorders (the harness boundary, pure).

``build(api, request)`` turns an assembled :class:`~sessionstream.core.request.Request`
into the request body of one provider API; ``parse_response(api, body)`` and
``stream_parser(api)`` turn what the provider returned into a neutral
:class:`~sessionstream.core.providers.output.ModelOutput`, which
:mod:`sessionstream.core.recorder` turns into events. The mapping tables are in
docs/harness.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sessionstream.core.providers import anthropic, gemini, openai_chat, openai_responses
from sessionstream.core.providers.common import APIS, Built
from sessionstream.core.providers.errors import ProviderMappingError, ProviderResponseError
from sessionstream.core.providers.fields import kind_of
from sessionstream.core.providers.output import ModelOutput
from sessionstream.core.request import Request

_BUILDERS = {
    openai_chat.API: openai_chat.build,
    openai_responses.API: openai_responses.build,
    anthropic.API: anthropic.build,
    gemini.API: gemini.build,
}


_PARSERS = {
    openai_chat.API: openai_chat.parse_response,
    openai_responses.API: openai_responses.parse_response,
    anthropic.API: anthropic.parse_response,
    gemini.API: gemini.parse_response,
}


class StreamParser(Protocol):
    """Folds one API's stream events; ``feed`` returns the text deltas of an event."""

    api: str

    def feed(self, event: Mapping[str, Any]) -> list[str]: ...

    def finish(self) -> ModelOutput: ...


_STREAMS: dict[str, type[StreamParser]] = {
    openai_chat.API: openai_chat.ChatStreamParser,
    openai_responses.API: openai_responses.ResponsesStreamParser,
    anthropic.API: anthropic.AnthropicStreamParser,
    gemini.API: gemini.GeminiStreamParser,
}


def check_api(api: str) -> str:
    if api not in _BUILDERS:
        raise ProviderMappingError(f"unknown provider API {api!r} (known: {', '.join(APIS)})")
    return api


def build(api: str, request: Request, **options: Any) -> Built:
    """The request body of ``api`` for ``request``, with the origin of every part."""
    return _BUILDERS[check_api(api)](request, **options)


def parse_response(api: str, body: Mapping[str, Any]) -> ModelOutput:
    """A whole (non-streaming) response body of ``api`` → ModelOutput."""
    check_api(api)
    if not isinstance(body, Mapping):
        raise ProviderResponseError(api, "$", f"expected a response object, got "
                                    f"{kind_of(body)}")
    return _PARSERS[api](body)


def stream_parser(api: str) -> StreamParser:
    """A fresh parser for one stream of ``api`` events."""
    return _STREAMS[check_api(api)]()


def parse_stream(api: str, events: Iterable[Mapping[str, Any]]) -> ModelOutput:
    """A whole stream of ``api`` events → ModelOutput (IncompleteStream if cut)."""
    parser = stream_parser(api)
    for event in events:
        parser.feed(event)
    return parser.finish()


__all__ = ["APIS", "Built", "ModelOutput", "StreamParser", "build", "check_api", "parse_response",
           "parse_stream", "stream_parser"]
