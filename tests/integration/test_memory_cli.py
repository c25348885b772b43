"""`sessionstream memory` against the real Kafka and Redis: list, search, explain (no
content), confirm, forget, and errors that say how to fix with the CLI's exit codes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionstream.core.memory import Actor, Role
from sessionstream.core.settings import Settings
from sessionstream.governance.wiring import key_store
from sessionstream.integrations.memory import FleetBackend, MemoryClient

pytestmark = pytest.mark.integration


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", "memory", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_memory_commands(settings: Settings, unique_topic: Callable[..., str],
                             redis_prefix: str, tmp_path: Path) -> None:
    topic = unique_topic(2)
    env = {**os.environ, "SESSIONSTREAM_MEMORY_TOPIC": topic,
           "SESSIONSTREAM_KEY_PREFIX": redis_prefix,
           "SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
           "SESSIONSTREAM_TENANT_KEY_DIR": str(tmp_path / "tenant-keys")}
    s = dataclasses.replace(Settings.from_env(env))
    backend = FleetBackend(s, key_store(s), encryption=True)
    mem = MemoryClient(backend, Actor(Role.AGENT, "bot", user="ada"))
    v = mem.propose("Prefers the aisle seat", kind="preference", sources=[("s-7", [2, 3])])
    guess = MemoryClient(backend, Actor(Role.EXTRACTOR, "x", user="ada")).propose(
        "Always reply in Spanish", kind="instruction", sources=[("s-8", [1])])

    listed = json.loads(_run(env, "list", "--user", "ada", "--json").stdout)
    assert [m["ref"] for m in listed] == [str(v.ref)]
    found = json.loads(_run(env, "search", "--user", "ada", "aisle", "--json").stdout)
    assert found[0]["content"] == "Prefers the aisle seat"
    explained = _run(env, "explain", "--user", "ada", v.ref.id)
    assert "from session s-7 seqs [2, 3]" in explained.stdout
    assert "aisle" not in explained.stdout  # never the content
    assert _run(env, "confirm", "--user", "ada", "--as", "user", str(guess.ref)
                ).returncode == 0
    assert len(json.loads(_run(env, "list", "--user", "ada", "--json").stdout)) == 2
    assert _run(env, "forget", "--user", "ada", v.ref.id).returncode == 0
    assert [m["ref"] for m in json.loads(
        _run(env, "list", "--user", "ada", "--json").stdout)] == [str(guess.ref)]
    missing = _run(env, "explain", "--user", "ada", "nope")
    assert missing.returncode == 2 and "memory list" in missing.stderr
    assert _run(env, "list").returncode == 2  # no namespace named
    backend.close()
