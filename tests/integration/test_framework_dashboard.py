"""The dashboard shows sessions written through the framework adapters (real Kafka +
Redis): the worker's fold admits them (plugin types kept, nothing quarantined) and the
session list and detail show their messages."""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.adk.events import Event as AdkEvent
from google.genai import types
from langgraph.graph import END, START, StateGraph
from redis.asyncio import Redis

from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.dashboard.app import DashboardConfig, create_app
from sessionstream.integrations import google_adk, langgraph, openai_agents
from sessionstream.integrations.store import FleetStore
from sessionstream.producers.writer import WriterConfig
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.streams_helpers import read_topic
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


async def _write_one_session_per_framework(cfg: WriterConfig) -> tuple[FleetStore, list[str]]:
    store = FleetStore(cfg, [*openai_agents.EVENT_TYPES, *google_adk.EVENT_TYPES,
                             *langgraph.EVENT_TYPES])
    sdk = openai_agents.SessionstreamSession("oa-dash", store)
    await sdk.add_items([{"role": "user", "content": "sdk question"},
                         {"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": "sdk answer"}]}])
    adk = google_adk.SessionstreamSessionService(store)
    s = await adk.create_session(app_name="dash", user_id="ada", session_id="adk-1")
    await adk.append_event(s, AdkEvent(author="user", content=types.Content(
        role="user", parts=[types.Part(text="adk question")])))
    await adk.append_event(s, AdkEvent(author="agent", content=types.Content(
        role="model", parts=[types.Part(text="adk answer")])))
    graph = StateGraph(_State)
    graph.add_node("step", lambda state: {"log": ["step"]})
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    saver = langgraph.SessionStreamSaver(store)
    graph.compile(checkpointer=saver).invoke(
        {"log": ["lg input"]}, {"configurable": {"thread_id": "lg-dash"}})
    store.close()
    sids = ["oa-dash", google_adk.stream_id("dash", "ada", "adk-1"),
            saver.session_prefix + "lg-dash"]
    return store, sids


@pytest.fixture
async def dash(settings: Settings, writer_cfg: WriterConfig
               ) -> AsyncIterator[tuple[TestClient[Any, Any], list[str]]]:
    store, sids = await _write_one_session_per_framework(writer_cfg)
    total = sum(len(h.events()) for h in store._handles.values())
    records = read_topic(writer_cfg.bootstrap, writer_cfg.topic, total)
    keys = KeySpace(writer_cfg.tenant, writer_cfg.key_prefix)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    proc = Processor(pipeline=ReaderPipeline.default(), sink=RedisSink(aredis, keys), group="g")
    await proc.process(records)
    config = DashboardConfig(redis_url=settings.redis_url, keys=keys, block_ms=200)
    async with TestClient(TestServer(create_app(config), host="127.0.0.1")) as c:
        yield c, sids
    await aredis.aclose()


async def test_framework_sessions_are_listed_and_show_their_messages(
        dash: tuple[TestClient[Any, Any], list[str]]) -> None:
    client, (sdk, adk, lg) = dash
    rows = {r["session_id"]: r for r in
            (await (await client.get("/api/sessions")).json())["sessions"]}
    details = {}
    for sid in (sdk, adk, lg):
        assert sid in rows, (sid, sorted(rows))
        assert rows[sid]["quarantine"] is None and rows[sid]["rejections"] == 0
        details[sid] = await (await client.get(f"/api/sessions/{sid}")).json()
        assert details[sid]["quarantine"] is None
    for sid, who in ((sdk, "sdk"), (adk, "adk")):
        shown = [(m["role"], m["content"]) for m in details[sid]["views"]["surface"]["messages"]]
        assert shown == [("user", f"{who} question"), ("assistant", f"{who} answer")]
    assert details[sdk]["views"]["turns"]["counts"] == {"completed": 1}
    # a LangGraph thread is checkpoints (plugin events, kept and skipped by the fold): it
    # is listed and healthy, with no messages of its own (docs/frameworks/langgraph.md)
    assert rows[lg]["counts"]["ignored"] >= 3
    assert details[lg]["views"]["surface"]["messages"] == []
