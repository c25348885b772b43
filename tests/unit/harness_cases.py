"""Sessions the provider tests build bodies from: every shape the surface can take.

parallel calls with an error result and non-string content, a list-content answer and
steering mid-round (``manual``); a compacted surface with context snapshots and
abandoned calls (``compacted``); pruned and spilled tool results (``pruned``); an output
cut at max_tokens mid-tool-call (``truncated``); a refused turn (``refused``); a
shredded-content placeholder (``shredded``). All are written through the real rules.
"""

from __future__ import annotations

import random
from typing import Any

from sessionstream.core.compaction import prune_message
from sessionstream.core.events import CountingClock, SequentialIds
from sessionstream.core.harness import Harness, ToolOutcome
from sessionstream.core.messages import Kind
from sessionstream.core.providers.scripted import Reply, ScriptedClient
from sessionstream.core.request import (
    PromptRegistry,
    Request,
    StaticTools,
    ToolSchema,
    assemble,
    blocks_of,
    context_snapshot_ids,
    reasoning_of,
    replaced_seqs,
    resolve_header,
)
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session

HEADER = resolve_header(("call", {"provider": "acme", "model": "model-x"}),
                        ("agent", {"max_tokens": 512, "reasoning_effort": "low"}))
TOOLS = StaticTools("local", [
    ToolSchema("run_sql", "Run a read-only SQL query",
               {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
    ToolSchema("read_file", "", {"type": "object", "properties": {"path": {"type": "string"}}}),
])


def registry() -> PromptRegistry:
    reg = PromptRegistry()
    reg.section("role", "You are {agent}, a data analyst.", order=0)
    reg.section("rules", "Answer with numbers. Braces {{like this}} are literal.", order=1)
    return reg


def new_session(sid: str) -> Session:
    return Session.create(sid, clock=CountingClock(1_000), ids=SequentialIds(sid))


#: A header with room for Anthropic's smallest thinking budget (max_tokens above 1024).
THINKING_HEADER = resolve_header(("call", {"provider": "acme", "model": "model-x",
                                           "max_tokens": 4096}))


def request_of(session: Session, messages: Any = None, header: Any = HEADER) -> Request:
    events = session.events
    return assemble(messages if messages is not None else session.derive_messages(),
                    registry(), header=header, providers=[TOOLS],
                    variables={"agent": "Ada"}, snapshot_ids=context_snapshot_ids(events),
                    replaced=replaced_seqs(events), reasoning=reasoning_of(events),
                    blocks=blocks_of(events))


def manual() -> Session:
    s = new_session("manual")
    a = s.append
    a("context/snapshot", {"snapshot_id": "ctx-1", "content": "workspace: sales.db"})
    a("turn/start")
    a("user/message", {"content": "Compare outpatient volume year over year"})
    a("step/start")
    a("request/header", HEADER.to_json())
    calls = [{"call_id": "c1", "name": "run_sql", "arguments": {"q": "select 2025"}},
             {"call_id": "c2", "name": "read_file", "arguments": {"path": "/etc/x", "n": 3}}]
    a("assistant/message", {"content": "", "tool_calls": calls})
    for c in calls:
        a("tool/call", c)
    a("tool/result", {"call_id": "c1", "status": "ok", "content": "2025: 1200 visits"})
    a("user/message", {"content": "Also last week", "steering": True})  # mid-round
    a("tool/result", {"call_id": "c2", "status": "error",
                      "content": {"error": "permission denied", "code": 13}})
    a("step/end")
    a("step/start")
    a("request/header", HEADER.to_json())
    a("assistant/message", {"content": [{"type": "text", "text": "Up 4%. "},
                                        {"type": "text", "text": "Last week flat."}]})
    a("step/end")
    a("turn/end", {"reason": "completed"})
    a("user/message", {"content": [{"type": "text", "text": "Thanks; and a chart?"},
                                   {"type": "image_ref", "id": "img-1"}]})
    return s


def shredded() -> Session:
    s = new_session("shredded")
    a = s.append
    a("turn/start")
    a("user/message", {"content": "[content deleted: user message shredded]"})
    a("step/start")
    a("request/header", HEADER.to_json())
    a("assistant/message", {"content": "", "tool_calls": [
        {"call_id": "k1", "name": "run_sql", "arguments": {}}]})
    a("tool/call", {"call_id": "k1", "name": "run_sql", "arguments": {}})
    a("tool/result", {"call_id": "k1", "status": "ok",
                      "content": "[content deleted: tool result shredded]"})
    a("assistant/message", {"content": "and the big one", "tool_calls": [
        {"call_id": "k2", "name": "read_file", "arguments": {"path": "big.csv"}}]})
    a("tool/call", {"call_id": "k2", "name": "read_file", "arguments": {"path": "big.csv"}})
    a("tool/result", {"call_id": "k2", "status": "ok", "attachment": {
        "sha256": "ab" * 32, "size": 400_000, "media_type": "text/plain",
        "head": "id,visits\n1,", "tail": "99,12\n"}})
    a("step/end")
    a("turn/end", {"reason": "completed"})
    return s


def compacted() -> Session:
    events = simulate_session(random.Random(11), "compacted", turns=8, compact_every=3,
                              failures=0.3)
    return Session.from_events(events)


def harnessed(sid: str, replies: list[Reply], api: str = "openai-chat",
              prompts: tuple[str, ...] = ("Count the visits",)) -> Session:
    """A session written by the harness loop against a scripted model."""
    s = new_session(sid)
    h = Harness(s, ScriptedClient(api, replies), api, HEADER, registry(),
                tools={"run_sql": lambda args, ctx: ToolOutcome("3 rows", operation_id="op-7"),
                       "read_file": lambda args, ctx: {"lines": ["a", "b"]}},
                providers=[TOOLS], variables={"agent": "Ada"})
    for p in prompts:
        h.turn(p)
    return s


def truncated() -> Session:
    return harnessed("truncated", [
        Reply("I will query", [("t1", "run_sql", {"q": "select count(*) from visits"})],
              stop="max_tokens"),
        Reply("It has 3 rows."),
    ], prompts=("Count the visits", "Try again, shorter"))


def refused() -> Session:
    return harnessed("refused", [
        Reply(refusal="I can't help with that.", stop="refusal"),
        Reply("", [("r1", "run_sql", {"q": "select 1"}), ("r2", "read_file", {"path": "a"})]),
        Reply("Done: 3 rows."),
    ], prompts=("Do the forbidden thing", "Then count rows"))


def requests() -> dict[str, Request]:
    """Every fixture as the request the next model step would send."""
    out = {name: request_of(make()) for name, make in (
        ("manual", manual), ("shredded", shredded), ("compacted", compacted),
        ("truncated", truncated), ("refused", refused))}
    m = manual()
    pruned = []
    for msg in m.derive_messages():
        if msg.kind is Kind.TOOL_RESULT:
            msg = prune_message(msg, 20)[0]
        pruned.append(msg)
    out["pruned"] = request_of(m, pruned)
    return out
