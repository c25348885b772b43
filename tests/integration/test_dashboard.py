"""The dashboard against the real Redis, fed by the real processor in-process.

Events go through a real topic and ``Processor`` + ``RedisSink`` (the worker's code, no
faust) into a unique key prefix; the app runs on a free loopback port.
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from sessionstream.core.events import Event, Writer, make_event
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.streams.processor import Processor
from sessionstream.streams.read import read_views
from sessionstream.streams.sink import RedisSink
from tests.integration.procs import ProcessGroup
from tests.integration.streams_helpers import fleet, interleave, produce, read_topic, wait_until


@dataclass
class Fleet:
    """Sessions in a topic, projected into Redis on demand."""

    settings: Settings
    topic: str
    prefix: str
    logs: dict[str, list[Event]]
    processor: Processor
    produced: int = 0

    async def write(self, events: list[Event]) -> None:
        """Produce ``events`` and fold every record not yet processed into Redis."""
        produce(self.settings.kafka_bootstrap, self.topic, events)
        self.produced += len(events)
        records = read_topic(self.settings.kafka_bootstrap, self.topic, self.produced)
        await self.processor.process(records)  # offsets already processed are skipped


@pytest.fixture
async def projected(settings: Settings, unique_topic: Callable[..., str],
                    redis_prefix: str) -> AsyncIterator[Fleet]:
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    sink = RedisSink(aredis, KeySpace(settings.tenant, redis_prefix))
    yield Fleet(settings, unique_topic(2), redis_prefix, fleet(4, seed=5, prefix="dash"),
                Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g"))
    await aredis.aclose()


@pytest.fixture
async def client(settings: Settings, redis_prefix: str) -> AsyncIterator[TestClient[Any, Any]]:
    config = DashboardConfig(redis_url=settings.redis_url,
                             keys=KeySpace(settings.tenant, redis_prefix), block_ms=200)
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        yield c


async def next_event(resp: ClientResponse, timeout: float = 15) -> dict[str, Any]:
    """The next SSE message (comments and the retry hint skipped) as id/event/data."""
    msg: dict[str, Any] = {}
    async with asyncio.timeout(timeout):
        while True:
            line = (await resp.content.readline()).decode()
            if line == "":
                raise AssertionError(f"event stream ended; last partial message {msg}")
            line = line.rstrip("\n")
            if not line:
                if "event" in msg:
                    return msg
                msg = {}
                continue
            field, _, value = line.partition(": ")
            if field == "data":
                msg["data"] = json.loads(value)
            elif field in ("id", "event"):
                msg[field] = value


async def until_change(resp: ClientResponse, session: str, as_of_seq: int) -> list[dict[str, Any]]:
    """SSE messages up to the change that brings ``session`` to ``as_of_seq``."""
    got = []
    while True:
        ev = await next_event(resp)
        got.append(ev)
        if ev["event"] == "change" and ev["data"]["session"] == session \
                and ev["data"]["as_of_seq"] == as_of_seq:
            return got


async def test_the_api_lists_a_session_once_it_is_projected_and_the_detail_equals_read_views(
    projected: Fleet, client: TestClient[Any, Any], settings: Settings,
) -> None:
    resp = await client.get("/api/sessions")
    assert resp.status == 200
    assert (await resp.json())["sessions"] == []

    await projected.write(interleave(projected.logs))
    body = await (await client.get("/api/sessions")).json()
    rows = {r["session_id"]: r for r in body["sessions"]}
    assert set(rows) == set(projected.logs)
    assert body["generation"] == 1
    times = [r["last_time"] for r in body["sessions"]]
    assert times == sorted(times, reverse=True), "newest first"
    for sid, log in projected.logs.items():
        row = rows[sid]
        assert row["as_of_seq"] == log[-1].seq
        assert row["status"] == "active" and row["quarantine"] is None
        assert row["rejections"] == 0 and row["open_turn"] is None

    sid = next(iter(projected.logs))
    resp = await client.get(f"/api/sessions/{sid}")
    assert resp.status == 200
    detail = await resp.json()
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    snap = await read_views(aredis, KeySpace(settings.tenant, projected.prefix), sid)
    await aredis.aclose()
    assert snap is not None
    assert detail == {**json.loads(json.dumps(snap.to_json())), "meta": snap.meta}
    assert {"turns", "tools", "surface", "usage", "compaction", "rejections"} <= set(
        detail["views"])


async def test_an_unknown_session_is_a_404_with_a_json_error_that_says_what_to_check(
    client: TestClient[Any, Any], settings: Settings,
) -> None:
    resp = await client.get("/api/sessions/no-such-session")
    assert resp.status == 404
    body = await resp.json()
    assert body["session_id"] == "no-such-session"
    assert "no-such-session" in body["error"] and "/api/sessions" in body["error"]
    assert "worker" in body["error"]
    bad = await client.get("/api/sessions?limit=lots")
    assert bad.status == 400 and "limit" in (await bad.json())["error"]
    missing = await client.get("/api/nothing-here")
    assert missing.status == 404 and "error" in await missing.json()


async def test_the_event_stream_delivers_a_change_after_a_new_batch_and_resumes_after_last_event_id(
    projected: Fleet, client: TestClient[Any, Any],
) -> None:
    sid, log = next(iter(projected.logs.items()))
    head, tail = log[:-5], log[-5:]
    others = [e for s, lg in projected.logs.items() if s != sid for e in lg]
    await projected.write(head + others)

    resp = await client.get("/api/events")
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    hello = await next_event(resp)
    assert hello["event"] == "hello" and hello["data"]["generation"] == 1

    await projected.write(tail)
    got = await until_change(resp, sid, log[-1].seq)
    change = got[-1]
    assert change["data"]["generation"] == 1 and change["id"].startswith("1-")
    assert "index" in change["data"]["changed"]
    resp.close()

    # A browser that reconnects with the id it last saw gets what it missed, nothing lost.
    resp = await client.get("/api/events", headers={"Last-Event-ID": hello["id"]})
    first = await next_event(resp)
    assert first["event"] == "hello" and first["id"] == hello["id"]
    again = await until_change(resp, sid, log[-1].seq)
    assert again[-1]["id"] == change["id"]
    resp.close()


async def test_a_rejection_shows_in_the_list_and_a_quarantine_reason_in_the_detail(
    projected: Fleet, client: TestClient[Any, Any],
) -> None:
    sid, log = next(iter(projected.logs.items()))
    zombie = make_event(session_id=sid, seq=3, event_id="zombie", time=1, type="todo/add",
                        data={"id": "z", "text": "zombie"}, writer=Writer("old", 0))
    unknown = make_event(session_id="dash-q", seq=0, event_id="q0", time=1,
                         type="widget/frobnicate", data={}, writer=Writer("w", 1))
    await projected.write([*log, zombie, unknown])
    rows = {r["session_id"]: r for r in (await (await client.get("/api/sessions")).json())
            ["sessions"]}
    assert rows[sid]["rejections"] == 1
    detail = await (await client.get(f"/api/sessions/{sid}")).json()
    assert detail["views"]["rejections"]["recent"][0]["event_id"] == "zombie"
    if "dash-q" in rows:  # quarantined before anything was admitted: listed only if written
        q = await (await client.get("/api/sessions/dash-q")).json()
        assert "widget/frobnicate" in q["quarantine"]["reason"]


async def test_a_generation_switch_or_a_trimmed_feed_tells_the_browser_to_reset(
    projected: Fleet, client: TestClient[Any, Any], redis_client: redis.Redis,
    settings: Settings,
) -> None:
    await projected.write(interleave(projected.logs))
    feed = KeySpace(settings.tenant, projected.prefix).tenant_changes(1)
    # The capped feed no longer holds what came after this id: resuming would miss changes.
    first_id = redis_client.xrange(feed, count=1)[0][0]
    redis_client.xtrim(feed, maxlen=1, approximate=False)
    resp = await client.get("/api/events", headers={"Last-Event-ID": f"1-{first_id}"})
    ev = await next_event(resp)
    assert ev["event"] == "reset" and "trimmed" in ev["data"]["reason"]
    # replay switches readers to another generation while the browser is connected
    redis_client.set(KeySpace(settings.tenant, projected.prefix).generation(), 2)
    ev = await next_event(resp)
    assert ev["event"] == "reset" and ev["data"]["generation"] == 2
    assert ev["id"].startswith("2-")
    resp.close()
    body = await (await client.get("/api/sessions")).json()
    assert body["generation"] == 2 and body["sessions"] == []
    health = await (await client.get("/healthz")).json()
    assert health == {"ok": True, "tenant": settings.tenant, "prefix": projected.prefix,
                      "generation": 2}


def test_the_cli_serves_the_page_and_health_on_loopback(
    procs: ProcessGroup, settings: Settings, redis_prefix: str,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "cli-test-token-0123456789"
    env = {"SESSIONSTREAM_KEY_PREFIX": redis_prefix, "SESSIONSTREAM_REDIS_URL": settings.redis_url,
           "SESSIONSTREAM_DASHBOARD_TOKEN": token}
    proc = procs.start_module("sessionstream.cli.main", "dashboard", "--port", str(port), env=env)

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                return bool(json.load(r)["ok"])
        except OSError:
            return False

    proc.wait_for(up, 30, "the dashboard to answer /healthz")
    page_request = urllib.request.Request(f"http://127.0.0.1:{port}/",
                                          headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(page_request, timeout=5) as r:
        page = r.read().decode()
    assert "<script src=\"/static/app.js\">" in page
    assert proc.stop() == 0
    wait_until(lambda: not proc.running(), 5, "the dashboard to exit")
