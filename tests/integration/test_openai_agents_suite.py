"""The OpenAI Agents SDK's own session tests, run on SessionstreamSession over the fleet.

The SDK's sdist ships its tests/; this test fetches the sdist of the installed version
with pip (once, into the cache dir), unpacks it, and runs one bounded pytest subprocess
inside it with ``tests/frameworks/openai_agents_plugin.py``, which swaps the sessions the
SDK's tests build (``SQLiteSession``, ``SimpleListSession``) for ours on a fresh topic and
key prefix of the real Kafka + Redis. Run: ``tests/memory/test_session*.py``,
``tests/deferred_session_writes/``, ``tests/test_hitl_session_scenario.py`` whole, and
the tests of the runner files that build one of those sessions.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionstream.core.settings import Settings
from tests.integration.sdists import unpacked_sdist

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "tests" / "frameworks"
SUITE = [
    "tests/memory/test_session.py", "tests/memory/test_session_limit.py",
    "tests/memory/test_session_persistence_sanitize.py",
    "tests/memory/test_session_context_wrapper.py",
    # the SDK's compaction and encryption wrappers over our session (its private hooks)
    "tests/memory/test_compaction_suffix.py", "tests/memory/test_compaction_model_visibility.py",
    "tests/extensions/memory/test_encrypt_session.py",
    "tests/deferred_session_writes", "tests/test_hitl_session_scenario.py",
    # runner tests: the plugin keeps only those that build SimpleListSession/SQLiteSession
    "tests/test_agent_runner.py", "tests/test_agent_runner_streamed.py",
    "tests/test_cancel_streaming.py", "tests/test_handoff_history_duplication.py",
    "tests/test_invalid_final_output_handler.py", "tests/test_max_turns.py",
    "tests/test_native_tool_failure_history.py", "tests/test_programmatic_tool_calling.py",
    "tests/test_prompt_cache_key.py", "tests/test_run_impl_resume_paths.py",
    "tests/test_run_state_pending_input.py", "tests/test_runner_guardrail_resume.py",
    "tests/test_runner_tracing_disabled.py", "tests/test_runtime_symmetry_contract.py",
    "tests/test_soft_cancel.py", "tests/test_tool_batch_failure_history.py",
    "tests/test_tool_failure_boundaries.py",
]
#: The whole run is one subprocess with this bound (seconds).
SUITE_TIMEOUT_S = 900


def test_the_agents_sdk_session_tests_pass_on_the_fleet_backend(
        settings: Settings, unique_topic: Callable[..., str], redis_prefix: str) -> None:
    tree = unpacked_sdist("openai-agents", settings.cache_dir)
    env = {**os.environ,
           "PYTHONPATH": str(PLUGIN_DIR),
           "SESSIONSTREAM_SDK_BACKEND": "fleet",
           "SESSIONSTREAM_EVENTS_TOPIC": unique_topic(4),
           "SESSIONSTREAM_KEY_PREFIX": redis_prefix}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "openai_agents_plugin", "-W", "ignore::DeprecationWarning", *SUITE],
        cwd=tree, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    tail = "\n".join(run.stdout.splitlines()[-40:])
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|deselected)",
                                                run.stdout.splitlines()[-1])}
    print(f"Agents SDK suite on the fleet backend: {counts}")
    assert run.returncode == 0, (
        f"the SDK's tests failed on our backend:\n{tail}\n{run.stderr[-2000:]}")
    assert counts.get("passed", 0) >= 600, tail  # the session tests did run
