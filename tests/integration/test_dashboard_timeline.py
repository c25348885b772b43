"""The event timeline API against the real Kafka and Redis: the session's own range only,
every record with its admission verdict."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sessionstream.core.events import Writer, make_event
from sessionstream.core.rows import KeySpace
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.dashboard.timeline import TimelineSource
from tests.integration.test_dashboard import Fleet, projected  # noqa: F401 (fixture)


@pytest.fixture
async def timeline_client(projected: Fleet) -> AsyncIterator[TestClient[Any, Any]]:  # noqa: F811
    s = projected.settings
    config = DashboardConfig(redis_url=s.redis_url, keys=KeySpace(s.tenant, projected.prefix),
                             block_ms=200,
                             timeline=TimelineSource(s.kafka_bootstrap, projected.topic))
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        yield c


async def test_the_timeline_lists_every_record_of_the_session_with_its_verdict(
    projected: Fleet, timeline_client: TestClient[Any, Any],  # noqa: F811
) -> None:
    sid, log = next(iter(projected.logs.items()))
    zombie = make_event(session_id=sid, seq=3, event_id="zombie", time=1, type="todo/add",
                        data={"id": "z", "text": "zombie"}, writer=Writer("old", 0))
    others = [e for s, lg in projected.logs.items() if s != sid for e in lg]
    await projected.write([*log, *others, zombie])
    resp = await timeline_client.get(f"/api/sessions/{sid}/timeline")
    assert resp.status == 200
    body = await resp.json()
    admitted = [r for r in body["rows"] if r["verdict"] == "admitted"]
    assert [r["seq"] for r in admitted] == [e.seq for e in log]
    assert [r["type"] for r in admitted] == [e.type for e in log]
    assert all(r["writer"] == e.writer.id and r["epoch"] == e.writer.epoch
               and r["turn_id"] == e.turn_id and r["step_id"] == e.step_id
               for r, e in zip(admitted, log, strict=True))
    (rejected,) = [r for r in body["rows"] if r["verdict"] != "admitted"]
    assert rejected["seq"] == 3 and rejected["type"] == "todo/add"
    views = await (await timeline_client.get(f"/api/sessions/{sid}")).json()
    (seen,) = views["views"]["rejections"]["recent"]  # what the worker's admission decided
    assert rejected["verdict"] == seen["verdict"] and rejected["reason"] == seen["reason"]
    assert rejected["writer"] == "old" and rejected["epoch"] == 0
    assert "data" not in rejected and all("data" not in r for r in body["rows"])
    # only this session's range: it ends at the session's last record, not the topic's
    assert body["range"]["end"] <= rejected["offset"] + 1
    offsets = [r["offset"] for r in body["rows"]]
    assert offsets == sorted(offsets)
    last = await timeline_client.get(f"/api/sessions/{sid}/timeline?limit=2")
    assert [r["seq"] for r in (await last.json())["rows"]][-1:] == [3]
    bad = await timeline_client.get(f"/api/sessions/{sid}/timeline?limit=0")
    assert bad.status == 400 and "limit" in (await bad.json())["error"]
    unknown = await timeline_client.get("/api/sessions/nobody/timeline")
    assert unknown.status == 404
