"""sessionstream: the session store for fleets of AI agents — the public API.

``import sessionstream`` stays as light as the pure core: each name below is imported when
first used (so ``sessionstream.core`` never loads Kafka or Redis clients). Everything the
README shows comes from here; the submodules are the layers beneath (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sessionstream._version import __version__

#: Public name -> the module that defines it.
_HOME = {
    "Settings": "sessionstream.core.settings",
    "Session": "sessionstream.core.session", "Event": "sessionstream.core.events",
    "SessionWriter": "sessionstream.producers.writer",
    "WriterConfig": "sessionstream.producers.writer",
    "ViewReader": "sessionstream.streams.read", "LiveSnapshot": "sessionstream.streams.read",
    "Harness": "sessionstream.core.harness", "ToolContext": "sessionstream.core.harness",
    "ToolOutcome": "sessionstream.core.harness",
    "PromptRegistry": "sessionstream.core.request", "StaticTools": "sessionstream.core.request",
    "ToolSchema": "sessionstream.core.request", "resolve_header": "sessionstream.core.request",
    "SessionStreamError": "sessionstream.core.errors",
    "InvariantViolation": "sessionstream.core.errors",
    "Fenced": "sessionstream.producers.errors",
    "UnconfirmedEvents": "sessionstream.producers.errors",
    "SessionExists": "sessionstream.producers.errors",
    "SessionNotFound": "sessionstream.producers.errors",
}
__all__ = ["__version__", *_HOME]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'sessionstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the names for type checkers; `X as X` marks a re-export
    from sessionstream.core.errors import InvariantViolation as InvariantViolation
    from sessionstream.core.errors import SessionStreamError as SessionStreamError
    from sessionstream.core.events import Event as Event
    from sessionstream.core.harness import Harness as Harness
    from sessionstream.core.harness import ToolContext as ToolContext
    from sessionstream.core.harness import ToolOutcome as ToolOutcome
    from sessionstream.core.request import PromptRegistry as PromptRegistry
    from sessionstream.core.request import StaticTools as StaticTools
    from sessionstream.core.request import ToolSchema as ToolSchema
    from sessionstream.core.request import resolve_header as resolve_header
    from sessionstream.core.session import Session as Session
    from sessionstream.core.settings import Settings as Settings
    from sessionstream.producers.errors import Fenced as Fenced
    from sessionstream.producers.errors import SessionExists as SessionExists
    from sessionstream.producers.errors import SessionNotFound as SessionNotFound
    from sessionstream.producers.errors import UnconfirmedEvents as UnconfirmedEvents
    from sessionstream.producers.writer import SessionWriter as SessionWriter
    from sessionstream.producers.writer import WriterConfig as WriterConfig
    from sessionstream.streams.read import LiveSnapshot as LiveSnapshot
    from sessionstream.streams.read import ViewReader as ViewReader
