"""The tenant's plots: sessions active, events per second, rejections and quarantines over
time, and the worker's lag per partition (``GET /api/tenant/series``).

Computed from what the worker already keeps in Redis, with the reader's grants (key
reads only: no SCAN, no DBSIZE, nothing of another tenant):

- the tenant's **change feed** (``<p>:{<t>}:changes:g<gen>``, a stream capped at
  100,000 entries): one entry per session write, its id the time of the write and its
  fields the session, ``as_of_seq``, the last offset folded and the units changed. A
  bucket's *sessions active* are the sessions written in it; its *events* the growth
  of each one's ``as_of_seq`` (events admitted). A session's first entry in what the
  dashboard holds is measured from its own change stream's previous entry (or from
  seq 0 when that stream shows it is new); when neither is left (trimmed) its first
  write counts no events and is reported in ``unmeasured``.
- each written session's row ``meta`` (``quarantine``: kind, seq, offset) and, for a
  session whose write changed ``rejections``, its ``rejections`` view (the last 50
  refusals with their offsets): a refusal or a quarantine is placed at the first write
  of its session that folded its offset.
- the **lag**: :class:`~sessionstream.streams.lag.LagProbe` (the numbers of
  ``sessionstream lag``: the worker group's progress in Redis against each partition's
  high watermark) sampled every :data:`LAG_INTERVAL_S` while the dashboard runs, the last
  :data:`LAG_SAMPLES` kept: lag history starts when the dashboard does (the worker's
  ``/metrics`` exports the same numbers for a longer memory).

The feed is read incrementally (from the last entry read) and the last
:data:`HORIZON_S` kept, so a refresh costs what was written since the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sessionstream.core.rows import KeySpace, MetaFields, SessionRow, read_change_entry
from sessionstream.streams.read import current_generation

log = logging.getLogger("sessionstream.dashboard")

#: Seconds of feed a dashboard keeps (the widest window it draws).
HORIZON_S = 6 * 3600
DEFAULT_WINDOW_S = 900
DEFAULT_BUCKETS = 60
MAX_BUCKETS = 600
#: One XRANGE reads at most this many entries (a refresh reads until it is done).
READ_COUNT = 5_000
#: Entries of a session's own change stream looked at to measure its first write.
SESSION_LOOKBACK = 200
LAG_INTERVAL_S = 5.0
LAG_SAMPLES = 2_880  # 4 h at 5 s
#: The admission verdicts that refuse (the ``rejections`` view keeps those).
REFUSALS = ("stale_epoch", "seq_gap", "seq_conflict", "history_conflict")


@dataclass(frozen=True, slots=True)
class Write:
    """One change-feed entry: a session write at ``ms``."""

    ms: int
    session: str
    as_of_seq: int
    offset: int
    changed: tuple[str, ...]
    events: int  # events admitted by this write (as_of_seq growth)


def _ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


@dataclass
class _Tenant:
    generation: int
    writes: deque[Write] = field(default_factory=deque)
    last_id: str | None = None
    seqs: dict[str, int] = field(default_factory=dict)  # session -> last as_of_seq seen
    unmeasured: int = 0
    #: (ms, session, kind) of each quarantine seen, and (ms, verdict) of each refusal
    quarantines: list[tuple[int, str, str]] = field(default_factory=list)
    quarantined: set[str] = field(default_factory=set)
    refusals: list[tuple[int, str]] = field(default_factory=list)
    placed: set[tuple[str, int, int]] = field(default_factory=set)  # (session, seq, offset)


class LagSampler:
    """Samples the worker group's lag per partition every ``interval`` seconds."""

    def __init__(self, probe: Any, interval: float = LAG_INTERVAL_S,
                 keep: int = LAG_SAMPLES) -> None:
        self.probe = probe
        self.interval = interval
        self.samples: deque[tuple[int, dict[int, tuple[int, int | None]]]] = deque(
            maxlen=keep)
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Let a measurement in flight end (its Kafka consumer runs in a thread and must
        not be closed under it), then close the probe."""
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None
        await asyncio.to_thread(self.probe.close)

    async def sample(self) -> None:
        try:
            lags = await self.probe.measure()
        except Exception as exc:  # Kafka or Redis away: say so, sample again later
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            return
        self.error = None
        self.samples.append((int(time.time() * 1000),
                             {lag.partition: (lag.offsets, lag.seq) for lag in lags}))

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)

    def to_json(self, since_ms: int) -> dict[str, Any]:
        rows = [(ms, lags) for ms, lags in self.samples if ms >= since_ms]
        parts = sorted({p for _, lags in rows for p in lags})
        return {"interval_s": self.interval, "partitions": parts, "error": self.error,
                "samples": [{"ms": ms, "offsets": {str(p): v[0] for p, v in lags.items()},
                             "seq": {str(p): v[1] for p, v in lags.items()}}
                            for ms, lags in rows]}


class FleetSeries:
    """The tenant series of one dashboard (its Redis client and key space)."""

    def __init__(self, redis: Any, keys: KeySpace, *, lag: LagSampler | None = None,
                 clock: Callable[[], float] = time.time, horizon_s: int = HORIZON_S) -> None:
        self.redis = redis
        self.keys = keys
        self.lag = lag
        self.clock = clock
        self.horizon_ms = horizon_s * 1000
        self._state: _Tenant | None = None
        self._lock = asyncio.Lock()

    # -- reading the feed ----------------------------------------------------------------
    async def refresh(self) -> _Tenant:
        """Read what the feed got since the last refresh (the horizon the first time)."""
        async with self._lock:
            gen = await current_generation(self.redis, self.keys)
            state = self._state
            if state is None or state.generation != gen:  # first, or a replay switched
                state = self._state = _Tenant(gen)
            now = int(self.clock() * 1000)
            start = (f"({state.last_id}" if state.last_id is not None
                     else f"{max(0, now - self.horizon_ms)}-0")
            feed = self.keys.tenant_changes(gen)
            fresh: list[tuple[str, dict[str, Any]]] = []
            while True:
                got = await self.redis.xrange(feed, min=start, max="+", count=READ_COUNT)
                for entry_id, fields in got:
                    change = read_change_entry(fields)
                    if change is not None and isinstance(change.get("session"), str):
                        fresh.append((str(entry_id), change))
                    state.last_id = str(entry_id)
                if len(got) < READ_COUNT:
                    break
                start = f"({state.last_id}"
            if fresh:
                await self._add(state, fresh)
            cut = now - self.horizon_ms
            while state.writes and state.writes[0].ms < cut:
                state.writes.popleft()
            return state

    async def _add(self, state: _Tenant, fresh: Sequence[tuple[str, dict[str, Any]]]
                   ) -> None:
        firsts = {}
        for _entry_id, change in fresh:
            sid = change["session"]
            if sid not in state.seqs and sid not in firsts:
                firsts[sid] = int(change.get("as_of_seq", -1))
        before = await self._previous_seqs(state.generation, firsts)
        state.seqs.update(before)
        touched: dict[str, bool] = {}
        for entry_id, change in fresh:
            sid = change["session"]
            seq = int(change.get("as_of_seq", -1))
            prev = state.seqs.get(sid)
            if prev is None:  # unmeasured: its first write counts nothing
                state.unmeasured += 1
                prev = seq
            changed = tuple(str(c) for c in change.get("changed") or ())
            state.writes.append(Write(_ms(entry_id), sid, seq, int(change.get("offset", -1)),
                                      changed, max(0, seq - prev)))
            state.seqs[sid] = max(prev, seq)
            touched[sid] = touched.get(sid, False) or "rejections" in changed
        await self._refusals_and_quarantines(state, touched)

    async def _previous_seqs(self, gen: int, firsts: Mapping[str, int]) -> dict[str, int]:
        """Each session's ``as_of_seq`` before its first write read now: from its own
        change stream (the newest entry below it), -1 when the stream shows it is new;
        absent when that is no longer known (trimmed)."""
        if not firsts:
            return {}
        sids = list(firsts)
        async with self.redis.pipeline(transaction=False) as pipe:
            for sid in sids:
                pipe.xrevrange(self.keys.session_changes(sid, gen), count=SESSION_LOOKBACK)
            replies = await pipe.execute()
        out: dict[str, int] = {}
        for sid, entries in zip(sids, replies, strict=True):
            seqs = [c.get("as_of_seq") for c in (read_change_entry(f) for _, f in entries or ())
                    if c is not None]
            older = [s for s in seqs if isinstance(s, int) and s < firsts[sid]]
            if older:
                out[sid] = max(older)
            elif len(seqs) < 100:  # never trimmed (the cap is 100): its first write
                out[sid] = -1
        return out

    async def _refusals_and_quarantines(self, state: _Tenant,
                                        touched: Mapping[str, bool]) -> None:
        sids = list(touched)
        gen = state.generation
        async with self.redis.pipeline(transaction=False) as pipe:
            for sid in sids:
                pipe.hmget(self.keys.session_row(sid, gen),
                           [SessionRow.META, SessionRow.view("rejections")]
                           if touched[sid] else [SessionRow.META])
            rows = await pipe.execute()
        writes: dict[str, list[Write]] = {}
        for w in state.writes:
            if w.session in touched:
                writes.setdefault(w.session, []).append(w)
        for sid, row in zip(sids, rows, strict=True):
            meta = _json(row[0]) or {}
            q = meta.get(MetaFields.QUARANTINE)
            if isinstance(q, dict) and sid not in state.quarantined:
                at = _placed(writes.get(sid, ()), q.get("offset"))
                if at is not None:
                    state.quarantined.add(sid)
                    state.quarantines.append((at, sid, str(q.get("kind"))))
            if len(row) > 1:
                view = _json(row[1]) or {}
                for decision in view.get("recent") or ():
                    key = (sid, int(decision.get("seq", -1)), int(decision.get("offset", -1)))
                    if key in state.placed:
                        continue
                    at = _placed(writes.get(sid, ()), decision.get("offset"))
                    if at is not None:
                        state.placed.add(key)
                        state.refusals.append((at, str(decision.get("verdict"))))

    # -- the plot's numbers ----------------------------------------------------------------
    def to_json(self, state: _Tenant, *, window_s: int = DEFAULT_WINDOW_S,
                buckets: int = DEFAULT_BUCKETS) -> dict[str, Any]:
        now = int(self.clock() * 1000)
        width = max(1, (window_s * 1000) // buckets)
        first = now - width * buckets
        rows = [_Bucket(first + i * width) for i in range(buckets)]

        def bucket(ms: int) -> _Bucket | None:
            i = (ms - first) // width
            return rows[i] if 0 <= i < buckets else None

        active: set[str] = set()
        for w in state.writes:
            b = bucket(w.ms)
            if b is None:
                continue
            b.sessions.add(w.session)
            b.events += w.events
            b.writes += 1
            active.add(w.session)
        for ms, verdict in state.refusals:
            b = bucket(ms)
            if b is not None:
                b.rejections[verdict] = b.rejections.get(verdict, 0) + 1
        quarantined = [(ms, sid, kind) for ms, sid, kind in state.quarantines
                       if bucket(ms) is not None]
        for ms, _sid, _kind in quarantined:
            b = bucket(ms)
            assert b is not None
            b.quarantines += 1
        out = [{"start_ms": b.start_ms, "sessions": len(b.sessions), "events": b.events,
                "events_per_s": round(b.events * 1000 / width, 3), "writes": b.writes,
                "rejections": sum(b.rejections.values()),
                "rejections_by_verdict": b.rejections, "quarantines": b.quarantines}
               for b in rows]
        span = [w.ms for w in state.writes]
        return {
            "tenant": self.keys.tenant, "generation": state.generation, "now_ms": now,
            "window_s": window_s, "bucket_ms": width, "buckets": out,
            "totals": {"sessions_active": len(active),
                       "events": sum(b["events"] for b in out),
                       "writes": sum(b["writes"] for b in out),
                       "rejections": sum(b["rejections"] for b in out),
                       "quarantines": len(quarantined)},
            "quarantined": [{"ms": ms, "session_id": sid, "kind": kind}
                            for ms, sid, kind in quarantined],
            "feed": {"writes_held": len(state.writes), "first_ms": span[0] if span else None,
                     "unmeasured": state.unmeasured},
            "lag": self.lag.to_json(first) if self.lag is not None else None,
        }


@dataclass
class _Bucket:
    start_ms: int
    sessions: set[str] = field(default_factory=set)
    events: int = 0
    writes: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    quarantines: int = 0


def _placed(writes: Sequence[Write], offset: Any) -> int | None:
    """The time of the first write whose folded offsets reach ``offset``."""
    if not isinstance(offset, int):
        return None
    for w in writes:
        if w.offset >= offset:
            return w.ms
    return None


def _json(raw: Any) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


# -- the route -------------------------------------------------------------------------------

FLEET = web.AppKey("fleet_series", FleetSeries)


def _int_arg(request: web.Request, name: str, default: int, low: int, top: int) -> int:
    raw = request.query.get(name, str(default))
    if not raw.isdigit() or not low <= int(raw) <= top:
        raise web.HTTPBadRequest(reason=f"{name}={raw!r} is not a number from {low} to {top}")
    return int(raw)


async def _handler(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    window = _int_arg(request, "window", DEFAULT_WINDOW_S, 10, HORIZON_S)
    buckets = _int_arg(request, "buckets", DEFAULT_BUCKETS, 1, MAX_BUCKETS)
    if fleet.lag is not None:
        fleet.lag.start()  # sampled from the first look on
    state = await fleet.refresh()
    return web.json_response(fleet.to_json(state, window_s=window, buckets=buckets))


def setup(app: web.Application, fleet: FleetSeries) -> None:
    """Add ``GET /api/tenant/series`` (``?window=<seconds>&buckets=<n>``)."""
    app[FLEET] = fleet

    async def stop_lag(app: web.Application) -> None:
        if fleet.lag is not None:
            await fleet.lag.stop()

    app.on_shutdown.append(stop_lag)  # before the app's Redis client closes (cleanup)
    app.router.add_get("/api/tenant/series", _handler)


def lag_probe(source: Any, redis: Any, keys: KeySpace, group: str) -> Any:
    """A :class:`~sessionstream.streams.lag.LagProbe` of the worker group ``group`` with
    the dashboard's Kafka principal (``source``: its TimelineSource) and Redis reader."""
    from sessionstream.core import codec
    from sessionstream.core.pipeline import ReaderPipeline
    from sessionstream.producers.kafka_clients import consumer_config
    from sessionstream.streams.lag import LagProbe
    from sessionstream.streams.sink import RedisSink, Retry

    default = ReaderPipeline.default()
    pipeline = ReaderPipeline(default.registry, default.catalog,
                              decode=source.decode or codec.decode)
    # assign() only, never joins or commits: a group id under the worker's own prefix
    config = consumer_config(source.bootstrap, f"{group}.lag-probe", {"log_level": 3},
                             security=dict(source.security))
    return LagProbe(config, source.topic, group, RedisSink(redis, keys, retry=Retry(3)),
                    pipeline)
