"""Errors of the stream processors.

::

    SessionStreamError (sessionstream.core.errors)
    └── StreamsError
        ├── SinkError           Redis refused or lost a write after the retry budget (replay,
        │                       CLI reads; the worker itself retries without a budget)
        ├── GenerationError     a replay generation could not be built or switched to
        └── TopicMissing        the worker's events or dead-letter topic does not exist

Reading a session back for a rebuild raises ``producers.errors.ReadBackError`` (or
``BrokerUnavailable``): there is one reader of a session's records,
``producers.readback.scan_session``.
"""

from __future__ import annotations

from sessionstream.core.errors import SessionStreamError


class StreamsError(SessionStreamError):
    """Root of the streams package errors."""


class SinkError(StreamsError):
    pass


class GenerationError(StreamsError):
    pass


class TopicMissing(StreamsError):
    pass
