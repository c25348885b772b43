"""Run Python modules (faust workers, CLI commands) as subprocesses in tests.

Output goes to a log file (never a pipe that could fill up and block the child); failures
quote its tail. Every process is stopped at teardown, however the test ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The kafka-engine worker's module (``python -m``).
WORKER = "sessionstream.streams.engine_kafka"


class ManagedProcess:
    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log_path: Path):
        self.name = name
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args, env={**os.environ, **env}, cwd=ROOT, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``condition`` until true; fail early if the process exits."""
        deadline = time.monotonic() + timeout
        while not condition():
            if not self.running():
                raise AssertionError(f"{self.name} exited with {self.proc.returncode} "
                                     f"while waiting for {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} "
                                     f"({self.name}):\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self) -> int:
        """SIGKILL the whole process group (no cleanup, like a crashed container)."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(10)


class ProcessGroup:
    """Starts processes with logs under ``log_dir``; ``kill_all`` ends any still running."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: list[ManagedProcess] = []

    def start_module(self, module: str, *args: str, env: Mapping[str, str] | None = None,
                     name: str | None = None) -> ManagedProcess:
        name = name or module
        log = self.log_dir / f"{name.replace('/', '_')}-{len(self.started)}.log"
        proc = ManagedProcess(name, [sys.executable, "-m", module, *args], env or {}, log)
        self.started.append(proc)
        return proc

    @property
    def faust_datadir(self) -> Path:
        """Where the faust workers of this group keep their data (the test's temp dir,
        not the checkout faust would default to, nor the shared state dir)."""
        return self.log_dir / "faust"

    def start_faust_worker(self, app: str, env: Mapping[str, str]) -> ManagedProcess:
        from sessionstream.cli.streams import (
            faust_loop,  # the loop `sessionstream worker` runs faust on
        )

        env = {"SESSIONSTREAM_FAUST_DATADIR": str(self.faust_datadir), **env}
        return self.start_module("faust", "--loop", faust_loop(), "-A", app, "worker",
                                 "--without-web", "-l", "info", env=env,
                                 name=f"faust-{app}")

    def run_module(self, module: str, *args: str, env: Mapping[str, str] | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run to completion and capture output (for short CLI commands)."""
        return subprocess.run(
            [sys.executable, "-m", module, *args], env={**os.environ, **(env or {})}, cwd=ROOT,
            capture_output=True, text=True, timeout=timeout,
        )

    def kill_all(self) -> None:
        for proc in self.started:
            proc.kill()
