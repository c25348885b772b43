"""Google ADK: ``SessionstreamSessionService`` on the fleet beside ADK's own
``DatabaseSessionService`` (``sqlite+aiosqlite``) and ``SqliteSessionService``, same
events, same run.

Workloads (issue 33's targets, ours / ``DatabaseSessionService``, p50 over rounds; ADK's
``SqliteSessionService`` is printed beside, in each row's note):

- ``create_session``;
- ``append_event`` as a session grows to 3,000 events (quick: 600): the appends around
  the 100th against those around the last (flat: within 1.5x), and the appends past it
  against the baseline's (<= 3x);
- ``get_session`` of that session, whole and with ``num_recent_events=20``, and
  ``list_sessions`` of a user with 5,000 sessions (quick: 500, <= 2x), by another node: a
  child process that never wrote them (each backend in its own);
- a handoff: two processes (two nodes) serving one conversation's turns in turn
  (``get_session``, a user event, an agent event), against one process serving them all:
  what taking the conversation over adds to a turn (<= 20 ms), and that turn against the
  baseline's.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.frameworks import ROOT, Ctx, ms
from bench.results import Result, Spread
from sessionstream.core.settings import Settings

MODULE = "bench.frameworks.adk"
BENCH = "frameworks/adk"
APP = "bench"
NAMES = ("ours", "db", "sqlite")
LABEL = {"ours": "ours", "db": "DatabaseSessionService",
         "sqlite": "SqliteSessionService"}


# -- the events -----------------------------------------------------------------------------

def user_event(n: int) -> Any:
    from google.adk.events.event import Event
    from google.genai import types

    return Event(author="user", invocation_id=f"inv-{n // 2}", content=types.Content(
        role="user", parts=[types.Part(text=f"Question {n}: how did outpatient volume "
                                            f"change year over year in region {n % 17}?")]))


def agent_event(n: int) -> Any:
    from google.adk.events.event import Event
    from google.genai import types

    return Event(
        author="analyst", invocation_id=f"inv-{n // 2}", content=types.Content(
            role="model", parts=[types.Part(text=f"Answer {n}: volume rose 4.{n % 10}% "
                                                 "against last year, driven by imaging "
                                                 "and same-day clinics.")]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=120 + n, candidates_token_count=24, total_token_count=144 + n))


def event(n: int) -> Any:
    return user_event(n) if n % 2 == 0 else agent_event(n)


# -- the services ---------------------------------------------------------------------------

def make(backend: str, where: dict[str, str]) -> Any:
    """A service of ``backend`` (what one process or node builds)."""
    if backend == "ours":
        from sessionstream.integrations.google_adk import EVENT_TYPES, SessionstreamSessionService
        from sessionstream.integrations.store import FleetStore

        return SessionstreamSessionService(FleetStore.from_settings(
            Settings.from_env(), EVENT_TYPES))
    if backend == "db":
        from google.adk.sessions.database_session_service import DatabaseSessionService

        return DatabaseSessionService(f"sqlite+aiosqlite:///{where['db']}")
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    return SqliteSessionService(where["sqlite"])


async def close(svc: Any) -> None:
    fn = getattr(svc, "close", None)
    if fn is not None:
        await fn()


async def turn(svc: Any, sid: str, n: int) -> None:
    """One request of a conversation: load it, append the user's message and the reply."""
    s = await svc.get_session(app_name=APP, user_id="u", session_id=sid,
                              config=_recent(20))
    assert s is not None, sid
    await svc.append_event(s, user_event(2 * n))
    await svc.append_event(s, agent_event(2 * n + 1))


def _recent(n: int) -> Any:
    from google.adk.sessions.base_session_service import GetSessionConfig

    return GetSessionConfig(num_recent_events=n)


async def _time(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


# -- a node serving turns (a child process) -------------------------------------------------

def _serve(args: dict[str, Any]) -> None:
    """A node of the web tier: one service for the process's life; each line on stdin
    (``<session id> <turn>``) is one request, answered by its time in seconds."""
    async def go() -> None:
        svc = make(args["backend"], args["where"])
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            sid, n = line.split()
            took = await _time(lambda: turn(svc, sid, int(n)))  # noqa: B023
            print(json.dumps({"took": took}), flush=True)
        await close(svc)

    asyncio.run(go())


class Node:
    """A child process serving turns (see :func:`_serve`)."""

    def __init__(self, backend: str, where: dict[str, str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, "serve", json.dumps({"backend": backend,
                                                                  "where": where})],
            env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"a node stopped (exit {self.proc.wait()})")
        out: dict[str, Any] = json.loads(line)
        return out

    def turn(self, sid: str, n: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{sid} {n}\n")
        self.proc.stdin.flush()
        return float(self._answer()["took"])

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


# -- the bench ------------------------------------------------------------------------------

def run(ctx: Ctx) -> list[Result]:
    return measure(ctx, events=600 if ctx.quick else 3000,
                   sessions=500 if ctx.quick else 5000)


def measure(ctx: Ctx, *, events: int, sessions: int) -> list[Result]:
    topic, prefix = ctx.topic(), ctx.prefix
    env = ctx.env(topic, prefix)
    os.environ.update(env)
    where = {"db": str(ctx.tmp / "adk-db.sqlite"), "sqlite": str(ctx.tmp / "adk.sqlite")}
    out: list[Result] = []
    loop = asyncio.new_event_loop()
    run_ = loop.run_until_complete
    svcs = {n: make(n, where) for n in NAMES}
    try:
        for n in NAMES:  # the databases' schemas, the fleet's connections
            s = run_(svcs[n].create_session(app_name=APP, user_id="warm"))
            run_(svcs[n].append_event(s, event(0)))

        # 1. create_session
        creates: dict[str, list[float]] = {n: [] for n in NAMES}
        for _ in range(ctx.rounds):
            for n in NAMES:
                for _ in range(10):
                    creates[n].append(run_(_time(lambda n=n: svcs[n].create_session(
                        app_name=APP, user_id="creator"))))
        out += _ratios(ctx, "create_session", creates, "<= 3x")

        # 2. append_event: a session grown to `events` events, and one grown to 100, then
        # appends to both in turn (the three backends too), so the 100th and the last are
        # measured under the same load
        window = 51
        sid, short_sid = f"long-{uuid.uuid4().hex[:8]}", f"short-{uuid.uuid4().hex[:8]}"
        long = {n: run_(svcs[n].create_session(app_name=APP, user_id="u", session_id=sid))
                for n in NAMES}
        short = {n: run_(svcs[n].create_session(app_name=APP, user_id="u",
                                                session_id=short_sid)) for n in NAMES}
        for i in range(events):
            for n in NAMES:
                run_(svcs[n].append_event(long[n], event(i)))
                if i < 100 - window // 2 - 1:
                    run_(svcs[n].append_event(short[n], event(i)))
        early: dict[str, list[float]] = {n: [] for n in NAMES}
        late: dict[str, list[float]] = {n: [] for n in NAMES}
        for i in range(window):
            for n in NAMES:
                pair = [(early, short, 100), (late, long, events)]
                for bucket, ss, at in pair[::-1] if i % 2 else pair:  # each first in turn
                    bucket[n].append(run_(_time(lambda n=n, ss=ss, at=at, i=i:
                                                svcs[n].append_event(ss[n], event(at + i)))))
        events += window
        for n in NAMES:
            e, la = ms(early[n]), ms(late[n])
            print(f"    append_event, {LABEL[n]}: around the 100th {e.show(unit=' ms')}, "
                  f"around the {events - window // 2}th {la.show(unit=' ms')}", flush=True)
        e, la = ms(early["ours"]), ms(late["ours"])
        out.append(Result(BENCH, f"append_event: the {events - window // 2}th against the "
                                 "100th (in turn)", f"the 100th, p50 {e.median:.2f} ms",
                          f"p50 {la.median:.2f} ms", la.median / e.median, "<= 1.5x",
                          _quick(ctx)))
        out += _ratios(ctx, f"append_event on a {events - window // 2}-event session",
                       late, "<= 3x")

        # 3. the users with many sessions
        user = f"many-{uuid.uuid4().hex[:6]}"
        t0 = {n: 0.0 for n in NAMES}
        for _ in range(sessions):
            for n in NAMES:
                t0[n] += run_(_time(lambda n=n: svcs[n].create_session(
                    app_name=APP, user_id=user, state={"k": 1})))
        print(f"    {sessions} sessions created: " + ", ".join(
            f"{LABEL[n]} {t0[n]:.1f} s" for n in NAMES), flush=True)
    finally:
        for svc in svcs.values():
            run_(close(svc))
        loop.close()

    # 4. get_session and list_sessions by another node: a process that never wrote them
    read = {n: _in_child("read", {"backend": n, "where": where, "sid": sid, "user": user,
                                  "events": events, "sessions": sessions,
                                  "rounds": ctx.rounds}, env) for n in NAMES}
    out += _ratios(ctx, f"get_session of {events} events, another node",
                   {n: read[n]["full"] for n in NAMES}, "<= 1.5x")
    out += _ratios(ctx, f"get_session(num_recent_events=20) of {events} events, "
                        "another node", {n: read[n]["recent"] for n in NAMES}, "<= 3x")
    out += _ratios(ctx, f"list_sessions of a user with {sessions} sessions, another node",
                   {n: read[n]["list"] for n in NAMES}, "<= 2x")

    # 5. a handoff: two nodes (processes) serving one conversation in turn
    out += _handoff(ctx, where, env)
    return out


def _read(args: dict[str, Any]) -> dict[str, list[float]]:
    """Another node's reads (a child process): the long session whole and its last 20
    events, and the many sessions' list; each checked, first call not timed."""
    async def go() -> dict[str, list[float]]:
        svc = make(args["backend"], args["where"])
        sid, user = args["sid"], args["user"]

        async def full() -> None:
            got = await svc.get_session(app_name=APP, user_id="u", session_id=sid)
            assert got is not None and len(got.events) == args["events"], args["backend"]

        async def recent() -> None:
            got = await svc.get_session(app_name=APP, user_id="u", session_id=sid,
                                        config=_recent(20))
            assert got is not None and len(got.events) == 20, args["backend"]

        async def listed() -> None:
            got = await svc.list_sessions(app_name=APP, user_id=user)
            assert len(got.sessions) == args["sessions"], args["backend"]

        out: dict[str, list[float]] = {"full": [], "recent": [], "list": []}
        for name, fn, n in (("full", full, args["rounds"]), ("recent", recent,
                                                            5 * args["rounds"]),
                            ("list", listed, args["rounds"])):
            await fn()
            for _ in range(n):
                out[name].append(await _time(fn))
        await close(svc)
        return out

    return asyncio.run(go())


def _in_child(job: str, args: dict[str, Any], env: dict[str, str]) -> Any:
    run = subprocess.run([sys.executable, "-m", MODULE, job, json.dumps(args)],
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"{MODULE} {job} failed: {run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _handoff(ctx: Ctx, where: dict[str, str], env: dict[str, str]) -> list[Result]:
    turns = 10 if ctx.quick else 30
    moved: dict[str, list[float]] = {n: [] for n in NAMES}
    same: dict[str, list[float]] = {n: [] for n in NAMES}
    for n in NAMES:
        a, b, solo = (Node(n, where, env) for _ in range(3))
        svc = make(n, where)
        sid, solo_sid = f"handoff-{uuid.uuid4().hex[:8]}", f"solo-{uuid.uuid4().hex[:8]}"
        loop = asyncio.new_event_loop()
        for x in (sid, solo_sid):
            loop.run_until_complete(svc.create_session(app_name=APP, user_id="u",
                                                       session_id=x))
        loop.run_until_complete(close(svc))
        loop.close()
        try:
            for t in range(turns):
                a.turn(sid, 2 * t)
                moved[n].append(b.turn(sid, 2 * t + 1))  # b takes it over from a
                solo.turn(solo_sid, 2 * t)
                same[n].append(solo.turn(solo_sid, 2 * t + 1))  # solo's own last turn
        finally:
            for node in (a, b, solo):
                node.stop()
    out = _ratios(ctx, "a turn taken over from another node (get_session(20), user "
                       "event, agent event)", moved, "<= 1.5x")
    ours_moved, ours_same = ms(moved["ours"]), ms(same["ours"])
    added = ours_moved.median - ours_same.median
    print(f"    handoff, ours: a turn after another node's {ours_moved.show(unit=' ms')}, "
          f"after this node's {ours_same.show(unit=' ms')}", flush=True)
    out.append(Result(BENCH, "what a handoff adds to a turn (the turn after another "
                             "node's, against after this node's)",
                      f"the turn after this node's, p50 {ours_same.median:.2f} ms",
                      f"p50 {ours_moved.median:.2f} ms ({added:+.2f} ms)", added, "<= 20 ms",
                      _quick(ctx)))
    return out


def _quick(ctx: Ctx) -> str:
    return "quick" if ctx.quick else ""


def _ratios(ctx: Ctx, measure: str, t: dict[str, list[float]], target: str) -> list[Result]:
    s: dict[str, Spread] = {n: ms(t[n]) for n in NAMES}
    print(f"    {measure}: " + ", ".join(f"{LABEL[n]} {s[n].show(unit=' ms')}"
                                         for n in NAMES), flush=True)
    ours, db, lite = s["ours"].median, s["db"].median, s["sqlite"].median
    note = f"SqliteSessionService p50 {lite:.2f} ms: ours {ours / lite:.2f}x"
    return [Result(BENCH, measure, f"DatabaseSessionService p50 {db:.2f} ms",
                   f"ours p50 {ours:.2f} ms", ours / db, target,
                   "; ".join(filter(None, [_quick(ctx), note])))]


def _main() -> None:
    """Run alone: ``PYTHONPATH=. python -m bench.frameworks.adk bench [--quick]
    [--events N] [--sessions N] [--rounds N]`` (``bench/bench_frameworks.py`` runs it in
    the set)."""
    import argparse
    import tempfile

    from bench.results import record

    ap = argparse.ArgumentParser()
    ap.add_argument("job")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int)
    ap.add_argument("--sessions", type=int)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--results")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ssbench-adk-") as tmp:
        ctx = Ctx(Settings.from_env(), args.quick, args.rounds or (3 if args.quick else 5),
                  Path(tmp))
        try:
            results = measure(ctx, events=args.events or (600 if args.quick else 3000),
                              sessions=args.sessions or (500 if args.quick else 5000))
        finally:
            ctx.cleanup()
    for r in results:
        print(f"  {r.measure}: {r.value}  [{r.ratio:.2f} against {r.target}, baseline "
              f"{r.baseline}; {r.note}]", flush=True)
        record(args.results, r)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        _serve(json.loads(sys.argv[2]))
    elif sys.argv[1] == "read":
        print(json.dumps(_read(json.loads(sys.argv[2]))), flush=True)
    else:
        _main()
