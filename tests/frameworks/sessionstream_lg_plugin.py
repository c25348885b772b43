"""A pytest plugin that runs LangGraph's own graph tests (from its sdist) against
``SessionStreamSaver``: it replaces the suite's ``sync_checkpointer`` and
``async_checkpointer`` fixtures with one parameter, ``sessionstream``.

Loaded by tests/integration/test_langgraph_graph_suite.py as ``-p sessionstream_lg_plugin``
(this folder on PYTHONPATH). ``SESSIONSTREAM_LG_BACKEND``: ``fleet`` (default: Kafka +
Redis from the ``SESSIONSTREAM_*`` settings) or ``memory``. Every test gets its own
session-id prefix, so the suite's reused thread ids ("1", "2"…) never meet across tests.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from sessionstream.integrations.langgraph import SessionStreamSaver


def _saver() -> SessionStreamSaver:
    prefix = f"lg-{uuid.uuid4().hex[:12]}-"
    if os.environ.get("SESSIONSTREAM_LG_BACKEND", "fleet") == "memory":
        return SessionStreamSaver.memory(session_prefix=prefix)
    return SessionStreamSaver.fleet(session_prefix=prefix)


@pytest.fixture(name="sync_checkpointer", params=["sessionstream"])
def _sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[SessionStreamSaver]:
    saver = _saver()
    try:
        yield saver
    finally:
        saver.close()


@pytest.fixture(name="async_checkpointer", params=["sessionstream"])
async def _async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[SessionStreamSaver]:
    saver = _saver()
    try:
        yield saver
    finally:
        saver.close()


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    """Before pytest reads the suite's conftest fixtures, put ours in their place."""
    if getattr(plugin, "__name__", None) == "tests.conftest":
        plugin.sync_checkpointer = _sync_checkpointer
        plugin.async_checkpointer = _async_checkpointer
