"""The numbers behind the dashboard's plots, against the real Kafka and Redis.

Sessions go through a real topic and the worker's processor into a unique key prefix
(the ``projected`` fleet of test_dashboard.py); the app runs with a Kafka source for the
session series. The session plots' numbers are checked against the log (the context
size recomputed from every prefix of each session's log, read back from Kafka) and
against the projections in Redis (the last size is the surface's estimate, the drops are
the compaction history's attempts, the turns and tokens those of the turns and usage
views); the tenant plots' against what was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sessionstream.core.events import Event, Writer, make_event
from sessionstream.core.rows import KeySpace
from sessionstream.core.session import Session
from sessionstream.core.settings import Settings
from sessionstream.core.surface import token_estimate
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.dashboard.series import SeriesConfig
from sessionstream.dashboard.timeline import TimelineSource
from sessionstream.producers.readback import read_session
from tests.integration.test_dashboard import Fleet, projected  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(settings: Settings, projected: Fleet,  # noqa: F811
                 ) -> AsyncIterator[TestClient[Any, Any]]:
    source = TimelineSource(settings.kafka_bootstrap, projected.topic)
    config = DashboardConfig(redis_url=settings.redis_url,
                             keys=KeySpace(settings.tenant, projected.prefix), block_ms=200,
                             timeline=source,
                             series=SeriesConfig(source, budget=1_500),
                             streams_group="g", lag_interval_s=0.2)
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        yield c


def _from_the_log(settings: Settings, topic: str, sid: str) -> list[Event]:
    from sessionstream.core import codec

    return read_session(settings.kafka_bootstrap, topic, sid, decode=codec.decode).admitted


async def test_the_context_series_is_the_surface_size_of_every_prefix_of_the_log(
    projected: Fleet, client: TestClient[Any, Any], settings: Settings,  # noqa: F811
) -> None:
    await projected.write([e for log in projected.logs.values() for e in log])
    checked = 0
    for sid in projected.logs:
        body = await (await client.get(f"/api/sessions/{sid}/series?points=100000")).json()
        views = (await (await client.get(f"/api/sessions/{sid}")).json())["views"]
        log = _from_the_log(settings, projected.topic, sid)
        sizes = {e.seq: token_estimate(Session.from_events(log[:k + 1]).derive_messages())
                 for k, e in enumerate(log)}
        points = body["context"]["points"]
        assert body["context"]["downsampled"] is False and body["budget"] == 1_500
        assert points and all(sizes[seq] == tokens for seq, tokens in points)
        grew = [s for s, prev in zip(list(sizes)[1:], list(sizes), strict=False)
                if sizes[s] != sizes[prev]]
        assert set(grew) <= {s for s, _ in points}  # every change of the size is a point
        # ... and the projections in Redis agree with it
        assert body["context"]["tokens"] == views["surface"]["token_estimate"]
        assert body["as_of_seq"] == log[-1].seq
        attempts = {a["compaction_id"]: a for a in views["compaction"]["attempts"]}
        assert {c["compaction_id"] for c in body["compactions"]} == set(attempts)
        for c in body["compactions"]:
            a = attempts[c["compaction_id"]]
            assert (c["outcome"], c["recorded_before"], c["recorded_after"]) == (
                a["outcome"], a["tokens_before"], a["tokens_after"])
            if c["drop_seq"] is not None:
                assert (c["before"], c["after"]) == (sizes[c["drop_seq"] - 1],
                                                     sizes[c["drop_seq"]])
                checked += 1
        turns = body["turns"]
        assert turns["total"] == views["turns"]["total"]
        usage = views["usage"]["total"]
        totals = turns["totals"]
        assert totals["input"] + totals["cached"] == usage["input_tokens"]
        assert totals["output"] == usage["output_tokens"]
        assert totals["requests"] == usage["requests"]
    assert checked, "no compaction drop in the fleet"


async def test_a_live_session_is_read_on_from_where_the_last_request_stopped(
    projected: Fleet, client: TestClient[Any, Any],  # noqa: F811
) -> None:
    sid, log = next(iter(projected.logs.items()))
    head, tail = log[:-6], log[-6:]
    await projected.write(head)
    first = await (await client.get(f"/api/sessions/{sid}/series")).json()
    assert first["as_of_seq"] == head[-1].seq
    scanned = first["read"]["records_scanned"]
    await projected.write(tail)
    second = await (await client.get(f"/api/sessions/{sid}/series")).json()
    assert second["as_of_seq"] == tail[-1].seq
    assert second["read"]["records_scanned"] - scanned <= len(tail)  # only what is new
    assert second["waterfall"]["turn"] == second["turns"]["total"] - 1  # the last turn
    picked = await (await client.get(f"/api/sessions/{sid}/series?turn=0")).json()
    assert picked["waterfall"]["turn"] == 0
    kinds = {s["kind"] for s in picked["waterfall"]["spans"]}
    assert {"step", "model", "tool"} <= kinds
    bad = await client.get(f"/api/sessions/{sid}/series?points=0")
    assert bad.status == 400 and "points" in (await bad.json())["error"]
    missing = await client.get("/api/sessions/nobody/series")
    assert missing.status == 404


async def test_the_tenant_series_count_sessions_events_rejections_and_quarantines(
    projected: Fleet, client: TestClient[Any, Any],  # noqa: F811
) -> None:
    logs = projected.logs
    await projected.write([e for log in logs.values() for e in log])
    sid = next(iter(logs))
    other = next(s for s in logs if s != sid)
    zombie = make_event(session_id=sid, seq=3, event_id="zombie", time=1, type="todo/add",
                        data={"id": "z", "text": "zombie"}, writer=Writer("old", 0))
    last = logs[other][-1]
    unknown = make_event(session_id=other, seq=last.seq + 1, event_id="q1", time=1,
                         type="widget/frobnicate", data={}, writer=last.writer,
                         prev_event_id=last.event_id)
    await projected.write([zombie, unknown])
    body = await (await client.get("/api/tenant/series?window=600&buckets=30")).json()
    totals = body["totals"]
    assert totals["sessions_active"] == len(logs)
    assert totals["events"] == sum(len(lg) for lg in logs.values())  # every admitted event
    assert totals["rejections"] == 1 and totals["quarantines"] == 1
    assert [q["session_id"] for q in body["quarantined"]] == [other]
    assert len(body["buckets"]) == 30 and body["bucket_ms"] == 20_000
    detail = await (await client.get(f"/api/sessions/{sid}")).json()
    verdict = detail["views"]["rejections"]["recent"][0]["verdict"]
    assert sum(b["rejections_by_verdict"].get(verdict, 0) for b in body["buckets"]) == 1
    assert body["feed"]["unmeasured"] == 0
    again = await (await client.get("/api/tenant/series?window=600&buckets=30")).json()
    assert again["totals"] == totals  # a refresh reads only what is new: nothing here
    bad = await client.get("/api/tenant/series?window=1")
    assert bad.status == 400


async def test_the_cli_prints_the_same_numbers_as_json(
    projected: Fleet, settings: Settings,  # noqa: F811
) -> None:
    await projected.write([e for log in projected.logs.values() for e in log])
    sid = next(iter(projected.logs))
    env = {"SESSIONSTREAM_KEY_PREFIX": projected.prefix,
           "SESSIONSTREAM_REDIS_URL": settings.redis_url,
           "SESSIONSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "SESSIONSTREAM_EVENTS_TOPIC": projected.topic,
           "SESSIONSTREAM_STATE_DIR": str(settings.state_dir)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                              capture_output=True, text=True, env={**os.environ, **env},
                              timeout=120, check=False)

    done = cli("series", sid, "--json", "--points", "100000")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    log = projected.logs[sid]
    final = token_estimate(Session.from_events(log).derive_messages())
    assert body["context"]["tokens"] == final and body["as_of_seq"] == log[-1].seq
    text = cli("series", sid)
    assert text.returncode == 0 and f"{final:,} tokens now" in text.stdout
    tenant = cli("series", "--tenant-wide", "--json")
    assert tenant.returncode == 0, tenant.stderr
    assert json.loads(tenant.stdout)["totals"]["sessions_active"] == len(projected.logs)
    unknown = cli("series", "nobody")
    assert unknown.returncode == 2 and "nobody" in unknown.stderr
    neither = cli("series")
    assert neither.returncode == 2
