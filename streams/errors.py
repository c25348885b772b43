"""Errors of the stream processors.

::

    SessionStreamError (sessionstream.core.errors)
    └── StreamsError
        ├── SinkError           Redis refused or lost a write after the retry budget (replay,
        │                       CLI reads; the worker itself retries without a budget)
        ├── LogReadError        the events topic could not be read back for a rebuild
        ├── GenerationError     a replay generation could not be built or switched to
        └── TopicMissing        the worker's events or dead-letter topic does not exist
"""

from __future__ import annotations

from sessionstream.core.errors import SessionStreamError


class StreamsError(SessionStreamError):
    """Root of the streams package errors."""


class SinkError(StreamsError):
    pass


class LogReadError(StreamsError):
    pass


class GenerationError(StreamsError):
    pass


class TopicMissing(StreamsError):
    pass
