"""Dashboard page-load benchmark in Debian's chromium (run by hand; needs `sessionstream up`).

    PYTHONPATH=. python bench/bench_dashboard.py [--sessions 1000,10000] [--events 10000]

Projects N small sessions (6 events each) and one session of ``--events`` events through
a fresh topic and the worker's processor into a fresh Redis key prefix, serves the
dashboard on a free port and measures in the browser, from navigation start
(``performance.now()`` at the moment the element exists, polled every animation frame):

- time to first render of the session list (first row shown) at each N;
- for the big session: time until its views are shown and until its event timeline
  (read from the session's own offset range in Kafka) is shown;
- for a session of ``--plot-turns`` turns (500: ~5,400 events, compacting under
  pressure): time until its three plots are drawn (the series read and folded from its
  log range on the first load, kept by the dashboard after: first load and median of
  the others) and the browser's own time to draw them (``plots-render``), beside the
  time until the same page's views are shown (the baseline).

Each figure is the median of ``--runs`` page loads, printed with its ratio to the same
page at 10 sessions (the baseline, measured in the same run). Target: under 1 s.
Everything it created (topic, keys) is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from redis.asyncio import Redis

from sessionstream.core.events import CountingClock, Event, SequentialIds
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.rows import KeySpace
from sessionstream.core.session import Session
from sessionstream.core.settings import Env, Settings
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink
from tests.integration.streams_helpers import produce, read_topic
from tests.integration.test_dashboard_browser import _free_port, make_driver

WAIT_JS = """
const [selector, done] = [arguments[0], arguments[arguments.length - 1]];
const tick = () => document.querySelector(selector) ? done(performance.now())
                                                   : requestAnimationFrame(tick);
tick();
"""


def small(sid: str) -> list[Event]:
    s = Session.create(sid, clock=CountingClock(1_767_225_600_000), ids=SequentialIds(sid))
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": f"hello from {sid}"})
    s.append("step/end")
    s.append("turn/end", {"reason": "completed"})
    return list(s.events)


def big(sid: str, n: int) -> list[Event]:
    s = Session.create(sid, clock=CountingClock(1_767_225_600_000), ids=SequentialIds(sid))
    while len(s.events) < n - 4:
        s.append("turn/start")
        s.append("step/start")
        s.append("user/message", {"content": "what is the status of order 4411?"})
        s.append("request/header", {"provider": "openai", "model": "gpt-4.1"})
        s.append("assistant/message", {"content": "It shipped yesterday."})
        s.append("step/end")
        s.append("turn/end", {"reason": "completed"})
    return list(s.events)


async def project(settings: Settings, topic: str, prefix: str, events: list[Event],
                  total: int) -> int:
    produce(settings.kafka_bootstrap, topic, events)
    records = read_topic(settings.kafka_bootstrap, topic, total, timeout_s=600)
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    proc = Processor(pipeline=ReaderPipeline.default(),
                     sink=RedisSink(aredis, KeySpace(settings.tenant, prefix)), group="bench")
    for i in range(0, len(records), 5000):
        await proc.process(records[i : i + 5000])
    await aredis.aclose()
    return len(records)


def measure(driver: Any, url: str, selector: str, runs: int) -> float:
    times = []
    driver.set_script_timeout(60)
    for _ in range(runs):
        driver.get("about:blank")
        driver.get(url)
        try:
            times.append(float(driver.execute_async_script(WAIT_JS, selector)))
        except Exception as exc:
            box = driver.find_elements("id", "timeline-box")
            raise SystemExit(f"{selector} never appeared ({type(exc).__name__}); timeline box: "
                             f"{box[0].text[:300] if box else None!r}") from exc
    return statistics.median(times)


def measure_plots(driver: Any, url: str, runs: int) -> tuple[list[float], list[float]]:
    """Per page load: ms until the plots are drawn, and the browser's ``plots-render``."""
    loads, draws = [], []
    driver.set_script_timeout(120)
    for _ in range(runs):
        driver.get("about:blank")
        driver.get(url)
        loads.append(float(driver.execute_async_script(WAIT_JS, "#plot-waterfall")))
        draws.append(float(driver.execute_script(
            "const e = performance.getEntriesByName('plots-render'); "
            "return e.length ? e[e.length - 1].duration : NaN")))
    return loads, draws


BENCH_TOKEN = "bench-dashboard-token-0123456789"


def serve(settings: Settings, prefix: str, topic: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, Env.KEY_PREFIX: prefix, Env.EVENTS_TOPIC: topic,
           Env.DASHBOARD_TOKEN: BENCH_TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "sessionstream.cli.main", "dashboard",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "healthz", timeout=1):
                return proc, f"{url}?token={BENCH_TOKEN}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the dashboard did not start")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="1000,10000")
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--plot-turns", type=int, default=500)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [10, *(int(x) for x in args.sessions.split(","))]
    settings = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    driver = make_driver()
    results: dict[str, Any] = {"list_first_render_ms": {}, "ratio_to_10_sessions": {}}
    created: list[tuple[str, str]] = []
    try:
        have = 0
        for size in sizes:  # one topic + prefix per size, sessions added cumulatively
            tag = uuid.uuid4().hex[:8]
            topic, prefix = f"bench.dash.{tag}", f"benchdash-{tag}"
            admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
            created.append((topic, prefix))
            events = [e for i in range(size) for e in small(f"s-{i:06d}")]
            have = await project(settings, topic, prefix, events, len(events))
            proc, url = serve(settings, prefix, topic)
            try:
                ms = measure(driver, url, "#sessions tbody tr", args.runs)
            finally:
                proc.terminate()
                proc.wait(10)
            results["list_first_render_ms"][size] = round(ms, 1)
            print(f"list, {size:>6} sessions ({have} events): first row after {ms:7.1f} ms",
                  file=sys.stderr)
        base = results["list_first_render_ms"][10]
        results["ratio_to_10_sessions"] = {
            k: round(v / base, 2) for k, v in results["list_first_render_ms"].items()}
        topic, prefix = created[0]
        sid = "big-session"
        events = big(sid, args.events)
        await project(settings, topic, prefix, events, len(events) + 10 * 6)
        proc, url = serve(settings, prefix, topic)
        try:
            page = f"{url}#s={sid}"
            views = measure(driver, page, "#detail .facts", args.runs)
            tl = measure(driver, page, f"#tl-seq-{events[-1].seq}", args.runs)
        finally:
            proc.terminate()
            proc.wait(10)
        results["session_page"] = {"events": len(events), "views_ms": round(views, 1),
                                   "timeline_ms": round(tl, 1),
                                   "views_ratio_to_list_10": round(views / base, 2),
                                   "timeline_ratio_to_list_10": round(tl / base, 2)}
        print(f"session page, {len(events)} events: views after {views:.1f} ms, "
              f"timeline after {tl:.1f} ms", file=sys.stderr)
        from tests.integration.test_dashboard_plots_browser import agent_session

        psid = "plots-session"
        pevents = agent_session(psid, args.plot_turns, seed=7)
        await project(settings, topic, prefix, pevents, len(events) + 10 * 6 + len(pevents))
        proc, url = serve(settings, prefix, topic)
        try:
            page = f"{url}#s={psid}"
            loads, draws = measure_plots(driver, page, args.runs)
            pviews = measure(driver, page, "#detail .facts", args.runs)
        finally:
            proc.terminate()
            proc.wait(10)
        warm = statistics.median(loads[1:]) if len(loads) > 1 else loads[0]
        results["plots"] = {"events": len(pevents), "turns": args.plot_turns,
                            "first_load_ms": round(loads[0], 1), "load_ms": round(warm, 1),
                            "draw_ms": round(statistics.median(draws), 1),
                            "views_ms": round(pviews, 1),
                            "load_ratio_to_views": round(warm / pviews, 2),
                            "first_load_ratio_to_views": round(loads[0] / pviews, 2)}
        print(f"plots, {len(pevents)} events / {args.plot_turns} turns: drawn after "
              f"{loads[0]:.1f} ms on the first load (read and folded from the log), "
              f"{warm:.1f} ms after (median); the browser draws them in "
              f"{statistics.median(draws):.1f} ms; views after {pviews:.1f} ms",
              file=sys.stderr)
    finally:
        driver.quit()
        r = Redis.from_url(settings.redis_url)
        for _topic, prefix in created:
            keys = [k async for k in r.scan_iter(match=f"{prefix}*", count=5000)]
            for i in range(0, len(keys), 5000):
                await r.delete(*keys[i : i + 5000])
        await r.aclose()
        if created:
            for fut in admin.delete_topics([t for t, _ in created]).values():
                fut.result(30)
    print(json.dumps(results, indent=2) if args.json else
          "\n".join(f"{k}: {v}" for k, v in results.items()))


if __name__ == "__main__":
    asyncio.run(main())
