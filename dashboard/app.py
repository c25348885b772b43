"""The dashboard: a small aiohttp app over the Redis projections, with live updates.

It reads only Redis (never Kafka, never logs), always in the generation the pointer
names (``sessionstream replay`` switches it), through ``streams.read``:

- ``GET /``                    the page (``static/``: one HTML file, vanilla JS and CSS)
- ``GET /api/sessions``        the session index, newest first (``?limit=N``)
- ``GET /api/sessions/{id}``   every view of a session at one ``as_of_seq``; 404 if unknown
- ``GET /api/events``          Server-Sent Events from the tenant's change feed (``feed.py``)
- ``GET /api/sessions/{id}/series``  the numbers of a session's plots (``series.py``)
- ``GET /api/tenant/series``   the numbers of the tenant's plots (``fleet.py``)
- ``GET /healthz``             Redis reachable, and which generation readers use
- ``GET /metrics``             Prometheus: requests, latency, auth failures (``metrics.py``)

Every path but ``/healthz``, ``/metrics`` and ``/static/`` needs a token scoped to the
dashboard's tenant when ``DashboardConfig.auth`` is set (``dashboard/auth.py``);
``sessionstream dashboard`` always sets it.

Nothing here logs session content: only ids, counts and generations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from redis import exceptions as rexc
from redis.asyncio import Redis

from sessionstream import redisconn
from sessionstream.core.rows import KeySpace, read_change_entry
from sessionstream.core.settings import Env
from sessionstream.dashboard import fleet, memory, series, timeline
from sessionstream.dashboard.auth import TokenAuth
from sessionstream.dashboard.auth import middleware as auth_middleware
from sessionstream.dashboard.feed import Cursor, comment, frame, parse_event_id, stream_id_key
from sessionstream.dashboard.metrics import DashboardMetrics
from sessionstream.dashboard.series import SeriesConfig
from sessionstream.dashboard.timeline import TimelineSource
from sessionstream.streams.read import (
    LiveSnapshot,
    current_generation,
    list_sessions,
    read_views,
)

log = logging.getLogger("sessionstream.dashboard")

STATIC_DIR = Path(__file__).resolve().parent / "static"

# redis-py raises its own ConnectionError / TimeoutError for socket failures; a plain
# ConnectionResetError here is the browser going away, not Redis.
_REDIS_DOWN = (rexc.ConnectionError, rexc.TimeoutError, rexc.RedisClusterException)
# A Redis that answered and refused the dashboard's user (redis-py makes an authentication
# failure a ConnectionError: these are caught first).
_REDIS_REFUSED = (rexc.AuthenticationError, rexc.AuthenticationWrongNumberOfArgsError,
                  rexc.NoPermissionError)
_REDIS_FAILED = (*_REDIS_REFUSED, *_REDIS_DOWN)


@dataclass(frozen=True)
class DashboardConfig:
    """What the dashboard reads and how often the live feed wakes up."""

    redis_url: str
    redis_cluster: bool = False  # redis_url names one node of a Redis Cluster
    keys: KeySpace = field(default_factory=lambda: KeySpace("default"))
    list_limit: int = 200  # sessions in the list when the page does not ask for a number
    block_ms: int = 5000  # one XREAD waits at most this long: keep-alive and generation check
    retry_ms: int = 3000  # the browser waits this long before reconnecting the event stream
    timeline: TimelineSource | None = None  # where the event timeline reads (None: no timeline)
    rows: Any = None  # opens views sealed with the sessions' keys (governance.rows.RowCipher)
    #: Tenant-scoped bearer tokens (None: no authentication, for an app embedded behind
    #: its own; the ``sessionstream dashboard`` server always sets it).
    auth: TokenAuth | None = None
    #: How session plots are read (None: from ``timeline``'s Kafka source, no prices,
    #: no budget line; no plots without a timeline source).
    series: SeriesConfig | None = None
    #: The worker's consumer group, whose lag the tenant plots sample (None: no lag plot).
    streams_group: str | None = None
    lag_interval_s: float = 5.0


CONFIG = web.AppKey("config", DashboardConfig)
REDIS = web.AppKey("redis", Redis)
STOPPING = web.AppKey("stopping", asyncio.Event)
METRICS = web.AppKey("metrics", DashboardMetrics)


def create_app(config: DashboardConfig) -> web.Application:
    """The web application; it opens its Redis client here and closes it on cleanup."""
    metrics = DashboardMetrics(config.keys.tenant)
    checks = ([auth_middleware(config.auth, refused=metrics.auth_failure)]
              if config.auth is not None else [])
    app = web.Application(middlewares=[metrics.middleware(), *checks, _json_errors])
    app[CONFIG] = config
    app[METRICS] = metrics
    app[STOPPING] = asyncio.Event()
    # A blocking XREAD must end (block_ms) before the socket read times out.
    app[REDIS] = redisconn.async_redis(config.redis_url, cluster=config.redis_cluster,
                                       decode_responses=True,
                                       socket_timeout=config.block_ms / 1000 + 10,
                                       health_check_interval=30)

    async def stop_feeds(app: web.Application) -> None:
        app[STOPPING].set()

    async def close_redis(app: web.Application) -> None:
        await app[REDIS].aclose()

    app.on_shutdown.append(stop_feeds)
    app.on_cleanup.append(close_redis)
    app.router.add_get("/", _index)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", metrics.view)
    app.router.add_get("/api/sessions", _sessions)
    app.router.add_get("/api/sessions/{session_id}", _session)
    app.router.add_get("/api/events", _events)
    if config.timeline is not None:
        timeline.setup(app, config.timeline, _snapshot)
        series.setup(app, config.series or SeriesConfig(config.timeline, rows=config.rows),
                     _position)
    lag = None
    if config.timeline is not None and config.streams_group:
        lag = fleet.LagSampler(fleet.lag_probe(config.timeline, app[REDIS], config.keys,
                                               config.streams_group),
                               interval=config.lag_interval_s)
    fleet.setup(app, fleet.FleetSeries(app[REDIS], config.keys, lag=lag))
    memory.setup(app, memory.MemoryView(config.redis_url, config.redis_cluster, config.keys,
                                        config.rows))
    app.router.add_static("/static", STATIC_DIR)
    return app


async def _snapshot(request: web.Request, sid: str) -> Any:
    """The session's views as readers see them (None: no projections)."""
    config = request.app[CONFIG]
    return await read_views(request.app[REDIS], config.keys, sid, rows=config.rows)


async def _position(request: web.Request, sid: str) -> LiveSnapshot | None:
    return await series.read_position(request.app[REDIS], request.app[CONFIG].keys, sid)


def _redis_down(config: DashboardConfig, exc: BaseException) -> str:
    if isinstance(exc, rexc.RedisClusterException) and isinstance(exc.__cause__,
                                                                  _REDIS_REFUSED):
        exc = exc.__cause__
    if isinstance(exc, _REDIS_REFUSED):
        return (f"Redis refused the dashboard's user ({type(exc).__name__}): give it its "
                f"tenant's reader in {Env.REDIS_URL} (`sessionstream acl env --role reader`)")
    return (f"cannot reach Redis ({type(exc).__name__}); start it with `sessionstream up` "
            f"or point {Env.REDIS_URL} at a running server")


@web.middleware
async def _json_errors(request: web.Request,
                       handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                       ) -> web.StreamResponse:
    """API errors as JSON with a sentence saying what to do; Redis outages as 503."""
    try:
        return await handler(request)
    except _REDIS_FAILED as exc:
        log.warning("Redis unavailable for %s (%s)", request.path, type(exc).__name__)
        return web.json_response({"error": _redis_down(request.app[CONFIG], exc)}, status=503)
    except web.HTTPException as exc:
        if not request.path.startswith("/api/") or exc.status < 400:
            raise
        return web.json_response({"error": exc.reason, "path": request.path},
                                 status=exc.status)


async def _index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def _healthz(request: web.Request) -> web.Response:
    config, redis = request.app[CONFIG], request.app[REDIS]
    try:
        await redis.ping()
        gen = await current_generation(redis, config.keys)
    except _REDIS_FAILED as exc:
        return web.json_response({"ok": False, "error": _redis_down(config, exc)}, status=503)
    return web.json_response({"ok": True, "tenant": config.keys.tenant,
                              "prefix": config.keys.prefix, "generation": gen})


async def _sessions(request: web.Request) -> web.Response:
    config, redis = request.app[CONFIG], request.app[REDIS]
    raw = request.query.get("limit", str(config.list_limit))
    if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
        return web.json_response(
            {"error": f"limit={raw!r} is not a number of sessions from 1 to 10000"}, status=400)
    gen = await current_generation(redis, config.keys)
    rows = await list_sessions(redis, config.keys, limit=int(raw),
                               generation=gen)
    return web.json_response({"tenant": config.keys.tenant, "generation": gen, "sessions": rows})


async def _session(request: web.Request) -> web.Response:
    config, redis = request.app[CONFIG], request.app[REDIS]
    sid = request.match_info["session_id"]
    snap = await read_views(redis, config.keys, sid, rows=config.rows)
    if snap is None:
        gen = await current_generation(redis, config.keys)
        return web.json_response({
            "error": f"no projections for session {sid!r} of tenant {config.keys.tenant!r} "
                     f"in generation {gen}: check the id in /api/sessions, and that the "
                     "worker (`sessionstream worker`) has reached it",
            "session_id": sid, "tenant": config.keys.tenant, "generation": gen,
        }, status=404)
    body = {**snap.to_json(), "meta": snap.meta}
    recon = _reconstructability(config, sid)
    if recon is not None:
        body["reconstructability"] = recon
    return web.json_response(body)


def _reconstructability(config: DashboardConfig, sid: str) -> dict[str, Any] | None:
    """Seed §4.6.1 on the page: which classes of the session were deleted, when, by whom
    (the key store's tombstones; without surface content no request rebuilds exactly)."""
    rows = config.rows
    if rows is None:
        return None
    shredded = rows.cipher.store.shredded(rows.tenant, sid)
    return {"fully_reconstructable": not any(s.data_class.value == "surface"
                                             for s in shredded),
            "shredded": [{"data_class": s.data_class.value, "at": s.at,
                          "principal": s.principal, "reason": s.reason} for s in shredded]}


async def _events(request: web.Request) -> web.StreamResponse:
    """Change notifications as SSE; resumes after ``Last-Event-ID`` when the feed still can."""
    config, redis, stopping = request.app[CONFIG], request.app[REDIS], request.app[STOPPING]
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no"})  # a buffering reverse proxy would hold events back
    await resp.prepare(request)
    await resp.write(f"retry: {config.retry_ms}\n\n".encode())
    sent = 0
    try:
        gen = await current_generation(redis, config.keys)
        last = parse_event_id(request.headers.get("Last-Event-ID"))
        cursor, reset = await _start(redis, config, gen, last)
        kind = "reset" if reset else "hello"
        await resp.write(frame(kind, {"generation": gen, "tenant": config.keys.tenant,
                                      "reason": reset}, cursor.event_id()))
        while not stopping.is_set():
            feed = config.keys.tenant_changes(gen)
            rows = _entries(await redis.xread({feed: cursor.entry_id}, count=500,
                                              block=config.block_ms))
            for entry_id, fields in rows:
                cursor = Cursor(gen, entry_id)
                await resp.write(frame("change", {**_change(fields), "generation": gen},
                                       cursor.event_id()))
                sent += 1
            if not rows:
                await resp.write(comment("keep-alive"))
            now = await current_generation(redis, config.keys)
            if now != gen:
                gen = now
                cursor = Cursor(gen, await _last_entry_id(redis, config, gen))
                await resp.write(frame("reset", {
                    "generation": gen, "tenant": config.keys.tenant,
                    "reason": f"readers switched to generation {gen} (replay)"},
                    cursor.event_id()))
    except ConnectionResetError:
        log.debug("event stream closed by the client after %d changes", sent)
    except _REDIS_FAILED as exc:
        log.warning("event stream: Redis unavailable (%s)", type(exc).__name__)
        await resp.write(frame("unavailable", {"error": _redis_down(config, exc)}))
    return resp


async def _start(redis: Redis, config: DashboardConfig, gen: int, last: Cursor | None
                 ) -> tuple[Cursor, str | None]:
    """Where a new event stream starts, and why the client must re-read (None: it need not)."""
    if last is None:
        return Cursor(gen, await _last_entry_id(redis, config, gen)), None
    if last.generation != gen:
        return (Cursor(gen, await _last_entry_id(redis, config, gen)),
                f"readers switched from generation {last.generation} to {gen}")
    info = await _stream_info(redis, config.keys.tenant_changes(gen))
    if info is None:
        return last, None
    # Trimming (MAXLEN) does not move max-deleted-entry-id in Redis 7.0, so also compare the
    # first entry still held: past the cursor, entries after it may be gone (re-reading
    # when only the cursor's own entry was trimmed is harmless).
    first: Any = info.get("first-entry")
    deleted = str(info.get("max-deleted-entry-id") or "0-0")
    after = stream_id_key(last.entry_id)
    lost = (bool(first) and stream_id_key(str(first[0])) > after) or \
        stream_id_key(deleted) > after
    if lost:
        return (Cursor(gen, str(info.get("last-generated-id", "0-0"))),
                "the change feed was trimmed past your last event")
    return last, None


async def _last_entry_id(redis: Redis, config: DashboardConfig, gen: int) -> str:
    """The feed's newest id (not ``$``: a later XREAD from it misses nothing in between)."""
    info = await _stream_info(redis, config.keys.tenant_changes(gen))
    return str(info.get("last-generated-id", "0-0")) if info else "0-0"


async def _stream_info(redis: Redis, key: str) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = await redis.xinfo_stream(key)
    except rexc.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return None
        raise
    return info


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """XREAD's entries of the one stream read, whether the reply is RESP2 (list) or RESP3 (dict)."""
    streams = reply.values() if isinstance(reply, dict) else [e for _k, e in reply or ()]
    return [(str(eid), dict(fields or {})) for entries in streams for eid, fields in entries]


def _change(fields: dict[str, str]) -> dict[str, Any]:
    value = read_change_entry(fields)
    return value if value is not None else {"malformed": True}
