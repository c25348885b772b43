"""The dashboard's tenant-scoped tokens, on the real Redis: a missing or unknown token is
refused (401), another tenant's token too (403), the right one is served; the page turns
``?token=`` into an HttpOnly cookie its own requests carry."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.dashboard.auth import COOKIE, TokenAuth

MINE = "tenant-a-token-0123456789abcdef"
THEIRS = "tenant-b-token-0123456789abcdef"


@pytest.fixture
async def client(settings: Settings, redis_prefix: str) -> AsyncIterator[TestClient[Any, Any]]:
    config = DashboardConfig(redis_url=settings.redis_url, keys=KeySpace("a", redis_prefix),
                             auth=TokenAuth("a", {MINE: "a", THEIRS: "b"}))
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        yield c


@pytest.mark.parametrize("path", ["/api/sessions", "/api/sessions/s1", "/api/events", "/"])
async def test_a_request_without_a_token_is_refused_with_401_and_what_to_do(
        client: TestClient[Any, Any], path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    body = await resp.json()
    assert "needs a token" in body["error"] and body["tenant"] == "a"


async def test_an_unknown_token_is_refused_with_401(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/api/sessions", headers={"Authorization": "Bearer nope-nope"})
    assert resp.status == 401
    assert "not valid" in (await resp.json())["error"]


async def test_another_tenants_token_is_refused_with_403_naming_both_tenants(
        client: TestClient[Any, Any]) -> None:
    resp = await client.get("/api/sessions", headers={"Authorization": f"Bearer {THEIRS}"})
    assert resp.status == 403
    error = (await resp.json())["error"]
    assert "'b'" in error and "'a'" in error
    assert (await client.get(f"/?token={THEIRS}", allow_redirects=False)).status == 403


async def test_the_tenants_token_is_served(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/api/sessions", headers={"Authorization": f"Bearer {MINE}"})
    assert resp.status == 200
    assert (await resp.json())["tenant"] == "a"


async def test_the_login_url_sets_an_httponly_cookie_and_drops_the_token_from_the_url(
        client: TestClient[Any, Any]) -> None:
    login = await client.get(f"/?token={MINE}", allow_redirects=False)
    assert login.status == 302 and login.headers["Location"] == "/"
    cookie = login.cookies[COOKIE]
    assert cookie.value == MINE and cookie["httponly"] and cookie["samesite"] == "Strict"
    page = await client.get("/")  # the client's cookie jar now carries it
    assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    assert (await client.get("/api/sessions")).status == 200


@pytest.mark.parametrize("path", ["/api/sessions", "/api/sessions/s1", "/api/events"])
async def test_the_api_refuses_a_token_in_the_url_even_the_right_one(
        client: TestClient[Any, Any], path: str) -> None:
    resp = await client.get(f"{path}?token={MINE}")
    assert resp.status == 401
    assert "not accepted in the URL" in (await resp.json())["error"]
    assert (await client.get(path, headers={"Authorization": f"Bearer {MINE}"})).status != 401


async def test_health_and_static_files_need_no_token(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/static/app.js")).status == 200


async def test_the_dashboard_serves_as_its_tenants_read_only_redis_user(
        settings: Settings, redis_prefix: str, tmp_path: Path) -> None:
    import redis as redis_lib

    from sessionstream.core.access import principal
    from sessionstream.governance.access import TenantSecrets, apply_redis, redis_url_for

    tenant = f"dash{uuid.uuid4().hex[:8]}"
    keys = KeySpace(tenant, redis_prefix)
    secrets = TenantSecrets.load_or_create(tmp_path, tenant)
    admin = redis_lib.Redis.from_url(settings.redis_url)
    apply_redis(admin, keys, secrets.passwords)
    try:
        url = redis_url_for(settings.redis_url, principal(tenant, "reader"),
                            secrets.passwords["reader"])
        config = DashboardConfig(redis_url=url, keys=keys, block_ms=200,
                                 auth=TokenAuth(tenant, {MINE: tenant}))
        auth = {"Authorization": f"Bearer {MINE}"}
        async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
            assert (await c.get("/healthz")).status == 200
            listing = await c.get("/api/sessions", headers=auth)
            assert listing.status == 200 and (await listing.json())["sessions"] == []
            assert (await c.get("/api/sessions/none", headers=auth)).status == 404
    finally:
        admin.execute_command("ACL", "DELUSER",
                              *(principal(tenant, r) for r in ("writer", "worker", "reader")))
        admin.close()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_the_dashboard_metrics_count_requests_by_route_and_auth_failures_by_reason(
        client: TestClient[Any, Any]) -> None:
    mine = {"Authorization": f"Bearer {MINE}"}
    await client.get("/api/sessions")  # no token
    await client.get("/api/sessions", headers={"Authorization": "Bearer nope-nope"})
    await client.get("/api/sessions", headers={"Authorization": f"Bearer {THEIRS}"})
    assert (await client.get("/api/sessions", headers=mine)).status == 200
    secret = "sess-secret-0042"
    assert (await client.get(f"/api/sessions/{secret}", headers=mine)).status == 404
    assert (await client.get("/no/such/page", headers=mine)).status == 404
    resp = await client.get("/metrics")  # open, like /healthz: counts and timings only
    assert resp.status == 200 and resp.content_type == "text/plain"
    text = await resp.text()
    got = _samples(text)

    def requests(route: str, status: int) -> float:
        return got.get(("sessionstream_dashboard_requests_total",
                        (("method", "GET"), ("route", route), ("status", str(status)),
                         ("tenant", "a"))), 0)

    def refused(reason: str) -> float:
        return got[("sessionstream_dashboard_auth_failures_total",
                    (("reason", reason), ("tenant", "a")))]

    assert refused("missing_token") == refused("unknown_token") == refused("other_tenant") == 1
    assert requests("/api/sessions", 401) == 2 and requests("/api/sessions", 403) == 1
    assert requests("/api/sessions", 200) == 1
    assert requests("/api/sessions/{session_id}", 404) == 1  # the pattern, not the id
    assert requests("unmatched", 404) == 1
    assert got[("sessionstream_dashboard_request_duration_seconds_count",
                (("route", "/api/sessions"), ("tenant", "a")))] == 4
    assert secret not in text and "/no/such/page" not in text
    assert MINE not in text and THEIRS not in text


async def test_the_dashboard_metrics_gauge_open_event_streams(
        client: TestClient[Any, Any]) -> None:
    gauge = ("sessionstream_dashboard_event_streams", (("tenant", "a"),))

    async def open_streams() -> float:
        return _samples(await (await client.get("/metrics")).text())[gauge]

    assert await open_streams() == 0
    stream = await client.get("/api/events", headers={"Authorization": f"Bearer {MINE}"})
    assert stream.status == 200
    assert (await stream.content.readline()).startswith(b"retry:")
    assert await open_streams() == 1
    stream.close()
    for _ in range(100):  # the server notices the closed stream at its next write
        if await open_streams() == 0:
            break
        await asyncio.sleep(0.1)
    assert await open_streams() == 0
