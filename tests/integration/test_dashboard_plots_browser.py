"""The dashboard's plots in a real browser (Debian's chromium through chromedriver).

A demo fleet (sessions of agents that compact under pressure, fail tool calls, get a
zombie writer refused and one quarantined) and a 5,000-event session of 500 turns go
through a real topic and the worker's processor into Redis; ``sessionstream dashboard``
serves them with a price table and a context budget. The test opens the tenant's plots
and each session's three plots, checks what they draw against the series the API
returns, watches them update live, and saves screenshots (``.artifacts/`` or
``$SESSIONSTREAM_TEST_ARTIFACTS``; the ones in docs/images/ come from here). It prints
the browser's render time of the 5,000-event session's plots (a figure, not a check).
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

from sessionstream.core.events import Event, SequentialIds, Writer, make_event
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.rows import KeySpace
from sessionstream.core.session import Session
from sessionstream.core.settings import Settings
from sessionstream.core.surface import token_estimate
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.procs import ProcessGroup
from tests.integration.streams_helpers import produce
from tests.integration.test_dashboard import Fleet
from tests.integration.test_dashboard_browser import (
    _free_port,
    make_driver,
    shot,
    wait,
)

pytestmark = pytest.mark.integration

BUDGET = 12_000
PRICES = {"openai/gpt-4.1": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
          "anthropic/claude-sonnet-4": {"input": 3.0, "cached_input": 0.3, "output": 15.0}}
TOKEN = "plots-browser-token-0123456789"
WORDS = ("revenue", "cohort", "query", "clinic", "volume", "region", "quarter", "trend",
         "patients", "visits", "table", "join", "filter", "median", "growth", "forecast")


class Clock:
    """Event times of an agent at work: a model call takes seconds, a tool call less."""

    def __init__(self, rng: random.Random, start: int = 1_767_225_600_000) -> None:
        self.rng, self.now, self.next_step = rng, start, 5

    def __call__(self) -> int:
        self.now += self.next_step
        self.next_step = self.rng.randint(2, 40)
        return self.now

    def wait(self, lo: int, hi: int) -> None:
        self.next_step = self.rng.randint(lo, hi)


def agent_session(sid: str, turns: int, seed: int, *, budget: int = BUDGET) -> list[Event]:
    """A session of ``turns`` tool-using turns that compacts when its context passes 80 %
    of ``budget`` (start, summary, replace, end: a drop on the context plot)."""
    rng = random.Random(seed)
    clock = Clock(rng)
    s = Session.create(sid, clock=clock, ids=SequentialIds(sid))
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    route = ("openai", "gpt-4.1") if seed % 2 else ("anthropic", "claude-sonnet-4")
    n_compactions = 0
    for turn in range(turns):
        s.append("turn/start")
        s.append("step/start")
        s.append("user/message", {"content": f"turn {turn}: {text(rng.randint(8, 40))}"})
        used_tools = False
        for step in range(rng.choice((1, 1, 1, 2))):
            if step:
                s.append("step/start")
            s.append("request/header", {"provider": route[0], "model": route[1]})
            clock.wait(600, 4000)  # the model thinks
            calls = [{"call_id": f"{sid}-{turn}-{step}-{i}", "name": rng.choice(
                ("run_sql", "read_file", "search", "plot")), "arguments": {"q": text(3)}}
                for i in range(rng.choice((0, 0, 0, 1, 1, 2)))]
            used_tools = used_tools or bool(calls)
            size = len(s.derive_messages()) * 40 + 500
            usage = {"input_tokens": size, "output_tokens": rng.randint(40, 600),
                     "reasoning_tokens": rng.randint(0, 40)}
            if route[0] == "openai":
                usage["cached_input_tokens"] = int(size * rng.uniform(0.3, 0.9))
            else:
                usage["cache_read_input_tokens"] = int(size * rng.uniform(0.5, 2.0))
            s.append("assistant/message", {"content": text(rng.randint(5, 30)),
                                           "tool_calls": calls, "usage": usage})
            for c in calls:
                s.append("tool/call", c)
                clock.wait(50, 2500)
                failed = rng.random() < 0.08
                s.append("tool/result", {"call_id": c["call_id"],
                                         "status": "error" if failed else "ok",
                                         "content": text(rng.randint(10, 120))})
            s.append("step/end")
            if not calls:
                break  # answered without a tool: the turn is done
        interrupted = rng.random() < 0.03
        if not interrupted and used_tools:  # the answer, in a step of its own
            s.append("step/start")
            s.append("request/header", {"provider": route[0], "model": route[1]})
            clock.wait(400, 2500)
            s.append("assistant/message", {"content": text(rng.randint(10, 60)),
                                           "usage": {"input_tokens": 300, "output_tokens": 80}})
            s.append("step/end")
        s.append("turn/end", {"reason": "interrupted" if interrupted else "completed"})
        if token_estimate(s.derive_messages()) > budget * 0.8:
            n_compactions += 1
            _compact(s, f"{sid}-c{n_compactions}")
    return list(s.events)


def _compact(s: Session, cid: str) -> None:
    """Shadow everything but the last few messages with one summary."""
    surface = s.surface
    s.append("compaction/start", {"compaction_id": cid, "trigger": "pressure"})
    last = len(surface) - 4
    while last > 1 and surface.check_range(surface.seqs_at(0, last)) is not None:
        last -= 1
    seqs = surface.seqs_at(0, last)
    before = token_estimate(s.derive_messages()[: last + 1])
    summary = f"summary of {len(seqs)} messages: the user analyses clinic volume by region"
    s.append("compaction/summary", {
        "compaction_id": cid, "first_position": 0, "last_position": last,
        "shadowed_seqs": list(seqs), "tokens_before": before,
        "tokens_after": len(summary) // 4,
        "summarizer": {"provider": "offline", "model": "extractive", "config": {}}})
    s.append("user/message", {"content": summary}, surface_op="replace",
             source_event_seqs=seqs)
    s.append("compaction/end", {"compaction_id": cid, "outcome": "completed"})


@pytest.fixture
async def stage(settings: Settings, unique_topic: Callable[..., str],
                redis_prefix: str) -> AsyncIterator[Fleet]:
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    sink = RedisSink(aredis, KeySpace(settings.tenant, redis_prefix))
    yield Fleet(settings, unique_topic(3), redis_prefix, {},
                Processor(pipeline=ReaderPipeline.default(), sink=sink, group="g"))
    await aredis.aclose()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = make_driver()
    driver.set_window_size(1500, 1900)
    yield driver
    driver.quit()


def serve(procs: ProcessGroup, settings: Settings, stage: Fleet, tmp: Path) -> str:
    prices = tmp / "prices.json"
    prices.write_text(json.dumps(PRICES))
    port = _free_port()
    env = {"SESSIONSTREAM_KEY_PREFIX": stage.prefix, "SESSIONSTREAM_REDIS_URL": settings.redis_url,
           "SESSIONSTREAM_EVENTS_TOPIC": stage.topic,
           "SESSIONSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "SESSIONSTREAM_DASHBOARD_TOKEN": TOKEN, "SESSIONSTREAM_STREAMS_GROUP": "g",
           "SESSIONSTREAM_PRICES": str(prices), "SESSIONSTREAM_CONTEXT_BUDGET": str(BUDGET)}
    proc = procs.start_module("sessionstream.cli.main", "dashboard", "--port", str(port),
                              env=env)
    url = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        try:
            with urllib.request.urlopen(url + "healthz", timeout=1) as r:
                return bool(json.load(r)["ok"])
        except OSError:
            return False

    proc.wait_for(up, 30, "the dashboard to answer /healthz")
    return url


def api(url: str, path: str) -> Any:
    req = urllib.request.Request(url + path.lstrip("/"),
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def _attr(d: Any, selector: str, name: str) -> str | None:
    """``name`` of the first element ``selector`` finds. The live page redraws a plot on
    every change: an element found a moment ago may be replaced before its attribute is
    read, which only means "look again"."""
    for _ in range(20):
        found = d.find_elements(By.CSS_SELECTOR, selector)
        try:
            return found[0].get_attribute(name) if found else None
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} was redrawn 20 times while its {name} was read")


def open_session(browser: webdriver.Chrome, url: str, sid: str) -> None:
    browser.get(f"{url}?token={TOKEN}")
    browser.get(f"{url}#s={sid}")
    browser.refresh()
    for plot in ("plot-context", "plot-turns", "plot-waterfall"):
        wait(browser, f"the {plot} plot", lambda d, p=plot: d.find_elements(By.ID, p), 90)


async def test_the_plots_of_a_demo_fleet_live_in_the_browser(
    stage: Fleet, procs: ProcessGroup, settings: Settings, browser: webdriver.Chrome,
    tmp_path: Path,
) -> None:
    logs = {f"agent-{i:02d}": agent_session(f"agent-{i:02d}", turns, seed=i)
            for i, turns in enumerate((90, 35, 24, 18, 12, 9, 6, 4))}
    live = "agent-00"
    url = serve(procs, settings, stage, tmp_path)

    # the tenant's plots: the page opens on them, and follows the fleet as it writes
    browser.get(f"{url}?token={TOKEN}")
    for plot in ("plot-sessions", "plot-events", "plot-refusals", "plot-lag"):
        wait(browser, f"the {plot} plot", lambda d, p=plot: d.find_elements(By.ID, p), 60)
    browser.execute_script("window.__sameDocument = 'yes'")
    browser.execute_script("window.fleetPlots.setWindow(120)")
    waves = 6
    for w in range(waves):  # the agents write in waves; the worker folds each a bit later
        wave = [e for lg in logs.values()
                for e in lg[len(lg) * w // waves:len(lg) * (w + 1) // waves]]
        if w == waves - 1:
            wave = [e for e in wave if e not in logs[live][-40:]]
        produce(settings.kafka_bootstrap, stage.topic, wave)
        stage.produced += len(wave)
        await asyncio.sleep(2.5)  # the lag sampler sees the records not yet folded
        await stage.write([])
        await asyncio.sleep(2.5)
    before = api(url, "/api/tenant/series?window=120&buckets=60")
    assert before["totals"]["sessions_active"] == len(logs)
    assert before["totals"]["events"] == sum(len(lg) for lg in logs.values()) - 40
    assert max(smp["offsets"][p] for smp in before["lag"]["samples"]
               for p in smp["offsets"]) > 0, "the sampler saw no lag between the waves"
    # a zombie writer refused, a session quarantined, and the live session's tail
    old = logs["agent-01"][10]
    zombie = make_event(session_id="agent-01", seq=old.seq, event_id="zombie", time=old.time,
                        type="todo/add", data={"id": "z", "text": "late"},
                        writer=Writer("zombie", 0))
    last = logs["agent-02"][-1]
    unknown = make_event(session_id="agent-02", seq=last.seq + 1, event_id="q-1",
                         time=last.time + 1, type="widget/frobnicate", data={},
                         writer=last.writer, prev_event_id=last.event_id)
    tail = logs[live][-40:]
    await stage.write([zombie, unknown, *tail])
    wait(browser, "a rejection and a quarantine drawn", lambda d: d.find_elements(
        By.CSS_SELECTOR, "#plot-refusals rect.rejections") and d.find_elements(
        By.CSS_SELECTOR, "#plot-refusals circle"), 60)
    after = api(url, "/api/tenant/series?window=120&buckets=60")
    assert after["totals"]["rejections"] == 1 and after["totals"]["quarantines"] == 1
    assert after["totals"]["events"] == before["totals"]["events"] + len(tail)
    assert browser.execute_script("return window.__sameDocument") == "yes", "page reloaded"
    shot(browser, "dashboard-fleet-plots")

    # a session's three plots
    open_session(browser, url, live)
    body = api(url, f"/api/sessions/{live}/series")
    assert body["as_of_seq"] == tail[-1].seq
    # read in the page, in one call: the live page may redraw a plot between two reads
    seqs, labels = browser.execute_script(
        "return [[...document.querySelectorAll('#plot-context g.drop')]"
        ".map(d => d.dataset.seq), document.getElementById('plot-context').textContent]")
    assert len(seqs) == len(body["context"]["drops"]) >= 2
    assert {int(seq) for seq in seqs} == {d["seq"] for d in body["context"]["drops"]}
    first = body["context"]["drops"][0]
    assert "→" in labels and "budget" in labels
    assert first["before"] > first["after"]
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-context .budget-line")
    bars = browser.find_elements(By.CSS_SELECTOR, "#plot-turns g.turn-bar")
    assert len(bars) == body["turns"]["total"] == 90
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-turns .cost-line")  # priced
    assert _attr(browser, "#plot-waterfall", "data-turn") == str(body["turns"]["total"] - 1)
    # pick a turn: its waterfall
    pick = next(b for b in body["turns"]["bars"] if b["tools"] >= 2)
    browser.execute_script(
        "document.querySelector(`#plot-turns g.turn-bar[data-turn='${arguments[0]}']`)"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", pick["turn"])
    wait(browser, "the picked turn's waterfall", lambda d: _attr(
        d, "#plot-waterfall", "data-turn") == str(pick["turn"]))
    spans = browser.find_elements(By.CSS_SELECTOR, "#plot-waterfall g.span")
    fall = api(url, f"/api/sessions/{live}/series?turn={pick['turn']}")["waterfall"]
    assert len(spans) == len(fall["spans"]) + 1  # and the turn's own row
    shot(browser, "dashboard-session-plots")


async def test_the_plots_of_a_5000_event_session_of_500_turns(
    stage: Fleet, procs: ProcessGroup, settings: Settings, browser: webdriver.Chrome,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    log = agent_session("long-500", 500, seed=7)
    assert 4_800 <= len(log) <= 5_600, len(log)
    await stage.write(log)
    url = serve(procs, settings, stage, tmp_path)
    cold = api(url, "/api/sessions/long-500/series")  # read and folded from the log
    assert cold["turns"]["total"] == 500 and cold["as_of_seq"] == log[-1].seq
    open_session(browser, url, "long-500")
    drawn = int(_attr(browser, "#plot-context", "data-points") or 0)
    assert drawn == len(cold["context"]["points"]) <= 600 + 2 * len(cold["context"]["drops"])
    assert cold["context"]["total_points"] > drawn  # downsampled, never every point
    assert int(_attr(browser, "#plot-turns", "data-bars") or 0) == 500  # one bar per turn
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').filter(e => e.name.includes("
        "'/series')).map(e => e.duration)")
    # a busy turn's waterfall, picked on the bars
    pick = max(cold["turns"]["bars"], key=lambda b: (b["tool_errors"], b["tools"]))
    browser.execute_script(
        "document.querySelector(`#plot-turns g.turn-bar[data-turn='${arguments[0]}']`)"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", pick["turn"])
    wait(browser, "the picked turn's waterfall", lambda d: _attr(
        d, "#plot-waterfall", "data-turn") == str(pick["turn"]))
    timings = browser.execute_script(
        "return performance.getEntriesByName('plots-render').map(e => e.duration)")
    shot(browser, "dashboard-plots-5000-events")
    with capsys.disabled():
        print(f"\n5,000-event session ({len(log)} events, 500 turns, "
              f"{cold['context']['total_points']} context changes, {drawn} drawn): "
              f"series read and folded from the log in {cold['read']['seconds']:.3f} s "
              f"(server, cold); fetched by the page in {min(fetched):.0f} ms; plots drawn "
              f"in {min(timings):.1f}-{max(timings):.1f} ms ({len(timings)} renders, browser)")
