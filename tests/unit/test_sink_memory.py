"""The sink contract over the in-memory sink (``streams.memory.MemorySink``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessionstream.streams.memory import MemorySink
from tests.contract.sink_contract import SinkContract


class MemoryHarness:
    def __init__(self) -> None:
        self.sink = MemorySink()

    async def set_generation(self, gen: int) -> None:
        self.sink.gen = gen

    async def session_changes(self, gen: int, session_id: str) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.sink.changes.get((gen, session_id), [])]

    async def feed(self, gen: int) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.sink.feed.get(gen, [])]

    async def set_writer_first_offset(self, session_id: str, offset: int) -> None:
        self.sink.writer_offsets[session_id] = offset


class TestMemorySink(SinkContract):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()
