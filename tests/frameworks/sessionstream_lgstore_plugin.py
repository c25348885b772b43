"""A pytest plugin that runs LangGraph's own store tests (``langgraph-checkpoint-sqlite``'s
``tests/test_store.py``, ``test_async_store.py`` and ``test_ttl.py``, from its sdist)
against ``SessionstreamStore``: ``SqliteStore.from_conn_string`` / ``AsyncSqliteStore``
hand out our store instead, each on a fresh user namespace, so every fixture and helper
of the suite builds ours. ``SESSIONSTREAM_LGSTORE_BACKEND``: ``memory`` (default) or
``fleet`` (Kafka + Redis from the ``SESSIONSTREAM_*`` settings).

The TTL tests sleep on the wall clock; the store takes an injected clock, and
``time.sleep`` / ``asyncio.sleep`` here advance it as well (the suite's waits stay real
but the store's expiry does not depend on the box's speed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sessionstream.integrations.langgraph_store import SessionstreamStore
from sessionstream.integrations.memory import FleetBackend, InMemoryBackend, MemoryBackend

_BACKEND: list[MemoryBackend] = []


def _backend() -> MemoryBackend:
    if not _BACKEND:
        if os.environ.get("SESSIONSTREAM_LGSTORE_BACKEND", "memory") == "fleet":
            _BACKEND.append(FleetBackend.from_settings())
        else:
            _BACKEND.append(InMemoryBackend("default"))
    return _BACKEND[0]


class _Store(SessionstreamStore):
    """Ours, with the SqliteStore methods the suite calls around the store itself."""

    def setup(self) -> None:  # the suite creates tables; we have none
        pass

    async def asetup(self) -> None:
        pass

    def start_ttl_sweeper(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def stop_ttl_sweeper(self, *args: Any, **kwargs: Any) -> bool:
        return True


class _AsyncStore(SessionstreamStore):
    """Ours, with the AsyncSqliteStore methods the async suite awaits."""

    async def setup(self) -> None:
        pass

    async def sweep_ttl(self) -> int:  # type: ignore[override]
        return await self.asweep_ttl()

    async def start_ttl_sweeper(self, *args: Any, **kwargs: Any) -> Any:
        return None

    async def stop_ttl_sweeper(self, *args: Any, **kwargs: Any) -> bool:
        return True


#: Milliseconds the suite's sleeps added to the stores' clock (they do not sleep).
_SLEPT = [0]


def _clock() -> int:
    return time.time_ns() // 1_000_000 + _SLEPT[0]


class _Time:
    """``time`` for the TTL tests: ``sleep`` moves the stores' clock, it does not wait."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        _SLEPT[0] += int(seconds * 1000)


class _Asyncio:
    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(seconds: float, result: Any = None) -> Any:
        _SLEPT[0] += int(seconds * 1000)
        return await asyncio.sleep(0, result)


def _make(index: Any = None, ttl: Any = None, cls: type = _Store) -> Any:
    return cls(_backend(), user=f"lg-{uuid.uuid4().hex[:12]}", index=index, ttl=ttl,
               clock=_clock)


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__.endswith("test_ttl"):
            module.time = _Time()
            module.asyncio = _Asyncio()


@contextlib.contextmanager
def _from_conn_string(*_args: Any, index: Any = None, ttl: Any = None,
                      **_kw: Any) -> Iterator[_Store]:
    yield _make(index, ttl)


@contextlib.asynccontextmanager
async def _afrom_conn_string(*_args: Any, index: Any = None, ttl: Any = None,
                             **_kw: Any) -> AsyncIterator[_AsyncStore]:
    yield _make(index, ttl, _AsyncStore)


def pytest_configure(config: Any) -> None:
    from langgraph.store.sqlite import SqliteStore
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    SqliteStore.from_conn_string = staticmethod(_from_conn_string)  # type: ignore[assignment,method-assign]
    AsyncSqliteStore.from_conn_string = staticmethod(_afrom_conn_string)  # type: ignore[assignment,method-assign]
