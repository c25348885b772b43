"""The dashboard in a real browser: Debian's chromium driven by Selenium via chromedriver.

A fleet's sessions go through a real topic and the worker's processor into Redis; the
dashboard runs as ``sessionstream dashboard`` on a free port. Nothing is downloaded:
the browser and driver are the system's ``chromium`` and ``chromedriver`` (``.ci/run``
installs them). A page with an open EventSource never finishes loading, so every step
waits for an element. Screenshots go to ``.artifacts/`` (gitignored) or
``$SESSIONSTREAM_TEST_ARTIFACTS``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sessionstream.core.events import CountingClock, Event, SequentialIds
from sessionstream.core.session import Session
from sessionstream.core.settings import Settings
from tests.integration.procs import ProcessGroup
from tests.integration.test_dashboard import Fleet, projected  # noqa: F401 (fixture)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SESSIONSTREAM_TEST_ARTIFACTS") or ROOT / ".artifacts")

HOSTILE = ['<script>window.__pwned = "script"</script>',
           '<img src=x onerror="window.__pwned = \'img\'">']


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_driver() -> webdriver.Chrome:
    """Headless chromium through the system chromedriver (never Selenium Manager)."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium and chromedriver are needed: apt-get install -y chromium "
                    "chromium-driver (.ci/run installs them)", pytrace=False)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.page_load_strategy = "eager"  # the EventSource keeps the page "loading" forever
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = make_driver()
    yield driver
    driver.quit()


BROWSER_TOKEN = "browser-test-token-0123456789"


def serve(procs: ProcessGroup, settings: Settings, prefix: str, topic: str,
          env_extra: dict[str, str] | None = None) -> str:
    port = _free_port()
    env = {"SESSIONSTREAM_KEY_PREFIX": prefix, "SESSIONSTREAM_REDIS_URL": settings.redis_url,
           "SESSIONSTREAM_EVENTS_TOPIC": topic,
           "SESSIONSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "SESSIONSTREAM_DASHBOARD_TOKEN": BROWSER_TOKEN, **(env_extra or {})}
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
    return f"{url}?token={BROWSER_TOKEN}"  # the page sets its cookie and drops the token


def wait(driver: webdriver.Chrome, what: str, cond: Callable[[Any], Any],
         timeout: float = 30) -> Any:
    try:
        # the live page redraws the detail on every change: an element found a moment ago
        # may be gone, so a stale element only means "look again"
        return WebDriverWait(driver, timeout, poll_frequency=0.1,
                             ignored_exceptions=(StaleElementReferenceException,)
                             ).until(cond, message=what)
    except TimeoutException:
        shot(driver, "failed-" + what.replace(" ", "-"))
        boxes = driver.find_elements(By.ID, "timeline-box")
        raise AssertionError(f"timed out waiting for {what}; timeline box: "
                             f"{boxes[0].text[:300] if boxes else None!r}") from None


def shot(driver: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), "the screenshot was not written"
    assert path.stat().st_size > 10_000
    return path


def hostile_session(sid: str) -> list[Event]:
    s = Session.create(sid, clock=CountingClock(1_767_225_600_000), ids=SequentialIds(sid))
    s.append("turn/start")
    s.append("step/start")
    s.append("user/message", {"content": HOSTILE[0]})
    s.append("user/message", {"content": HOSTILE[1]})
    s.append("todo/add", {"id": "t<b>1</b>", "text": HOSTILE[1]})
    s.append("step/end")
    s.append("turn/end", {"reason": "completed"})
    return list(s.events)


async def test_a_fleet_in_the_browser_live_timeline_compaction_range_hostile_text_and_404(
    projected: Fleet, procs: ProcessGroup, settings: Settings,  # noqa: F811
    browser: webdriver.Chrome,
) -> None:
    logs = projected.logs
    compacted = next(sid for sid, log in logs.items()
                     if any(e.type == "compaction/summary" for e in log))
    live_sid = next(sid for sid in logs if sid != compacted)
    head, tail = logs[live_sid][:-6], logs[live_sid][-6:]
    hostile = hostile_session("dash-hostile")
    await projected.write([e for sid, log in logs.items() if sid != live_sid for e in log]
                          + head + hostile)
    url = serve(procs, settings, projected.prefix, projected.topic)

    # the fleet's list, every session shown
    browser.get(url)
    wait(browser, "the session list", lambda d: len(
        d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) >= len(logs) + 1)
    listed = wait(browser, "the list text", lambda d: d.find_element(By.ID, "sessions").text)
    assert all(sid in listed for sid in logs)
    shot(browser, "dashboard-list")

    # a session's timeline updates live, without a reload
    def open_live(d: Any) -> bool:
        next(r for r in d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
             if live_sid in r.text).click()
        return True

    wait(browser, "a click on the live session", open_live)
    last_head = head[-1].seq
    wait(browser, "the timeline up to the head", lambda d: d.find_elements(
        By.ID, f"tl-seq-{last_head}"))
    browser.execute_script("window.__sameDocument = 'yes'")
    await projected.write(tail)
    wait(browser, "the tail in the timeline", lambda d: d.find_elements(
        By.ID, f"tl-seq-{tail[-1].seq}"))
    assert browser.execute_script("return window.__sameDocument") == "yes", "page reloaded"
    row = wait(browser, "the tail's row text", lambda d: d.find_element(
        By.ID, f"tl-seq-{tail[-1].seq}").text)
    assert tail[-1].type in row and "admitted" in row and f"e{tail[-1].writer.epoch}" in row
    wait(browser, "the views at the tail", lambda d: f"as_of_seq {tail[-1].seq}" in
         d.find_element(By.CSS_SELECTOR, ".facts").text)
    shot(browser, "dashboard-live-timeline")

    # a compacted session shows its shadowed range and links it to its evidence
    summary = next(e for e in logs[compacted] if e.type == "compaction/summary")
    start = next(e for e in logs[compacted] if e.type == "compaction/start"
                 and e.data["compaction_id"] == summary.data["compaction_id"])
    browser.get(f"{url}#s={compacted}")
    browser.refresh()
    wait(browser, "the timeline", lambda d: d.find_elements(By.ID, f"tl-seq-{start.seq}"))
    shadowed = summary.data["shadowed_seqs"]

    def click_link(d: Any) -> bool:  # the live page may redraw between find and click
        try:
            link = d.find_elements(By.CSS_SELECTOR, "a.evidence-link")[0]
            assert str(shadowed[0]) in link.text
            link.click()
            return True
        except (IndexError, StaleElementReferenceException):
            return False

    wait(browser, "the compaction history link", click_link)
    wait(browser, "the evidence highlighted", lambda d: "evidence" in d.find_element(
        By.ID, f"tl-seq-{start.seq}").get_attribute("class"))
    marked = wait(browser, "the shadowed rows", lambda d: [
        int(r.get_attribute("data-seq")) for r in
        d.find_elements(By.CSS_SELECTOR, "#timeline tr.shadowed")] or None)
    assert marked == sorted(shadowed)
    assert wait(browser, "the summary node", lambda d: "summary" in d.find_element(
        By.ID, "detail").text)
    shot(browser, "dashboard-compacted")

    # hostile content is text, never markup
    browser.get(f"{url}#s=dash-hostile")
    browser.refresh()
    wait(browser, "the hostile session", lambda d: HOSTILE[0] in d.find_element(
        By.ID, "detail").text)
    assert wait(browser, "the img text", lambda d: HOSTILE[1] in d.find_element(
        By.ID, "detail").text)
    assert browser.execute_script("return window.__pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "#detail img, #detail script")
    shot(browser, "dashboard-hostile")

    # an unknown session shows the error
    browser.get(f"{url}#s=no-such-session")
    browser.refresh()
    banner = wait(browser, "the 404 banner", lambda d: d.find_element(
        By.CSS_SELECTOR, "#detail .banner").text)
    assert "Unknown session" in banner and "no-such-session" in banner
    shot(browser, "dashboard-404")


def test_the_memory_page_shows_hostile_memories_as_text_and_links_their_sources(
        browser: webdriver.Chrome, procs: ProcessGroup, settings: Settings,
        unique_topic: Callable[..., str], redis_prefix: str, tmp_path: Path) -> None:
    """A user's memories on /static/memory.html: content that looks like markup stays
    text, each source links to its session's timeline, another user sees none."""
    import dataclasses

    from sessionstream.core.memory import Actor, Role
    from sessionstream.governance.wiring import key_store
    from sessionstream.integrations.memory import FleetBackend, MemoryClient

    env = {"SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
           "SESSIONSTREAM_TENANT_KEY_DIR": str(tmp_path / "tenant-keys")}
    s = dataclasses.replace(Settings.from_env({**os.environ, **env}),
                            memory_topic_override=unique_topic(2), key_prefix=redis_prefix)
    backend = FleetBackend(s, key_store(s), encryption=True)
    mem = MemoryClient(backend, Actor(Role.AGENT, "bot", user="ada"))
    mem.propose(HOSTILE[1], kind="note", sources=[("sess-9", [3])])
    mem.propose("Prefers the aisle", kind="preference", sources=[("sess-9", [4]),
                                                                 ("sess-2", [1])])
    backend.close()
    url = serve(procs, settings, redis_prefix, unique_topic(2),
                {**env, "SESSIONSTREAM_MEMORY_TOPIC": s.memory_topic})
    browser.get(url)  # sets the session cookie
    base = url.split("?")[0]
    browser.get(base + "static/memory.html#user=ada")
    rows = wait(browser, "the memory rows",
                lambda d: (r := d.find_elements(By.CSS_SELECTOR, "#memory tbody tr"))
                and len(r) == 2 and r)
    texts = sorted(r.find_elements(By.TAG_NAME, "td")[0].text for r in rows)
    assert texts == sorted([HOSTILE[1], "Prefers the aisle"])  # the markup shown as text
    assert browser.execute_script("return window.__pwned === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, "#memory img")
    links = {a.text: a.get_attribute("href") for a in
             browser.find_elements(By.CSS_SELECTOR, "#memory tbody a")}
    assert links["sess-2 @ 1"] == base + "#s=sess-2"
    assert links["sess-9 @ 3"] == links["sess-9 @ 4"] == base + "#s=sess-9"
    shot(browser, "memory-view")
    # another user's page: none of ada's memories
    browser.find_element(By.ID, "user").clear()
    browser.find_element(By.ID, "user").send_keys("bob\n")
    wait(browser, "bob's empty namespace",
         lambda d: "(0)" in d.find_element(By.CSS_SELECTOR, "#memory h2").text)
    assert not browser.find_elements(By.CSS_SELECTOR, "#memory tbody tr")
