"""Access scopes on the real Redis: one ACL user per tenant and role, on its key prefix."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis

from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.governance.access import (
    apply_redis_user,
    kafka_acls,
    redis_username,
    to_admin_bindings,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def users(redis_client: redis.Redis) -> Iterator[list[str]]:
    created: list[str] = []
    yield created
    for name in created:
        redis_client.execute_command("ACL", "DELUSER", name)


def _as(settings: Settings, user: str, password: str) -> redis.Redis:
    return redis.Redis.from_url(settings.redis_url, username=user, password=password,
                                decode_responses=True)


def test_tenant_b_cannot_read_or_write_tenant_a_keys(
        settings: Settings, redis_client: redis.Redis, redis_prefix: str,
        users: list[str]) -> None:
    a, b = f"ta{secrets.token_hex(3)}", f"tb{secrets.token_hex(3)}"
    ka, kb = KeySpace(a, redis_prefix), KeySpace(b, redis_prefix)
    redis_client.hset(ka.session_row("s1", 1), "view:index", "{}")
    redis_client.hset(kb.session_row("s1", 1), "view:index", "{}")
    pw = {r: secrets.token_urlsafe(16) for r in ("a-writer", "b-writer", "b-reader")}
    users += [apply_redis_user(redis_client, a, "writer", pw["a-writer"], prefix=redis_prefix),
              apply_redis_user(redis_client, b, "writer", pw["b-writer"], prefix=redis_prefix),
              apply_redis_user(redis_client, b, "reader", pw["b-reader"], prefix=redis_prefix)]
    writer_b = _as(settings, redis_username(b, "writer"), pw["b-writer"])
    reader_b = _as(settings, redis_username(b, "reader"), pw["b-reader"])
    writer_a = _as(settings, redis_username(a, "writer"), pw["a-writer"])
    try:
        assert writer_a.hgetall(ka.session_row("s1", 1)) == {"view:index": "{}"}
        assert writer_b.hgetall(kb.session_row("s1", 1)) == {"view:index": "{}"}
        for client in (writer_b, reader_b):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.hgetall(ka.session_row("s1", 1))
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.get(ka.tenant_key("generation"))
        with pytest.raises(redis.exceptions.NoPermissionError):
            writer_b.hset(ka.session_row("s1", 1), "view:index", "stolen")
        # the reader reads its own tenant but writes nothing
        assert reader_b.hgetall(kb.session_row("s1", 1)) == {"view:index": "{}"}
        with pytest.raises(redis.exceptions.NoPermissionError):
            reader_b.hset(kb.session_row("s1", 1), "view:index", "x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            writer_b.flushall()
    finally:
        for client in (writer_a, writer_b, reader_b):
            client.close()


def test_kafka_acls_are_prefixed_on_the_tenants_topics_and_groups() -> None:
    acls = kafka_acls("acme", "writer")
    assert {(a.resource_type, a.pattern_type, a.name, a.operation) for a in acls} >= {
        ("TOPIC", "PREFIXED", "sessionstream.acme.", "WRITE"),
        ("TOPIC", "PREFIXED", "sessionstream.acme.", "READ"),
        ("GROUP", "PREFIXED", "sessionstream-acme", "READ")}
    assert all(a.principal == "User:acme-writer" for a in acls)
    assert kafka_acls("acme", "reader") == []
    assert {a.operation for a in kafka_acls("acme", "auditor")} == {"READ", "DESCRIBE"}
    assert len(to_admin_bindings(acls)) == len(acls)


async def test_the_dashboard_refuses_a_missing_or_wrong_tenant_token(
        settings: Settings, redis_prefix: str) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from dashboard.app import DashboardConfig, create_app

    token = f"{settings.tenant}.{secrets.token_urlsafe(24)}"
    config = DashboardConfig(redis_url=settings.redis_url,
                             keys=KeySpace(settings.tenant, redis_prefix), token=token)
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        assert (await c.get("/api/sessions")).status == 401
        assert (await c.get("/")).status == 401
        other = await c.get("/api/sessions", headers={"Authorization": "Bearer other.x" * 3})
        assert other.status == 403 and "tenant" in (await other.json())["error"]
        wrong = await c.get("/api/sessions",
                            headers={"Authorization": f"Bearer {settings.tenant}.nope"})
        assert wrong.status == 401
        ok = await c.get("/api/sessions", headers={"Authorization": f"Bearer {token}"})
        assert ok.status == 200
        page = await c.get(f"/?token={token}")  # once in the URL, then the cookie
        assert page.status == 200
        assert (await c.get("/api/sessions")).status == 200
        assert (await c.get("/healthz")).status == 200  # probes need no token
