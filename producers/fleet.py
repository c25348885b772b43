"""Agent-fleet simulator: N processes writing realistic sessions, some crashing mid-turn.

Each agent process takes session tasks from a queue and runs two-step tool turns
(request headers, streamed chunks, an assistant message with tool calls, tool results
— some large enough to spill to attachments — user steering mid-turn, usage, todo and
plan events), flushing after each turn. With ``crash_rate`` a process dies mid-turn
(``os._exit``) after some events; the parent starts a replacement and another process
resumes the session (lease epoch + 1, recovery closes the turn as interrupted). At the
end every session's log is read back and checked (contiguous seq, rejections counted).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from producers.errors import UnconfirmedEvents
from producers.writer import SessionWriter, WriterConfig, read_log

Emit = Callable[..., Any]

TOOLS = ("search_docs", "read_file", "run_sql", "http_get")


@dataclass(frozen=True)
class Task:
    session_id: str
    turns: int  # turns still to write
    resume: bool


@dataclass
class FleetSummary:
    agents: int
    sessions: int
    turns: int
    events_appended: int = 0
    events_in_log: int = 0
    rejections: int = 0
    crashes: int = 0
    resumes: int = 0
    sessions_ok: int = 0
    problems: list[str] = field(default_factory=list)
    last_seqs: dict[str, int] = field(default_factory=dict)  # session -> last admitted seq
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def flush_durably(w: Any, *, attempts: int = 3, timeout: float = 30.0) -> None:
    """What a harness does at a durability barrier: wait, and on a timeout wait again.

    A barrier that times out has not failed: the records may still be delivered (a
    broker stalled, a leader moved). Records reported failed are resent with their
    event ids (readers drop duplicates). The last UnconfirmedEvents propagates.
    """
    for attempt in range(attempts):
        try:
            w.flush(timeout)
            return
        except UnconfirmedEvents:
            if attempt == attempts - 1:
                raise
            if any(state != "pending" for state in w.unconfirmed().values()):
                w.resend_unconfirmed()  # failed or possibly persisted: send the same ids


def run_turn(
    w: SessionWriter,
    rng: random.Random,
    turn: int,
    *,
    large_result_rate: float = 0.1,
    large_bytes: int = 300 * 1024,
    crash_at: int | None = None,
    on_crash: Callable[[], None] = lambda: os._exit(137),
) -> int:
    """Write one two-step tool turn; returns events appended. ``crash_at``: die after n."""
    n = 0

    def emit(type_: str, data: dict[str, Any], **kw: Any) -> None:
        nonlocal n
        w.append(type_, data, **kw)
        n += 1
        if type_ == "tool/call":
            # A harness makes the call durable before running a tool with side effects,
            # so a crash during the tool leaves a provable open call (turn/end interrupted).
            flush_durably(w)
        if crash_at is not None and n >= crash_at:
            on_crash()

    emit("turn/start", {})
    emit("user/message", {"content": f"Task {turn}: find the failing report and fix it."})
    if turn == 0:
        emit("plan/set", {"steps": ["locate", "inspect", "fix", "verify"]})
    todo = f"t{turn}"
    emit("todo/add", {"id": todo, "text": f"task {turn}", "status": "pending"})
    calls = [
        {"call_id": f"c{turn}-{i}-{uuid.uuid4().hex[:6]}", "name": rng.choice(TOOLS),
         "arguments": {"q": f"item {i}", "limit": rng.randint(1, 50)}}
        for i in range(rng.randint(1, 2))
    ]
    # step 1: the model asks for tools
    emit("step/start", {})
    emit("request/header", {"provider": "sim", "model": "sim-large", "max_tokens": 4096})
    for i in range(rng.randint(2, 6)):
        emit("assistant/chunk", {"text": "thinking " * rng.randint(5, 40), "index": i})
    emit("assistant/message", {
        "content": "Let me look that up.", "tool_calls": calls, "stop_reason": "tool_use",
        "usage": {"input_tokens": rng.randint(500, 5000), "output_tokens": rng.randint(20, 400)},
    })
    emit("todo/update", {"id": todo, "status": "in_progress"})
    for c in calls:
        emit("tool/call", dict(c))
        big = rng.random() < large_result_rate
        content = ("row," * (large_bytes // 4)) if big else f"result of {c['name']}: ok"
        emit("tool/result", {"call_id": c["call_id"], "status": "ok", "content": content})
    emit("step/end", {})
    if rng.random() < 0.3:  # user steers while the turn runs
        emit("user/message", {"content": "Also check last week's numbers.", "steering": True})
    # step 2: the model answers
    emit("step/start", {})
    emit("request/header", {"provider": "sim", "model": "sim-large", "max_tokens": 4096})
    for i in range(rng.randint(2, 8)):
        emit("assistant/chunk", {"text": "answer " * rng.randint(5, 40), "index": i})
    emit("assistant/message", {
        "content": "Fixed: the report filter was off by one day.", "stop_reason": "end_turn",
        "usage": {"input_tokens": rng.randint(500, 8000), "output_tokens": rng.randint(50, 800)},
    })
    emit("step/end", {})
    emit("todo/update", {"id": todo, "status": "done"})
    emit("turn/end", {"reason": "completed"})
    return n


def _agent(cfg: WriterConfig, tasks: Any, results: Any, crash_rate: float, seed: int) -> None:
    """One agent process: run tasks until a None sentinel."""
    rng = random.Random(seed)
    pid = os.getpid()

    def crash() -> None:
        # Let the queue's feeder thread deliver what we reported, then die hard
        # (no flush, no lease release: like a killed process).
        results.close()
        results.join_thread()
        os._exit(137)
    while True:
        task = tasks.get()
        if task is None:
            return
        results.put(("start", pid, task.session_id))
        try:
            if task.resume:
                # The previous holder crashed: its lease may still be live, take it over.
                w = SessionWriter.open(cfg, task.session_id, steal=True)
                results.put(("resumed", pid, task.session_id, w.next_seq))
            else:
                w = SessionWriter.create(cfg, task.session_id)
            for k in range(task.turns):
                crash_at = rng.randint(3, 15) if rng.random() < crash_rate else None
                n = run_turn(w, rng, w.next_seq, crash_at=crash_at, on_crash=crash)
                flush_durably(w)
                results.put(("turn", pid, task.session_id, n, task.turns - k - 1))
            w.close()
            results.put(("done", pid, task.session_id))
        except Exception as exc:  # reported to the parent, which counts it as a problem
            results.put(("error", pid, task.session_id, f"{type(exc).__name__}: {exc}"))


class Progress:
    """A minimal progress bar on stderr (no dependency)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.enabled = enabled
        self.done = 0
        self.t0 = time.monotonic()
        self._last = 0.0
        # On a terminal the bar redraws in place; in a log (CI, pipes) a line every 5 s.
        self._tty = sys.stderr.isatty()
        self._interval = 0.1 if self._tty else 5.0

    def update(self, done: int, note: str = "") -> None:
        self.done = done
        now = time.monotonic()
        if not self.enabled or (now - self._last < self._interval and done < self.total):
            return
        self._last = now
        width = 30
        filled = int(width * min(done, self.total) / self.total)
        bar = "#" * filled + "-" * (width - filled)
        line = f"[{bar}] {done}/{self.total} turns {now - self.t0:5.1f}s {note}"
        sys.stderr.write(f"\r{line}" if self._tty else f"{line}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self._tty:
            sys.stderr.write("\n")


def run_fleet(
    cfg: WriterConfig,
    *,
    agents: int,
    sessions: int,
    turns: int,
    crash_rate: float = 0.0,
    seed: int = 0,
    progress: bool = True,
    verify: bool = True,
) -> FleetSummary:
    """Run the simulation and read every session back; returns the summary."""
    ctx = mp.get_context("spawn")
    tasks: Any = ctx.Queue()
    results: Any = ctx.Queue()
    summary = FleetSummary(agents, sessions, turns)
    ids = [f"sim-{uuid.uuid4().hex[:12]}" for _ in range(sessions)]
    remaining = {sid: turns for sid in ids}
    for sid in ids:
        tasks.put(Task(sid, turns, resume=False))
    procs: dict[int, Any] = {}
    seeds = iter(range(seed * 1000, seed * 1000 + 100_000))

    def spawn() -> None:
        p = ctx.Process(target=_agent, args=(cfg, tasks, results, crash_rate, next(seeds)))
        p.start()
        assert p.pid is not None
        procs[p.pid] = p

    for _ in range(agents):
        spawn()
    owner: dict[int, str] = {}  # pid -> session it is writing
    done: set[str] = set()
    bar = Progress(sessions * turns, enabled=progress)
    turns_done = 0
    t0 = time.monotonic()
    try:
        while len(done) < sessions:
            try:
                msg = results.get(timeout=0.2)
            except queue.Empty:
                msg = None
            if msg is not None:
                kind, pid, sid = msg[0], msg[1], msg[2]
                if kind == "start":
                    owner[pid] = sid
                elif kind == "resumed":
                    summary.resumes += 1
                elif kind == "turn":
                    summary.events_appended += msg[3]
                    remaining[sid] = msg[4]
                    turns_done += 1
                elif kind in ("done", "error"):
                    owner.pop(pid, None)
                    done.add(sid)
                    if kind == "error":
                        summary.problems.append(f"{sid}: {msg[3]}")
                bar.update(turns_done, f"crashes {summary.crashes} resumes {summary.resumes}")
                continue
            for pid, p in list(procs.items()):
                if p.is_alive():
                    continue
                # Drain messages the dead process sent before dying.
                del procs[pid]
                p.join()
                lost = owner.pop(pid, None)
                if lost is not None and lost not in done:
                    summary.crashes += 1
                    tasks.put(Task(lost, max(remaining[lost], 1), resume=True))
                if len(done) < sessions:
                    spawn()
    finally:
        for _ in procs:
            tasks.put(None)
        for p in procs.values():
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        bar.close()
    if verify:
        _verify(cfg, ids, summary)
    summary.seconds = round(time.monotonic() - t0, 2)
    return summary


def _verify(cfg: WriterConfig, ids: list[str], summary: FleetSummary) -> None:
    for sid in ids:
        rb = read_log(cfg, sid)
        summary.events_in_log += len(rb.admitted)
        summary.rejections += sum(1 for r in rb.rejections if r.verdict.value != "duplicate")
        seqs = [e.seq for e in rb.admitted]
        if seqs:
            summary.last_seqs[sid] = seqs[-1]
        if seqs != list(range(len(seqs))) or not seqs:
            summary.problems.append(f"{sid}: seqs not contiguous from 0")
            continue
        if rb.admitted[-1].type != "turn/end" and rb.admitted[-1].type != "session/end-seed":
            summary.problems.append(f"{sid}: log ends with {rb.admitted[-1].type}")
            continue
        summary.sessions_ok += 1
