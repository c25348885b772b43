"""Each README framework example, switched to the fleet as its comment says, run twice in
a row by two processes that exit without closing anything (as request handlers do): the
second run continues the first's history at once — no lease left to wait out."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import unique

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _twice(heading: str, topic: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SESSIONSTREAM_EVENTS_TOPIC": topic,
           "SESSIONSTREAM_KEY_PREFIX": unique("readme")}
    out = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "tests.integration.readme_child", heading],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-3000:]
        out.append(run.stdout.strip().splitlines()[-1])
    return out


def test_the_agents_sdk_example_runs_twice_in_a_row(unique_topic: Callable[..., str]) -> None:
    first, second = _twice("Under an agent framework: the OpenAI Agents SDK", unique_topic(4))
    assert first == "Paris. Rome. 4"
    assert second == "Paris. Rome. 8"  # the same conversation, continued by a new process


def test_the_adk_example_runs_twice_in_a_row(unique_topic: Callable[..., str]) -> None:
    first, second = _twice("Google ADK sessions on sessionstream", unique_topic(4))
    assert first == second == "Where is my order? {'user:lang': 'en'}"


def test_the_langgraph_example_runs_twice_in_a_row(unique_topic: Callable[..., str]) -> None:
    first, second = _twice("LangGraph checkpoints on sessionstream", unique_topic(4))
    assert first == "['hi', 'step', 'again', 'step']"
    assert second == "['hi', 'step', 'again', 'step', 'hi', 'step', 'again', 'step']"
