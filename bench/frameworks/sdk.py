"""The OpenAI Agents SDK: ``SessionstreamSession`` on the fleet beside the SDK's own
``SQLiteSession`` (a file) and ``RedisSession`` (the same Redis), same items, same run.

Workloads (issue 33's targets, ours / ``SQLiteSession``, p50):

- a turn: ``add_items`` of a user and an assistant message, then ``get_items()``, on one
  session object (the runner's pattern), as the session grows;
- a 100-item ``add_items``;
- on a 5,000-item session: ``get_items(limit=20)`` and a full ``get_items()`` from the
  writing process and from a fresh process (a child that builds the session object per
  request over a process-wide store, as a stateless web tier does);
- a handoff: two stores (two nodes) writing turns in turn, against one store's turns;
- 50 sessions, one turn each, concurrently;
- bytes stored per 1,000 items (the broker's log files, after lz4): sealed / clear.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from bench.frameworks import Ctx, child, child_main, ms
from bench.results import Result
from sessionstream.core.settings import Env, Settings

MODULE = "bench.frameworks.sdk"


#: Words of the generated conversation: made-up, Zipf-distributed (a few frequent, many
#: rare), so messages differ the way real ones do and the topic's compression is not
#: flattered by repeated templates.
_SYLLABLES = ["ka", "lo", "mi", "ren", "sta", "vo", "tel", "ur", "pa", "qua", "di", "ner",
              "so", "bri", "gan", "ox", "le", "tur", "ami", "cor"]
_RNG = random.Random(20261204)
_WORDS = ["".join(_RNG.choice(_SYLLABLES) for _ in range(_RNG.randint(1, 4)))
          for _ in range(3000)]
_WEIGHTS = [1 / (i + 1) for i in range(len(_WORDS))]


def _text(n: int, words: int) -> str:
    rng = random.Random(n)
    return " ".join(rng.choices(_WORDS, _WEIGHTS, k=rng.randint(words // 2, words))) + "."


def user(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"Question {n}: {_text(n, 40)}"}


def assistant(n: int) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "id": f"msg_{n:08d}",
            "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "text": _text(n, 80)}]}


def items(start: int, count: int) -> list[dict[str, Any]]:
    return [user(i) if i % 2 == 0 else assistant(i) for i in range(start, start + count)]


# -- the sessions under test ---------------------------------------------------------------

def fleet_store(settings: Settings) -> Any:
    from sessionstream.integrations.openai_agents import EVENT_TYPES, ITEMS_VIEW
    from sessionstream.integrations.store import FleetStore

    return FleetStore.from_settings(settings, EVENT_TYPES, [ITEMS_VIEW])


def make(backend: str, sid: str, where: dict[str, Any], store: Any = None,
         client: Any = None) -> Any:
    """A session object of ``backend`` for ``sid`` (what one request builds)."""
    if backend == "ours":
        from sessionstream.integrations.openai_agents import SessionstreamSession

        return SessionstreamSession(sid, store)
    if backend == "sqlite":
        from agents import SQLiteSession

        return SQLiteSession(sid, db_path=where["db"])
    from agents.extensions.memory.redis_session import RedisSession

    return RedisSession(sid, redis_client=client, key_prefix=where["redis_prefix"])


class Backends:
    """The three backends' process-wide parts (the store, the Redis client)."""

    def __init__(self, settings: Settings, where: dict[str, Any]) -> None:
        import redis.asyncio as aioredis

        self.where = where
        self.store = fleet_store(settings)
        self.client = aioredis.Redis.from_url(settings.redis_url)

    def session(self, backend: str, sid: str) -> Any:
        return make(backend, sid, self.where, self.store, self.client)

    def close(self) -> None:
        self.store.close()


async def _fill(s: Any, total: int, batch: int = 100) -> None:
    for start in range(0, total, batch):
        await s.add_items(items(start, min(batch, total - start)))


# -- the fresh-process reader (a child) ---------------------------------------------------

def _read_job(args: dict[str, Any]) -> dict[str, Any]:
    """A stateless reader: a new session object per request, ``n`` requests."""
    settings = Settings.from_env()
    b = Backends(settings, args["where"])

    async def go() -> list[float]:
        out = []
        for _ in range(args["n"]):
            t0 = time.perf_counter()
            s = b.session(args["backend"], args["sid"])
            got = await s.get_items(limit=args["limit"])
            out.append(time.perf_counter() - t0)
            assert len(got) == (args["limit"] or args["total"]), len(got)
        await b.client.aclose()
        return out

    timings = asyncio.run(go())
    b.close()
    return {"timings": timings}


# -- the bench ----------------------------------------------------------------------------

def run(ctx: Ctx) -> list[Result]:
    topic, prefix = ctx.topic(), ctx.prefix
    os.environ.update(ctx.env(topic, prefix))
    settings = Settings.from_env()
    where = {"db": str(ctx.tmp / "sdk.db"), "redis_prefix": f"{prefix}:sdk"}
    b = Backends(settings, where)
    loop = asyncio.new_event_loop()
    out: list[Result] = []
    names = ("ours", "sqlite", "redis")
    run_ = loop.run_until_complete
    try:
        # 1. a turn, as the session grows
        turns = 40 if ctx.quick else 150
        turn_t: dict[str, list[float]] = {n: [] for n in names}
        for n in names:
            s = b.session(n, f"turn-{uuid.uuid4().hex[:8]}")
            for t in range(turns):
                t0 = time.perf_counter()
                run_(s.add_items(items(2 * t, 2)))
                run_(s.get_items())
                turn_t[n].append(time.perf_counter() - t0)
        out += _ratios(ctx, "turn (add_items of 2 + get_items)", turn_t, "<= 1.5x")

        # 2. a 100-item batch
        batch_t: dict[str, list[float]] = {n: [] for n in names}
        for n in names:
            s = b.session(n, f"batch-{uuid.uuid4().hex[:8]}")
            for r in range(max(ctx.rounds * 2, 6)):
                t0 = time.perf_counter()
                run_(s.add_items(items(100 * r, 100)))
                batch_t[n].append(time.perf_counter() - t0)
        out += _ratios(ctx, "add_items of 100 items", batch_t, "<= 3x")

        # 3. a 5,000-item session: reads from the writer and from a fresh process
        total = 1000 if ctx.quick else 5000
        sid = f"long-{uuid.uuid4().hex[:8]}"
        long = {n: b.session(n, sid) for n in names}
        for n in names:
            run_(_fill(long[n], total))
        w20: dict[str, list[float]] = {n: [] for n in names}
        wall: dict[str, list[float]] = {n: [] for n in names}
        for n in names:
            for _ in range(30):
                t0 = time.perf_counter()
                run_(long[n].get_items(limit=20))
                w20[n].append(time.perf_counter() - t0)
            for _ in range(max(ctx.rounds, 7)):
                t0 = time.perf_counter()
                run_(long[n].get_items())
                wall[n].append(time.perf_counter() - t0)
        out += _ratios(ctx, f"get_items(limit=20), writing process, {total} items", w20,
                       "<= 3x")
        out += _ratios(ctx, f"get_items(), writing process, {total} items", wall, "<= 1.5x")
        env = ctx.env(topic, prefix)
        f20 = {n: child(MODULE, "read", {"backend": n, "sid": sid, "where": where,
                                         "limit": 20, "n": 40, "total": total},
                        env)["timings"][1:] for n in names}
        out += _ratios(ctx, f"get_items(limit=20), fresh process, {total} items", f20,
                       "<= 3x")
        fall = {n: child(MODULE, "read", {"backend": n, "sid": sid, "where": where,
                                          "limit": None, "n": max(ctx.rounds, 7) + 1,
                                          "total": total}, env)["timings"][1:]
                for n in names}
        out += _ratios(ctx, f"get_items(), fresh process, {total} items", fall, "<= 1.5x")

        # 4. a handoff: two nodes in turn against one node
        out += _handoff(ctx, settings, loop, turns)

        # 5. 50 sessions at once, one turn each (sessions that exist: a tier's steady
        # state; each round is the next turn of all 50)
        conc: dict[str, list[float]] = {n: [] for n in names}

        async def one(s: Any, i: int) -> None:
            await s.add_items(items(2 * i, 2))
            await s.get_items()

        async def all_(ss: list[Any]) -> None:
            await asyncio.gather(*(one(s, i) for i, s in enumerate(ss)))

        for n in names:
            ss = [b.session(n, f"c{i}-{uuid.uuid4().hex[:6]}") for i in range(50)]
            run_(all_(ss))  # the sessions' first turn (creates them): not timed
            for _ in range(ctx.rounds):
                t0 = time.perf_counter()
                run_(all_(ss))
                conc[n].append(time.perf_counter() - t0)
        out += _ratios(ctx, "50 sessions, one turn each, concurrently", conc, "<= 1.5x")

        # 6. bytes on the topic per 1,000 items, sealed / clear
        out += _bytes(ctx, loop)
    finally:
        run_(b.client.aclose())
        b.close()
        loop.close()
    return out


def _ratios(ctx: Ctx, measure: str, t: dict[str, list[float]], target: str) -> list[Result]:
    ours, sqlite, redis_ = (ms(t[n]) for n in ("ours", "sqlite", "redis"))
    note = "quick" if ctx.quick else ""
    print(f"    {measure}: ours {ours.show(unit=' ms')}, SQLiteSession "
          f"{sqlite.show(unit=' ms')}, RedisSession {redis_.show(unit=' ms')}", flush=True)
    return [Result("frameworks/sdk", measure, f"SQLiteSession p50 {sqlite.median:.2f} ms",
                   f"ours p50 {ours.median:.2f} ms (RedisSession {redis_.median:.2f} ms)",
                   ours.median / sqlite.median, target, note)]


def _handoff(ctx: Ctx, settings: Settings, loop: asyncio.AbstractEventLoop,
             turns: int) -> list[Result]:
    """Turns alternating between two stores (two nodes) against one store's turns: what
    taking the session over from another node adds to a turn."""
    from sessionstream.integrations.openai_agents import SessionstreamSession

    a, b2, solo = fleet_store(settings), fleet_store(settings), fleet_store(settings)
    sid, solo_sid = f"handoff-{uuid.uuid4().hex[:8]}", f"solo-{uuid.uuid4().hex[:8]}"
    run_ = loop.run_until_complete
    moved, same = [], []
    n = max(turns // 2, 20)
    for t in range(n):
        for store, bucket, s_id in ((a, None, sid), (b2, moved, sid), (solo, same, solo_sid)):
            s = SessionstreamSession(s_id, store)
            t0 = time.perf_counter()
            run_(s.add_items(items(2 * t, 2)))
            run_(s.get_items(limit=20))
            if bucket is not None:
                bucket.append(time.perf_counter() - t0)
    for s in (a, b2, solo):
        s.close()
    moved_s, same_s = ms(moved), ms(same)
    added = moved_s.median - same_s.median
    print(f"    handoff: a turn after another node's {moved_s.show(unit=' ms')}, after "
          f"this node's {same_s.show(unit=' ms')}", flush=True)
    return [Result("frameworks/sdk", "a handoff (the turn after another node's turn)",
                   f"the turn after this node's, p50 {same_s.median:.2f} ms",
                   f"p50 {moved_s.median:.2f} ms (+{added:.2f} ms)", added, "<= 20 ms",
                   "quick" if ctx.quick else "")]


def _bytes(ctx: Ctx, loop: asyncio.AbstractEventLoop) -> list[Result]:
    """Broker log bytes per 1,000 items, sealed against clear (same items)."""
    from sessionstream.integrations.openai_agents import SessionstreamSession

    sizes = {}
    for mode in ("off", "on"):
        topic = ctx.topic(1)
        settings = Settings.from_env({**os.environ, **ctx.env(topic, ctx.prefix),
                                      Env.ENCRYPTION: mode})
        store = fleet_store(settings)
        s = SessionstreamSession(f"bytes-{uuid.uuid4().hex[:8]}", store)
        loop.run_until_complete(_fill(s, 1000))
        store.close()
        sizes[mode] = _log_bytes(settings, topic)
    if not sizes["off"]:
        return []
    ratio = sizes["on"] / sizes["off"]
    print(f"    stored per 1,000 items: clear {sizes['off'] / 1024:.0f} KiB, sealed "
          f"{sizes['on'] / 1024:.0f} KiB", flush=True)
    return [Result("frameworks/sdk", "bytes on the topic per 1,000 items, sealed",
                   f"clear {sizes['off'] / 1024:.0f} KiB",
                   f"sealed {sizes['on'] / 1024:.0f} KiB", ratio, "<= 1.2x")]


def _log_bytes(settings: Settings, topic: str) -> int:
    """The broker's segment files of ``topic`` (the local stack's data dir), after the
    producer's lz4 — what the topic really keeps."""
    data = Path(settings.state_dir) / "kafka" / "data"
    deadline = time.monotonic() + 10
    total = 0
    while time.monotonic() < deadline:
        total = sum(f.stat().st_size for d in data.glob(f"{topic}-*") for f in d.glob("*.log"))
        if total:
            break
        time.sleep(0.2)
    return total


if __name__ == "__main__":
    child_main({"read": _read_job})
