"""Helpers for the producer integration tests: a writer config on a unique topic/prefix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sessionstream.core.settings import Settings
from sessionstream.producers.writer import SessionWriter, WriterConfig


@pytest.fixture
def writer_cfg(
    settings: Settings, unique_topic: Callable[..., str], redis_prefix: str, tmp_path: Path
) -> WriterConfig:
    """A WriterConfig on a fresh 4-partition topic and a unique Redis key prefix."""
    return WriterConfig(
        bootstrap=settings.kafka_bootstrap,
        topic=unique_topic(4),
        redis_url=settings.redis_url,
        tenant="default",
        key_prefix=redis_prefix,
        attachment_dir=tmp_path / "attachments",
        lease_ttl_ms=10_000,
    )


def tool_turn(w: SessionWriter, n: int = 0, *, close: bool = True) -> None:
    """One small two-step tool turn (left open after tool/call when ``close`` is False)."""
    w.append("turn/start", {})
    w.append("user/message", {"content": f"question {n}"})
    w.append("step/start", {})
    w.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": f"c{n}-{w.next_seq}", "name": "ls", "arguments": {}}
    w.append("assistant/message", {"content": "", "tool_calls": [call]})
    w.append("tool/call", call)
    if not close:
        return
    w.append("tool/result", {"call_id": call["call_id"], "status": "ok", "content": "a b"})
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})
