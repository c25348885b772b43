"""Racing resumes and paused writers, as processes against the real Kafka and Redis.

The fault-injection run that motivated ADR 0001's refined rule: several processes
``open(steal=True)`` one session at once, and a writer paused (SIGSTOP) past a takeover
keeps writing when it is continued. Every session must keep exactly one admitted
history in which every lifecycle starts with its own boundary events; every writer
either continues that history or gets a named error; ``flush()`` never reports a
refused event as durable.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionstream.core.events import Event
from sessionstream.core.session import Session
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 10  # per process count: 2 and 4 processes, 20 rounds in all
REPAIR_TYPES = {"turn/end", "compaction/end"}


def _cfg_args(cfg: WriterConfig) -> str:
    return json.dumps({k: (str(v) if isinstance(v, Path) else v) for k, v in cfg.__dict__.items()
                       if k != "producer_config"})


class Resumers:
    """``n`` resumer processes, fed session ids on stdin, answering one JSON line each."""

    def __init__(self, cfg: WriterConfig, n: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs = [
            subprocess.Popen([sys.executable, "-m", "tests.integration.resumer", _cfg_args(cfg)],
                             cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
            for _ in range(n)
        ]
        for p in self.procs:
            assert json.loads(self._line(p)) == {"ready": True}

    @staticmethod
    def _line(p: subprocess.Popen[str]) -> str:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"resumer {p.pid} exited with {p.wait(5)}")
        return line

    def race(self, sid: str, repair: bool = True) -> list[dict[str, Any]]:
        start_at = time.time() + 0.15  # every process opens at this instant
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(f"{sid} {start_at} {int(repair)}\n")
            p.stdin.flush()
        return [json.loads(self._line(p)) for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            if p.stdin is not None:
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


@pytest.fixture
def race_cfg(writer_cfg: WriterConfig) -> WriterConfig:
    return writer_cfg


def _crashed_session(cfg: WriterConfig) -> str:
    """A session whose writer died mid-turn (its lease still live): recovery has work."""
    w = SessionWriter.create(cfg)
    tool_turn(w, 0)
    tool_turn(w, 1, close=False)
    w.flush(10)
    w.abandon()
    return w.session_id


def _lifecycles(admitted: list[Event]) -> list[list[Event]]:
    """The admitted log cut where the writer (id, epoch) changes."""
    runs: list[list[Event]] = []
    for e in admitted:
        if runs and runs[-1][-1].writer == e.writer:
            runs[-1].append(e)
        else:
            runs.append([e])
    return runs


def assert_one_chain(admitted: list[Event]) -> list[list[Event]]:
    """Contiguous seqs, each event naming the admitted one before it; the writer runs."""
    assert [e.seq for e in admitted] == list(range(len(admitted)))
    for before, after in itertools.pairwise(admitted):
        assert after.prev_event_id == before.event_id, f"spliced at seq {after.seq}"
    return _lifecycles(admitted)


def assert_one_history(admitted: list[Event]) -> list[list[Event]]:
    """One chain of events, and every lifecycle after the first starts with its own
    repairs and end-seed, before anything else it wrote."""
    runs = assert_one_chain(admitted)
    assert runs[0][0].type == "session/start"
    for run in runs[1:]:
        types = [e.type for e in run]
        assert "session/end-seed" in types, f"lifecycle of {run[0].writer} has no boundary"
        k = types.index("session/end-seed")
        assert set(types[:k]) <= REPAIR_TYPES, f"{run[0].writer} wrote {types[:k]} first"
        assert run[k].data["seed_length"] == run[k].seq
    Session.from_events(admitted)  # and every session rule holds
    return runs


@pytest.fixture
def figures() -> Iterator[dict[str, int]]:
    tally: dict[str, int] = {}
    yield tally
    print(f"\nresume race figures: {json.dumps(tally, sort_keys=True)}")


@pytest.mark.parametrize("processes", [2, 4])
def test_racing_resumes_leave_one_history_and_every_writer_continues_it_or_is_told(
    race_cfg: WriterConfig, processes: int, figures: dict[str, int],
) -> None:
    resumers = Resumers(race_cfg, processes)
    tally = {"sessions": 0, "resumes": 0, "opened": 0, "resume_race_lost": 0,
             "fenced": 0, "retried_starts": 0, "histories": 0, "lifecycles": 0}
    try:
        for _ in range(ROUNDS):
            sid = _crashed_session(race_cfg)
            results = resumers.race(sid)
            tally["sessions"] += 1
            tally["resumes"] += len(results)
            admitted = read_log(race_cfg, sid, use_index=False).admitted
            runs = assert_one_history(admitted)
            tally["histories"] += 1
            tally["lifecycles"] += len(runs) - 1
            ids = {e.event_id for e in admitted}
            opened = {r["writer_id"] for r in results if r.get("open") == "ok"}
            lifecycle_writers = {run[0].writer.id for run in runs[1:]}
            for r in results:
                assert "unexpected" not in r, r
            # only a writer whose open() returned started a lifecycle
            assert lifecycle_writers <= opened, results
            for r in results:
                assert "unexpected" not in r, r
                if r["open"] == "ResumeRaceLost":
                    tally["resume_race_lost"] += 1
                    assert "lost a race" in r["detail"] and sid in r["detail"]
                    continue
                tally["opened"] += 1
                tally["retried_starts"] += r["attempts"] > 1
                # open() returned: its lifecycle's first events are in the history
                assert set(r["lifecycle"]) <= ids, r
                assert r["writer_id"] in lifecycle_writers
                if r["flush"] == "ok":
                    assert set(r["durable"]) <= ids, "flush() called a refused event durable"
                else:
                    tally["fenced"] += 1
                    assert not set(r["not_admitted"]) & ids  # named: refused indeed
                    assert set(r["appended"]) - set(r["not_admitted"]) <= ids
            assert opened, "nobody resumed the session"
    finally:
        resumers.close()
        for k, v in tally.items():
            figures[f"{processes}p_{k}"] = v
    assert tally["histories"] == ROUNDS


def test_racing_writers_that_prove_nothing_before_their_first_flush_cannot_splice(
    race_cfg: WriterConfig, figures: dict[str, int],
) -> None:
    """``open(repair=False)`` (the compaction agent's way) writes no lifecycle events,
    so nothing is proven before its first flush: here only the admission rule keeps one
    history. A writer whose first event lost its seq must not have its next events
    admitted on top of the winner's, and its flush() must name them."""
    resumers = Resumers(race_cfg, 2)
    tally = {"sessions": 0, "writers": 0, "flush_ok": 0, "fenced": 0, "histories": 0,
             "lost_before_writing": 0}
    try:
        for _ in range(ROUNDS):
            sid = _crashed_session(race_cfg)
            results = resumers.race(sid, repair=False)
            tally["sessions"] += 1
            admitted = read_log(race_cfg, sid, use_index=False).admitted
            assert_one_chain(admitted)
            tally["histories"] += 1
            ids = {e.event_id for e in admitted}
            assert any(r.get("open") == "ok" for r in results), results
            for r in results:
                assert "unexpected" not in r, r
                if r["open"] == "ResumeRaceLost":
                    # A racer descheduled between its acquire and its read (a loaded
                    # machine) finds the newer epoch's events already in the log: it is
                    # told so and writes nothing.
                    assert "took the session" in r["detail"], r
                    tally["lost_before_writing"] += 1
                    continue
                assert r["open"] == "ok", r
                tally["writers"] += 1
                mine = [e in ids for e in r["appended"]]
                assert mine == sorted(mine, reverse=True), "a refused writer went on"
                if r["flush"] == "ok":
                    tally["flush_ok"] += 1
                    assert all(mine), "flush() called a refused event durable"
                else:
                    tally["fenced"] += 1
                    assert set(r["not_admitted"]) == set(r["appended"]) - ids or \
                        not r["not_admitted"]
    finally:
        resumers.close()
        for k, v in tally.items():
            figures[f"norepair_{k}"] = v


PAUSED = """
import json, sys, time
from sessionstream.producers.errors import Fenced
from sessionstream.producers.writer import SessionWriter, WriterConfig
cfg = WriterConfig(**json.loads(sys.argv[1]))
w = SessionWriter.create(cfg)
durable = [e.event_id for e in w.session.events]
print(json.dumps({"sid": w.session_id}), flush=True)
n = 0
while True:
    ids = []
    try:
        for i in range(5):
            ids.append(w.append("user/message", {"content": f"m{n}-{i}"}).event_id)
        n += 1
        w.flush(10)
    except Fenced as exc:  # at flush (the barrier) or at append (the lease check)
        print(json.dumps({"durable": durable, "fenced": exc.not_admitted, "last": ids,
                          "at": "flush" if exc.not_admitted else "append"}), flush=True)
        break
    durable += ids
    time.sleep(0.01)
"""


def test_a_writer_paused_past_a_takeover_is_fenced_at_flush_and_only_admitted_events_were_durable(
    race_cfg: WriterConfig,
) -> None:
    cfg = WriterConfig(**{**race_cfg.__dict__, "lease_ttl_ms": 30_000})  # no renewal in time
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", PAUSED, _cfg_args(cfg)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        sid = json.loads(proc.stdout.readline())["sid"]
        time.sleep(0.5)  # it writes and flushes
        os.kill(proc.pid, signal.SIGSTOP)
        heir = SessionWriter.open(cfg, sid, steal=True)  # the takeover while it is paused
        heir.append("user/message", {"content": "heir"})
        heir.flush(10)
        os.kill(proc.pid, signal.SIGCONT)
        line = proc.stdout.readline()
        assert line, f"paused writer exited with {proc.wait(10)} before reporting"
        report = json.loads(line)
        heir.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    admitted = read_log(cfg, sid, use_index=False).admitted
    ids = {e.event_id for e in admitted}
    assert_one_history(admitted)
    assert set(report["durable"]) <= ids, "an event reported durable was not admitted"
    assert not set(report["fenced"]) & ids  # what it named was refused indeed
    # The batch written after the pause is refused, and flush() names it. (If the pause
    # fell inside a flush whose events were already admitted, that flush returns and
    # the writer, having seen the lease gone, refuses the next append with Fenced.)
    assert set(report["last"]) <= set(report["fenced"])
    assert report["at"] == "flush" or not report["last"]
    assert admitted[-1].data.get("content") == "heir"
