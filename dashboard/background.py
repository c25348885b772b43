"""Run the dashboard in the background (``sessionstream dashboard --detach`` / ``--stop``).

Used by ``make demo`` so the demo ends with a dashboard to look at. The process is
started in its own session with a pid file and a log under the state directory; only
the process named by that pid file (and still a dashboard) is ever stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Detached:
    pid: int
    url: str
    log: Path
    pid_file: Path
    already_running: bool = False


def pid_file(state_dir: Path) -> Path:
    return state_dir / "dashboard" / "dashboard.pid"


def _running(path: Path) -> tuple[int, str] | None:
    """(pid, url) of the dashboard our pid file names, if it is alive and a dashboard."""
    try:
        pid_text, url = path.read_text(encoding="utf-8").split()[:2]
        pid = int(pid_text)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return (pid, url) if b"dashboard" in cmdline else None


def running_url(state_dir: Path) -> str | None:
    """The URL of the detached dashboard of ``state_dir``, if one runs."""
    found = _running(pid_file(state_dir))
    return None if found is None else found[1]


def start(state_dir: Path, host: str, port: int, *, timeout_s: float = 20.0) -> Detached:
    """Start ``sessionstream dashboard`` detached and wait until ``/healthz`` answers.

    Raises RuntimeError (with the log's path) when it does not come up in time.
    """
    path = pid_file(state_dir)
    log = path.with_suffix(".log")
    found = _running(path)
    if found is not None:
        return Detached(found[0], found[1], log, path, already_running=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://{host}:{port}/"
    # The log is the owner's only (0600): it holds no credential, but it is the server's.
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sessionstream.cli.main", "dashboard", "--host", host,
             "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=os.environ.copy(), start_new_session=True)
    path.write_text(f"{proc.pid} {url}\n", encoding="utf-8")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            path.unlink(missing_ok=True)
            raise RuntimeError(f"the dashboard exited with status {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url + "healthz", timeout=2) as resp:
                if resp.status == 200:
                    return Detached(proc.pid, url, log, path)
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    path.unlink(missing_ok=True)
    raise RuntimeError(f"the dashboard did not answer {url}healthz in {timeout_s:.0f} s; "
                       f"see {log}")


def stop(state_dir: Path, *, timeout_s: float = 10.0) -> int | None:
    """Stop the detached dashboard; its pid, or None when none was running."""
    path = pid_file(state_dir)
    found = _running(path)
    path.unlink(missing_ok=True)
    if found is None:
        return None
    pid = found[0]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return pid
