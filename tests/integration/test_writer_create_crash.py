"""A writer that dies (or pauses) inside create(), as processes against the real stack.

The id of a create() that died before its ``session/start`` was admitted was never
started: another process creates it (at a new epoch) or, if the dead attempt's start was
admitted, opens it. One history either way, and a late record of the dead attempt is
refused where it lands. Lease TTLs are short, so each case takes a few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sessionstream.core.admission import Verdict
from sessionstream.producers.errors import LeaseUnavailable, SessionExists, SessionNotFound
from sessionstream.producers.fleet import run_fleet
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.conftest import unique
from tests.integration.test_resume_race import assert_one_history
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TTL_MS = 1500
#: The child's producer holds a record this long before sending it (flush() does not
#: wait for it): a process killed right after producing has surely not sent it.
HOLD_MS = 5000


@pytest.fixture
def cfg(writer_cfg: WriterConfig) -> WriterConfig:
    return replace(writer_cfg, lease_ttl_ms=TTL_MS)


def _creator(cfg: WriterConfig, sid: str, step: str, action: str) -> subprocess.Popen[str]:
    """The first attempt, in its own process (tests/integration/creator.py)."""
    raw = {k: (str(v) if isinstance(v, Path) else v) for k, v in cfg.__dict__.items()}
    raw["producer_config"] = {"linger.ms": HOLD_MS}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.creator", json.dumps(raw), sid, step,
         action],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        text=True, start_new_session=True)


def _stopped(p: subprocess.Popen[str], timeout: float = 30.0) -> None:
    """Wait until the process stopped itself (SIGSTOP: state T in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.poll() is None, f"the first attempt exited with {p.returncode}"
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.02)
    raise AssertionError("the first attempt did not reach its pause")


def _epoch(cfg: WriterConfig, sid: str) -> int:
    from sessionstream.producers.edges import WriterEdges

    edges = WriterEdges(cfg)
    try:
        return edges.leases.current_epoch(cfg.tenant, sid)
    finally:
        edges.redis.close()


def _start_again(cfg: WriterConfig, sid: str) -> tuple[SessionWriter, list[str]]:
    """What a harness retrying its job's id does: create(), and what the error says."""
    calls: list[str] = []
    try:
        calls.append("create")
        return SessionWriter.create(cfg, sid, writer_id="retry"), calls
    except SessionExists as exc:
        assert "open() it" in str(exc)
        calls.append("open")
        return SessionWriter.open(cfg, sid, writer_id="retry"), calls


@pytest.mark.parametrize("step", ["leased", "produced", "acknowledged"])
def test_an_id_whose_create_was_killed_is_started_again_by_another_process(
    cfg: WriterConfig, step: str
) -> None:
    sid = unique("s-killed")
    first = _creator(cfg, sid, step, "exit")
    assert first.wait(60) == 137
    assert _epoch(cfg, sid) == 1
    # The dead attempt's lease is live until its TTL; the retry is told to wait or steal.
    with pytest.raises(LeaseUnavailable, match="steal=True"):
        SessionWriter.create(cfg, sid)
    time.sleep(TTL_MS / 1000 + 0.2)

    w, calls = _start_again(cfg, sid)
    tool_turn(w, 0)
    w.close()
    rb = read_log(cfg, sid)
    runs = assert_one_history(rb.admitted)
    assert rb.rejections == []
    if step == "acknowledged":
        # The dead attempt's start was admitted: the id was started; open() resumes it.
        assert calls == ["create", "open"]
        assert [r[0].writer.id for r in runs] == ["first-attempt", "retry"]
        assert runs[0][0].type == "session/start" and len(runs[0]) == 1
    else:
        # Nothing admitted (its record never left the dead process): create() takes it.
        assert calls == ["create"]
        assert len(runs) == 1 and runs[0][0].writer.id == "retry"
        assert runs[0][0].writer.epoch == w.epoch == 2


def test_open_of_a_never_started_id_names_create_which_starts_it(cfg: WriterConfig) -> None:
    sid = unique("s-open-first")
    first = _creator(cfg, sid, "leased", "exit")
    assert first.wait(60) == 137
    with pytest.raises(SessionNotFound) as err:
        SessionWriter.open(cfg, sid, steal=True)  # the dead attempt's lease is live
    msg = str(err.value)
    assert "never started" in msg and "create() it with this id" in msg
    assert err.value.epoch == 1
    # The failed open() released the lease it took: create() needs no steal.
    w = SessionWriter.create(cfg, sid)
    assert w.epoch == 3
    tool_turn(w, 0)
    w.close()
    assert [e.writer.epoch for e in read_log(cfg, sid).admitted] == [3] * 10


def test_open_of_an_id_nobody_leased_still_says_create(cfg: WriterConfig) -> None:
    sid = unique("s-none")
    with pytest.raises(SessionNotFound, match="check the session id and tenant, or create"):
        SessionWriter.open(cfg, sid)
    w = SessionWriter.create(cfg, sid)  # the probe's epoch does not make the id taken
    w.close()
    assert [e.type for e in read_log(cfg, sid).admitted] == ["session/start"]


@pytest.mark.parametrize("step", ["leased", "produced"])
def test_a_paused_first_attempt_is_refused_where_its_records_land(
    cfg: WriterConfig, step: str
) -> None:
    """The first attempt pauses inside create() (its session/start still in its
    producer's queue when ``produced``); another process takes the id over; continued,
    the first attempt's start lands after the new history and is refused as stale, and
    its create() raises SessionExists."""
    sid = unique("s-zombie")
    first = _creator(cfg, sid, step, "stop")
    try:
        _stopped(first)
        w = SessionWriter.create(cfg, sid, writer_id="retry", steal=True)
        assert w.epoch == 2
        tool_turn(w, 0)
        w.flush(10)
        os.kill(first.pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(10)
    said = json.loads(out)
    assert said["create"] == "SessionExists", said
    assert "open() it" in said["detail"]
    tool_turn(w, 1)
    w.close()  # no Fenced: the zombie never got in
    rb = read_log(cfg, sid)
    runs = assert_one_history(rb.admitted)
    assert len(runs) == 1 and runs[0][0].writer.id == "retry"
    late = [(r.writer_id, r.epoch, r.type, r.verdict) for r in rb.rejections]
    if step == "produced":
        assert late == [("first-attempt", 1, "session/start", Verdict.STALE_EPOCH)]
    else:  # it found the id started before producing anything
        assert late == []


def test_a_fleet_with_crashes_inside_create_finishes_every_session(
    cfg: WriterConfig,
) -> None:
    # Every session's first create() dies, at a step chosen by the seed.
    s = run_fleet(cfg, agents=2, sessions=3, turns=1, start_crash_rate=1.0, seed=2,
                  progress=False)
    assert s.problems == []
    assert s.sessions_ok == 3
    assert s.start_crashes == s.crashes == 3
    assert s.start_crash_steps == {"leased": 1, "produced": 1, "acknowledged": 1}
    # A crashed start was resumed (its start was admitted) or started again; every
    # one killed right after its lease was started again.
    assert s.resumes + s.restarts == 3
    assert s.restarts >= s.start_crash_steps["leased"]
    assert s.resumes >= s.start_crash_steps["acknowledged"]
    assert s.rejections == 0
