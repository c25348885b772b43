"""Errors of the harness boundary (provider bodies, responses, streams, imports)::

    SessionStreamError
    └── ProviderError
        ├── ProviderMappingError     the request cannot be expressed in the provider format
        ├── ProviderResponseError    a response or stream event of the wrong shape (names where)
        ├── IncompleteStream         a stream ended before its final event (nothing recorded)
        │   └── StreamInterrupted    the transport broke the stream off (connection, read)
        ├── ConversationImportError  a provider conversation that cannot become a session
        │   ├── FieldTypeError       a body field of the wrong JSON kind (names the pointer)
        │   └── NestingTooDeep       a body nested deeper than the log can store
        └── ToolResultError          a tool result for a call the step did not make
"""

from __future__ import annotations

from sessionstream.core.errors import SessionStreamError


class ProviderError(SessionStreamError):
    """Root of the harness-boundary errors."""


class ProviderMappingError(ProviderError):
    """The assembled request cannot be expressed in the provider's request format."""


class ProviderResponseError(ProviderError):
    """A provider response (or one stream event) does not have the shape of its API."""

    def __init__(self, api: str, path: str, reason: str) -> None:
        self.api = api
        self.path = path
        self.reason = reason
        super().__init__(f"{api} response at {path}: {reason}")


class IncompleteStream(ProviderError):
    """The stream stopped before its final event; nothing of it is recorded."""

    def __init__(self, api: str, reason: str, open_tool_calls: tuple[str, ...] = ()) -> None:
        self.api = api
        self.reason = reason
        self.open_tool_calls = open_tool_calls
        calls = (f"; tool call(s) {', '.join(open_tool_calls)} were cut mid-arguments"
                 if open_tool_calls else "")
        super().__init__(f"{api} stream incomplete: {reason}{calls}; nothing was recorded "
                         "(retry the step)")


class StreamInterrupted(IncompleteStream):
    """The transport broke a stream off (the SDK's connection error, a read error): the
    harness's one error for it, whatever the client library; nothing was recorded."""

    def __init__(self, api: str, cause: str) -> None:
        super().__init__(api, f"the connection broke mid-stream ({cause})")


class ConversationImportError(ProviderError):
    """A provider conversation that cannot be imported; names the file and JSON path."""

    def __init__(self, source: str, path: str, reason: str) -> None:
        self.source = source
        self.path = path
        self.reason = reason
        super().__init__(f"{source}: at {path}: {reason}")


class FieldTypeError(ConversationImportError):
    """A field of an imported body has a JSON kind its API does not accept (a string
    ``max_tokens``, a numeric ``reasoning_effort``): refused, never exported invalid."""

    def __init__(self, source: str, path: str, expected: tuple[str, ...], got: str) -> None:
        self.expected = expected
        self.got = got
        super().__init__(source, path, f"expected {' or '.join(expected)}, got {got}")


class NestingTooDeep(ConversationImportError):
    """An imported body nests deeper than event data may (checked before anything is
    read, so a pathological body cannot exhaust the stack)."""

    def __init__(self, source: str, path: str, limit: int) -> None:
        self.limit = limit
        shown = path if path.count("/") <= 12 else "/".join(path.split("/")[:13]) + "/…"
        super().__init__(source, shown, f"nested deeper than {limit} levels (the session "
                         "log stores at most that)")


class ToolResultError(ProviderError):
    """A tool result for a call the current step did not make (or already answered)."""
