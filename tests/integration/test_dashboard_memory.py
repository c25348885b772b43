"""The dashboard's memory view: a user's memories opened with the tenant's keys, each
source linked to its session's timeline; one owner must be named."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sessionstream.core.memory import Actor, Role
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.rows import RowCipher
from sessionstream.integrations.memory import FleetBackend, MemoryClient

pytestmark = pytest.mark.integration


async def test_the_memory_view(settings: Settings, unique_topic: Callable[..., str],
                               redis_prefix: str, tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    s = dataclasses.replace(settings, memory_topic_override=unique_topic(2),
                            key_prefix=redis_prefix)
    backend = FleetBackend(s, keys, encryption=True)
    mem = MemoryClient(backend, Actor(Role.AGENT, "bot", user="ada"))
    v = mem.propose("Prefers the aisle", kind="preference", sources=[("sess-9", [3, 4])])
    config = DashboardConfig(redis_url=settings.redis_url,
                             keys=KeySpace(settings.tenant, redis_prefix), block_ms=200,
                             rows=RowCipher(ContentCipher(keys, settings.tenant)))
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        got = await (await c.get("/api/memory", params={"user": "ada"})).json()
        (m,) = got["memories"]
        assert (m["ref"], m["content"], m["status"]) == (str(v.ref), "Prefers the aisle",
                                                         "accepted")
        assert m["sources"] == [{"session_id": "sess-9", "seqs": [3, 4],
                                 "link": "/#s=sess-9"}]
        assert (await (await c.get("/api/memory", params={"user": "bob"})).json()
                )["memories"] == []
        bad = await c.get("/api/memory")
        assert bad.status == 400 and "user=ID" in (await bad.json())["error"]
        page = await c.get("/static/memory.html")
        assert page.status == 200 and "memory.js" in await page.text()
    backend.close()
