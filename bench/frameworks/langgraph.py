"""LangGraph's checkpoint saver on the fleet, beside the savers LangGraph ships.

    PYTHONPATH=. python -m bench.frameworks.langgraph [--quick] [--rounds N]

(``bench/bench_frameworks.py`` runs it with the other frameworks' benches.) Three
backends: ``SessionStreamSaver.fleet()`` (real Kafka + Redis, the settings' encryption),
``SqliteSaver`` on a file (the baseline of every ratio) and ``InMemorySaver`` (printed
beside it where one process is enough). The graph is a chat graph (``MessagesState``: a
user message in, one model reply of ~400 characters out, no model called), so a
thread's state grows as a real conversation's does.

The backends take turns within each measure, so a machine whose load drifts (this one
is shared) weighs on all of them alike:

* an invoke step: ``graph.invoke`` of one turn, p50 over the turns of a 200-turn thread
  (quick: 50), one process holding the three savers and serving turn i on each in turn;
* ``get_state`` (``get_tuple``) of that thread from that process (the writer's);
* ``get_state`` from a fresh process: each round starts one process per backend that
  builds its saver and graph, reads another thread (its connections made, its code
  loaded, as a handler that served other requests), then reads the thread once (what a
  stateless handler does when the conversation's next request lands on it), and
  ``list`` of the thread's last 20 checkpoints; that very first read is printed too;
* the resident memory (VmRSS) of a process, one per backend, after it wrote a 200-turn
  thread, every process with sessionstream's modules loaded (as the issue measured:
  the figures then differ by what each saver keeps); SqliteSaver's without them is
  printed beside it;
* a handoff: two processes per backend serve one conversation, turn by turn in
  alternation (each turn's writer did not write the last one): what that adds to a
  turn, in ms, over the same process serving every turn.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.results import Result, Spread

ROOT = Path(__file__).resolve().parents[2]
BENCH = "frameworks.langgraph"
REPLY = ("The answer, with the detail a model gives when it explains its reasoning step by "
         "step and cites what it used; ") * 4  # ~400 characters

#: The backends: ours, and the two savers LangGraph ships.
OURS, SQLITE, MEMORY = "sessionstream", "sqlite", "memory"
BACKENDS = (OURS, SQLITE, MEMORY)
#: The backends a second process can read (InMemorySaver's threads die with it).
SHARED = (OURS, SQLITE)


# ---------------------------------------------------------------- in a worker process


def chat_graph(checkpointer: Any) -> Any:
    """START -> model -> END over ``MessagesState``; the model answers deterministically."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def model(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"reply {n}: {REPLY}")]}

    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_edge(START, "model")
    g.add_edge("model", END)
    return g.compile(checkpointer=checkpointer)


@contextmanager
def saver_of(backend: str, path: str) -> Iterator[Any]:
    """A saver of ``backend`` (``path``: the SQLite file), closed after."""
    if backend == OURS:
        from sessionstream.integrations.langgraph import SessionStreamSaver

        saver = SessionStreamSaver.fleet()
        try:
            yield saver
        finally:
            saver.close()
    elif backend == SQLITE:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    elif backend == MEMORY:
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    else:
        raise ValueError(f"unknown backend {backend!r}")


def _turn(graph: Any, thread: str, i: int) -> float:
    from langchain_core.messages import HumanMessage

    t0 = time.perf_counter()
    graph.invoke({"messages": [HumanMessage(content=f"question {i}: what next?")]},
                 {"configurable": {"thread_id": thread}})
    return (time.perf_counter() - t0) * 1000


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                got[key] = int(rest.split()[0]) / 1024
    return got["VmRSS"], got["VmHWM"]


def job_grow(tmp: str, thread: str, turns: int, reads: int) -> dict[str, Any]:
    """One thread of ``turns`` turns on every backend, turn by turn in turn; then reads
    of it from this process, backend by backend in turn."""
    with ExitStack() as stack:
        graphs = {b: chat_graph(stack.enter_context(saver_of(b, _path(tmp, b))))
                  for b in BACKENDS}
        config = {"configurable": {"thread_id": thread}}
        for g in graphs.values():
            _turn(g, f"{thread}-other", 0)  # what a fresh process warms up on (job_read)
        invoke: dict[str, list[float]] = {b: [] for b in BACKENDS}
        for i in range(turns):
            for b, g in graphs.items():
                invoke[b].append(_turn(g, thread, i))
        state: dict[str, list[float]] = {b: [] for b in BACKENDS}
        for _ in range(reads):
            for b, g in graphs.items():
                t0 = time.perf_counter()
                g.get_state(config)
                state[b].append((time.perf_counter() - t0) * 1000)
        messages = {b: len(g.get_state(config).values["messages"]) for b, g in graphs.items()}
    return {"invoke": invoke, "get_state": state, "messages": messages}


def job_rss(backend: str, path: str, thread: str, turns: int,
            loaded: bool) -> dict[str, Any]:
    """RSS of a process that wrote a ``turns``-turn thread on ``backend``; ``loaded``:
    with sessionstream's saver module and its clients' modules imported first, whatever
    the backend (what the issue measured: the same modules in every process, so the
    figures differ by what each saver keeps, not by what it imports)."""
    if loaded:
        from sessionstream.core.settings import Settings
        from sessionstream.integrations.store import FleetStore
        from sessionstream.producers import resume, writer  # noqa: F401  (the clients)

        FleetStore.from_settings(Settings.from_env()).close()
    with saver_of(backend, path) as saver:
        graph = chat_graph(saver)
        for i in range(turns):
            _turn(graph, thread, i)
        gc.collect()
        rss, hwm = _rss_mib()
    return {"rss": rss, "hwm": hwm}


def job_read(backend: str, path: str, thread: str) -> dict[str, Any]:
    """A process that never wrote the thread, as a stateless handler's is when a
    conversation's request first lands on it: warmed up by a read of another thread
    (its connections made, its code loaded: it served other requests), then get_state
    of the thread once, then list 20. ``cold``: that first read of the other thread."""
    with saver_of(backend, path) as saver:
        graph = chat_graph(saver)
        cold = _timed(lambda: graph.get_state({"configurable": {"thread_id":
                                                                f"{thread}-other"}}))
        config = {"configurable": {"thread_id": thread}}
        t0 = time.perf_counter()
        snap = graph.get_state(config)
        state = (time.perf_counter() - t0) * 1000
        listed = _timed(lambda: list(saver.list(config, limit=20)))
    return {"get_state": state, "list": listed, "cold": cold,
            "messages": len(snap.values["messages"])}


def job_serve(backend: str, path: str) -> None:
    """Serve turns read from stdin (``<thread> <i>`` per line), one JSON line each."""
    with saver_of(backend, path) as saver:
        graph = chat_graph(saver)
        _turn(graph, f"warm-{uuid.uuid4().hex}", 0)  # connections made, code warm
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            thread, i = line.split()
            print(json.dumps({"ms": _turn(graph, thread, int(i))}), flush=True)


# ---------------------------------------------------------------- the parent


def _path(tmp: str, backend: str) -> str:
    return str(Path(tmp) / f"{backend}.sqlite")


def _env(ctx: Any, topic: str, prefix: str) -> dict[str, str]:
    from sessionstream.core.settings import Env

    s = ctx.settings
    return {**os.environ, "PYTHONPATH": str(ROOT),
            Env.KAFKA_BOOTSTRAP: s.kafka_bootstrap, Env.REDIS_URL: s.redis_url,
            Env.EVENTS_TOPIC: topic, Env.KEY_PREFIX: prefix, Env.STATE_DIR: str(s.state_dir),
            Env.ENCRYPTION: "on" if s.encryption else "off"}


def _job(env: dict[str, str], *args: Any) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.frameworks.langgraph", "--job",
                           *map(str, args)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"the {args[0]} job failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class _Server:
    """A process serving turns (``job_serve``)."""

    def __init__(self, env: dict[str, str], backend: str, path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.frameworks.langgraph", "--job", "serve", backend,
             path], env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        self._line()

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a handoff server exited")
        return json.loads(line)

    def turn(self, thread: str, i: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{thread} {i}\n")
        self.proc.stdin.flush()
        return float(self._line()["ms"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _handoff(env: dict[str, str], tmp: str, turns: int) -> dict[str, list[float]]:
    """Per backend two processes serve one thread in alternation; each turn's time (the
    first, the thread's creation, left out)."""
    servers = {b: (_Server(env, b, _path(tmp, b)), _Server(env, b, _path(tmp, b)))
               for b in SHARED}
    try:
        thread = f"handoff-{uuid.uuid4().hex[:8]}"
        out: dict[str, list[float]] = {b: [] for b in SHARED}
        for i in range(turns + 1):
            for b, (a, c) in servers.items():
                ms = (a if i % 2 == 0 else c).turn(thread, i)
                if i:
                    out[b].append(ms)
        return out
    finally:
        for pair in servers.values():
            for s in pair:
                s.close()


def _p50(xs: list[float]) -> float:
    return statistics.median(xs)


def _ms(xs: list[float]) -> str:
    return Spread.of(xs).show(".2f", " ms")


def run(ctx: Any) -> list[Result]:
    turns = 50 if ctx.quick else 200
    rounds = max(int(ctx.rounds), 5)
    env = _env(ctx, ctx.topic(4), ctx.prefix)
    with tempfile.TemporaryDirectory(prefix="sslg-bench-") as tmp:
        thread = f"long-{uuid.uuid4().hex[:8]}"
        grown = _job(env, "grow", tmp, thread, turns, rounds * 4)
        fresh: dict[str, dict[str, list[float]]] = {
            b: {"get_state": [], "list": [], "cold": []} for b in SHARED}
        for _ in range(rounds):
            for b in SHARED:
                got = _job(env, "read", b, _path(tmp, b), thread)
                for k in ("get_state", "list", "cold"):
                    fresh[b][k].append(got[k])
        rss = {b: _job(env, "rss", b, _path(tmp, b), f"rss-{uuid.uuid4().hex[:8]}", turns, 1)
               for b in BACKENDS}
        alone = {b: _job(env, "rss", b, _path(tmp, b), f"rss-{uuid.uuid4().hex[:8]}", turns,
                         0) for b in (SQLITE, MEMORY)}
        handoff = _handoff(env, tmp, 4 * rounds)
    inv, st = grown["invoke"], grown["get_state"]
    for b in BACKENDS:
        line = (f"  {b}: invoke {_ms(inv[b])}, get_state (writer) {_ms(st[b])}; RSS "
                f"{rss[b]['rss']:.0f} MiB (peak {rss[b]['hwm']:.0f})"
                + (f", {alone[b]['rss']:.0f} MiB without sessionstream's modules"
                   if b in alone else "")
                + f" after {turns} turns ({grown['messages'][b]} messages)")
        if b in SHARED:
            line += (f"; fresh process: get_state {_ms(fresh[b]['get_state'])} (its very "
                     f"first read, of another thread: {_ms(fresh[b]['cold'])}), list "
                     f"{_ms(fresh[b]['list'])}; handoff turn {_ms(handoff[b])}")
        print(line, flush=True)
    note = f"{turns}-turn thread" + (", quick" if ctx.quick else "")

    def ratio(measure: str, a: list[float], b: list[float], extra: str = "") -> Result:
        return Result(BENCH, measure, f"SqliteSaver {_p50(b):.2f} ms{extra}",
                      f"{_p50(a):.2f} ms", _p50(a) / _p50(b), "<= 1.5x", note)

    added = {b: _p50(handoff[b]) - _p50(inv[b]) for b in SHARED}
    return [
        ratio("langgraph invoke step (p50)", inv[OURS], inv[SQLITE],
              f"; InMemorySaver {_p50(inv[MEMORY]):.2f} ms"),
        ratio("langgraph get_state, writing process", st[OURS], st[SQLITE],
              f"; InMemorySaver {_p50(st[MEMORY]):.2f} ms"),
        ratio("langgraph get_state, fresh process", fresh[OURS]["get_state"],
              fresh[SQLITE]["get_state"]),
        ratio("langgraph list (last 20), fresh process", fresh[OURS]["list"],
              fresh[SQLITE]["list"]),
        Result(BENCH, "langgraph RSS after the thread (same modules loaded)",
               f"SqliteSaver {rss[SQLITE]['rss']:.0f} MiB; InMemorySaver "
               f"{rss[MEMORY]['rss']:.0f} MiB", f"{rss[OURS]['rss']:.0f} MiB",
               rss[OURS]["rss"] / rss[SQLITE]["rss"], "<= 1.5x",
               f"{note}; SqliteSaver alone {alone[SQLITE]['rss']:.0f} MiB"),
        Result(BENCH, "langgraph handoff: added to a turn (A writes, B the next)",
               f"SqliteSaver adds {added[SQLITE]:.2f} ms",
               f"{_p50(handoff[OURS]):.2f} ms a turn", added[OURS], "<= 20 ms", note),
    ]


# ---------------------------------------------------------------- standalone


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        job, *rest = sys.argv[2:]
        if job == "serve":
            job_serve(rest[0], rest[1])
            return
        if job == "grow":
            out = job_grow(rest[0], rest[1], int(rest[2]), int(rest[3]))
        elif job == "rss":
            out = job_rss(rest[0], rest[1], rest[2], int(rest[3]), rest[4] == "1")
        else:
            out = job_read(rest[0], rest[1], rest[2])
        print(json.dumps(out))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from bench.frameworks import Ctx
    from sessionstream.core.settings import Settings

    with tempfile.TemporaryDirectory(prefix="sslg-") as tmp:
        ctx = Ctx(Settings.from_env(), args.quick, args.rounds, Path(tmp))
        try:
            for r in run(ctx):
                print(f"{r.measure}: {r.value} vs {r.baseline} -> {r.ratio:.2f} "
                      f"(target {r.target}: {'met' if r.met else 'NOT met'})")
        finally:
            ctx.cleanup()

if __name__ == "__main__":
    main()
