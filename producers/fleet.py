"""Agent-fleet simulator: N processes writing realistic sessions, some crashing mid-turn.

Each agent process takes session tasks from a queue and runs two-step tool turns
through the harness loop (``sessionstream.core.harness``): the request builders make
each provider body from the session's surface, a scripted model answers it in one of
the three provider APIs' stream shapes, the recorders write the header, chunks and
assistant message, and the tools run after their ``tool/call`` is flushed (some results
are large enough to spill to attachments); plus user steering mid-turn, todo and plan
events, and a flush after each turn. With ``crash_rate`` a process dies mid-turn
(``os._exit``) after some events; the parent starts a replacement and another process
resumes the session (lease epoch + 1, recovery closes the turn as interrupted). With
``start_crash_rate`` a process dies inside ``SessionWriter.create()`` (after the lease,
after producing ``session/start`` or after its acknowledgement; once per session): the
next process opens the session, or, when ``open()`` says it was never started, creates
it again. At the end every session's log is read back and checked (contiguous seq,
rejections counted).
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

from sessionstream.core.events import Draft
from sessionstream.core.harness import Harness, ToolContext, ToolOutcome
from sessionstream.core.providers.common import SIMULATED_APIS
from sessionstream.core.providers.scripted import Reply, ScriptedClient
from sessionstream.core.request import (
    PromptRegistry,
    Section,
    StaticTools,
    ToolSchema,
    resolve_header,
)
from sessionstream.producers.errors import SessionNotFound
from sessionstream.producers.writer import SessionWriter, WriterConfig, flush_durably, read_log

Emit = Callable[..., Any]

TOOLS = ("search_docs", "read_file", "run_sql", "http_get")


@dataclass(frozen=True)
class Task:
    session_id: str
    turns: int  # turns still to write
    resume: bool
    crash_in_create: str | None = None  # a step of create() to die at (START_STEPS)


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
    start_crashes: int = 0  # processes that died inside create()
    start_crash_steps: dict[str, int] = field(default_factory=dict)  # step -> crashes planned
    restarts: int = 0  # resumes that found the session never started and created it
    sessions_ok: int = 0
    problems: list[str] = field(default_factory=list)
    last_seqs: dict[str, int] = field(default_factory=dict)  # session -> last admitted seq
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: The simulated agents' system prompt and tools: real sections and schemas, so every
#: request body the scripted model receives is what a real provider would get.
REGISTRY = PromptRegistry([
    Section("role", "You are a maintenance agent for {team}'s reporting jobs.", order=0),
    Section("rules", "Use a tool before answering; report what you changed.", order=1),
])
TOOL_SCHEMAS = StaticTools("fleet", [
    ToolSchema(name, f"The {name.replace('_', ' ')} tool",
               {"type": "object", "properties": {"q": {"type": "string"},
                                                 "limit": {"type": "integer"}}})
    for name in TOOLS
])
HEADER = resolve_header(("agent", {"provider": "sim", "model": "sim-large", "max_tokens": 4096}))
_WORDS = ("thinking", "report", "filter", "day", "check", "rows", "inspect", "answer", "fix")


class _Log:
    """The writer as the harness loop sees it: counts appends (``crash_at``) and flushes
    with :func:`flush_durably` (the barrier before every tool's side effect)."""

    def __init__(self, w: SessionWriter, crash_at: int | None,
                 on_crash: Callable[[], None]) -> None:
        self.w, self.n, self.crash_at, self.on_crash = w, 0, crash_at, on_crash

    @property
    def session(self) -> Any:
        return self.w.session

    def append(self, draft: Draft) -> Any:
        event = self.w.append(draft)
        self.n += 1
        if self.crash_at is not None and self.n >= self.crash_at:
            self.on_crash()
        return event

    def flush(self, timeout: float) -> None:
        flush_durably(self.w, timeout=timeout)


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


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
    """Write one two-step tool turn through the harness loop; returns events appended.

    A scripted model (one of the three provider APIs, streamed) answers the request
    bodies the builders make from the session's surface: first with tool calls, then
    with the answer. ``crash_at``: die after that many events.
    """
    log = _Log(w, crash_at, on_crash)
    api = SIMULATED_APIS[rng.randrange(len(SIMULATED_APIS))]
    calls = [(f"c{turn}-{i}-{uuid.uuid4().hex[:6]}", rng.choice(TOOLS),
              {"q": f"item {i}", "limit": rng.randint(1, 50)}) for i in range(rng.randint(1, 2))]
    script = [
        Reply(_words(rng, rng.randint(10, 120)), calls, model="sim-large",
              input_tokens=rng.randint(500, 5000), output_tokens=rng.randint(20, 400)),
        Reply(_words(rng, rng.randint(10, 160)) + " Fixed: the report filter was off by one "
              "day.", model="sim-large", input_tokens=rng.randint(500, 8000),
              output_tokens=rng.randint(50, 800)),
    ]
    big = {c[0]: rng.random() < large_result_rate for c in calls}

    def tool(args: Any, ctx: ToolContext) -> ToolOutcome:
        content = ("row," * (large_bytes // 4)) if big.get(ctx.call_id) else \
            f"result of {args.get('q')}: ok"
        return ToolOutcome(content, operation_id=f"op-{ctx.call_id}")

    h = Harness(log, ScriptedClient(api, script), api, HEADER, REGISTRY,
                tools={name: tool for name in TOOLS}, providers=[TOOL_SCHEMAS],
                variables={"team": "analytics"}, stream=True)
    log.append(Draft("turn/start"))
    log.append(Draft("user/message", {"content": f"Task {turn}: find the failing report and "
                                                 "fix it."}))
    if turn == 0:
        log.append(Draft("plan/set", {"steps": ["locate", "inspect", "fix", "verify"]}))
    todo = f"t{turn}"
    log.append(Draft("todo/add", {"id": todo, "text": f"task {turn}", "status": "pending"}))
    h.step()  # the model asks for tools; each runs after its tool/call is durable
    log.append(Draft("todo/update", {"id": todo, "status": "in_progress"}))
    if rng.random() < 0.3:  # user steers while the turn runs
        log.append(Draft("user/message", {"content": "Also check last week's numbers.",
                                          "steering": True}))
    h.step()  # the model answers
    log.append(Draft("todo/update", {"id": todo, "status": "done"}))
    log.append(Draft("turn/end", {"reason": "completed"}))
    return log.n


#: The steps of create() a start crash dies at (SessionWriter.create's ``fault``).
START_STEPS = ("leased", "produced", "acknowledged")


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

    def die_at(at: str, task: Task) -> Callable[[str], None]:
        def fault(step: str) -> None:  # create() calls it at each step of the start
            if step == at:
                results.put(("start-crash", pid, task.session_id))
                crash()
        return fault
    while True:
        task = tasks.get()
        if task is None:
            return
        results.put(("start", pid, task.session_id))
        try:
            if task.resume:
                # The previous holder crashed: its lease may still be live, take it over.
                try:
                    w = SessionWriter.open(cfg, task.session_id, steal=True)
                    results.put(("resumed", pid, task.session_id, w.next_seq))
                except SessionNotFound as exc:
                    if exc.epoch == 0:
                        raise
                    # It crashed inside create(): never started, so start it (the
                    # failed open() released the lease it took).
                    w = SessionWriter.create(cfg, task.session_id)
                    results.put(("restarted", pid, task.session_id))
            else:
                at = task.crash_in_create
                w = SessionWriter.create(cfg, task.session_id,
                                         fault=None if at is None else die_at(at, task))
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
    start_crash_rate: float = 0.0,
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
    plan = random.Random(seed)  # which creates crash, and where: fixed by the seed
    for sid in ids:
        at = plan.choice(START_STEPS) if plan.random() < start_crash_rate else None
        if at is not None:
            summary.start_crash_steps[at] = summary.start_crash_steps.get(at, 0) + 1
        tasks.put(Task(sid, turns, resume=False, crash_in_create=at))
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
                elif kind == "start-crash":
                    summary.start_crashes += 1
                elif kind == "restarted":
                    summary.restarts += 1
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
