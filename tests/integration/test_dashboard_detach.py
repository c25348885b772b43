"""``sessionstream dashboard --detach`` / ``--stop`` (what ``make demo`` ends with)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sessionstream.core.settings import Settings


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def test_detach_prints_a_url_that_answers_and_stop_ends_that_process(
    tmp_path: Path, settings: Settings, redis_prefix: str,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SESSIONSTREAM_STATE_DIR": str(tmp_path),
           "SESSIONSTREAM_KEY_PREFIX": redis_prefix, "SESSIONSTREAM_REDIS_URL": settings.redis_url}
    started = _cli("dashboard", "--detach", "--port", str(port), env=env)
    try:
        assert started.returncode == 0, started.stderr
        url = f"http://127.0.0.1:{port}/"
        assert url in started.stdout and "dashboard --stop" in started.stdout
        with urllib.request.urlopen(url + "healthz", timeout=5) as r:
            assert json.load(r)["prefix"] == redis_prefix
        # The local default: a token of the tenant, kept in the state dir; printed by
        # --login-url only, never by the banner.
        token = json.loads((tmp_path / "secrets" / "default.json").read_text())[
            "dashboard_token"]
        assert token not in started.stdout + started.stderr
        assert "--login-url" in started.stdout
        login = _cli("dashboard", "--login-url", env=env)
        assert login.returncode == 0 and login.stdout.strip() == f"{url}?token={token}"
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(url + "api/sessions", timeout=5)
        with pytest.raises(urllib.error.HTTPError, match="401"):  # not in a URL
            urllib.request.urlopen(f"{url}api/sessions?token={token}", timeout=5)
        authed = urllib.request.Request(url + "api/sessions",
                                        headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(authed, timeout=5) as r:
            assert json.load(r)["tenant"] == "default"
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(login.stdout.strip(), timeout=5) as r:  # the page's login
            assert r.status == 200 and r.url == url
        pid = int((tmp_path / "dashboard" / "dashboard.pid").read_text().split()[0])
        again = _cli("dashboard", "--detach", "--port", str(port), env=env)
        assert "already running" in again.stdout and str(pid) in again.stdout
    finally:
        stopped = _cli("dashboard", "--stop", env=env)
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert not Path(f"/proc/{pid}").exists() or b"dashboard" not in Path(
        f"/proc/{pid}/cmdline").read_bytes()
    assert "no detached dashboard" in _cli("dashboard", "--stop", env=env).stdout
    # Every log the run wrote (the server's banner and access log included): no token.
    logs = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".log", ".out")]
    assert logs and all(token not in p.read_text(errors="replace") for p in logs), logs
    server_log = pid_log = tmp_path / "dashboard" / "dashboard.log"
    assert "GET /api/sessions" in server_log.read_text()  # the access log is there
    assert oct(pid_log.stat().st_mode & 0o777) == "0o600"
