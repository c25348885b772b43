"""The framework backends beside the frameworks' own, one module per framework.

Each module (``sdk``, ``adk``, ``langgraph``) has ``run(ctx) -> list[Result]``: it runs
the framework's workloads on the fleet store (real Kafka + Redis) and on the backends
the framework ships (its SQLite, its Redis), in the same run, and returns one
:class:`~bench.results.Result` per target (ours / theirs, p50 over rounds). A workload
"from a fresh process" runs in a child process (:func:`child`) that builds the
framework's session object per request, as a stateless web tier does.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.results import Spread
from sessionstream.core.settings import Env, Settings

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ctx:
    """What a framework bench gets: settings, size, a fresh topic and key prefix each."""

    settings: Settings
    quick: bool
    rounds: int
    tmp: Path
    _topics: list[str] = field(default_factory=list)

    def topic(self, partitions: int = 4) -> str:
        """A fresh events topic (deleted at the end of the run)."""
        name = f"ssbench.fw.{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        self._topics.append(name)
        return name

    @property
    def prefix(self) -> str:
        """A fresh Redis key prefix."""
        return f"ssbench-{uuid.uuid4().hex[:8]}"

    def env(self, topic: str, prefix: str, **extra: str) -> dict[str, str]:
        """The environment of a child (or this process's settings) on that topic."""
        return {Env.EVENTS_TOPIC: topic, Env.KEY_PREFIX: prefix, **extra}

    def settings_for(self, topic: str, prefix: str, **extra: str) -> Settings:
        return Settings.from_env({**os.environ, **self.env(topic, prefix, **extra)})

    def cleanup(self) -> None:
        if self._topics:
            admin = AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap})
            for fut in admin.delete_topics(self._topics).values():
                with contextlib.suppress(Exception):  # a bench that failed half-way
                    fut.result(30)


def ms(seconds: Iterable[float]) -> Spread:
    """Timings (seconds) as a spread in ms."""
    return Spread.of(s * 1000 for s in seconds)


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    """``n`` timings of ``fn()`` (seconds)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def p50(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def child(module: str, job: str, args: dict[str, Any], env: dict[str, str],
          timeout: float = 600) -> Any:
    """Run ``python -m <module> <job> <json args>`` as a fresh process; its last stdout
    line is its JSON result."""
    run = subprocess.run(
        [sys.executable, "-m", module, job, json.dumps(args)],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT,
        capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"{module} {job} failed: {run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def child_main(jobs: dict[str, Callable[[dict[str, Any]], Any]]) -> None:
    """The ``__main__`` of a framework module run as a child (see :func:`child`)."""
    job, raw = sys.argv[1], sys.argv[2]
    print(json.dumps(jobs[job](json.loads(raw))), flush=True)
