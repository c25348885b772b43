"""The fleet simulator: many agent processes, crashes, resumes — every log stays exact."""

from __future__ import annotations

import pytest

from sessionstream.producers.fleet import run_fleet
from sessionstream.producers.writer import WriterConfig
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


def test_200_sessions_by_8_processes_are_in_order_and_contiguous(
    writer_cfg: WriterConfig,
) -> None:
    s = run_fleet(writer_cfg, agents=8, sessions=200, turns=2, progress=False)
    assert s.problems == []
    assert s.sessions_ok == 200
    assert s.rejections == 0
    assert s.events_in_log == s.events_appended + 200  # + one session/start each


def test_crashed_agents_sessions_are_resumed_by_other_processes(
    writer_cfg: WriterConfig,
) -> None:
    s = run_fleet(writer_cfg, agents=4, sessions=16, turns=3, crash_rate=0.3, seed=7,
                  progress=False)
    assert s.problems == []
    assert s.crashes > 0 and s.resumes == s.crashes
    assert s.sessions_ok == 16
    assert s.rejections == 0
