"""The end-to-end demo: a simulated agent fleet writes to Kafka, the projection worker folds
every projection into Redis, and the projections are read back from Redis.

It is the composition of the real parts, nothing demo-only: `topics ensure`, the
`sessionstream worker` processor, `sessionstream fleet`, and the same reads as
`sessionstream sessions` / `sessionstream views`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sessionstream import redisconn
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.settings import Settings

Echo = Callable[[str], None]


class DemoError(SessionStreamError):
    """The demo could not finish; the message says which part failed and where its log is."""


@dataclass(frozen=True)
class DemoResult:
    sessions: list[dict[str, Any]]
    fleet: dict[str, Any]
    caught_up_seconds: float
    compaction: dict[str, Any] | None = None
    deletion: dict[str, Any] | None = None


def run_demo(settings: Settings, *, agents: int, sessions: int, turns: int,
             crash_rate: float, seed: int, timeout_s: float, echo: Echo,
             memory: DemoMemory | None = None) -> DemoResult:
    """Run the pipeline end to end and return what Redis holds for the fleet's sessions."""
    from sessionstream.producers.fleet import run_fleet
    from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics
    from sessionstream.producers.writer import WriterConfig

    echo(f"topics: ensuring {settings.events_topic} and its dead-letter topic")
    ensure_topics(admin_client(settings.kafka_bootstrap, settings.kafka_security()),
                  tenant_topics(settings))

    log_path = settings.state_dir / "demo-worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    echo(f"worker: starting the projection processor (log: {log_path})")
    with open(log_path, "ab") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "sessionstream.cli.main", "worker", "-l", "warn"],
            stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
            start_new_session=True,
        )
    try:
        echo(f"fleet: {agents} agent processes, {sessions} sessions x {turns} turns, "
             f"crash rate {crash_rate}; each step goes through the harness loop: provider "
             "bodies built from the surface, a scripted model streaming OpenAI Chat, "
             "OpenAI Responses or Anthropic events, recorded through the session's rules")
        summary = run_fleet(WriterConfig.from_settings(settings), agents=agents,
                            sessions=sessions, turns=turns, crash_rate=crash_rate, seed=seed,
                            progress=True, verify=True)
        if summary.problems:
            raise DemoError("the fleet reported problems: " + "; ".join(summary.problems[:5]))
        echo(f"fleet: {summary.events_in_log} events in the log, {summary.crashes} crashes, "
             f"{summary.resumes} resumes, {summary.rejections} rejections "
             f"in {summary.seconds:.1f}s")
        t0 = time.monotonic()
        rows = asyncio.run(_wait_caught_up(settings, summary.last_seqs, timeout_s, echo,
                                           worker, log_path))
        caught_up = round(time.monotonic() - t0, 2)
        compaction = _compact_largest(settings, rows, summary.last_seqs, echo)
        if compaction is not None and compaction["commit_seq"] is not None:
            # Show the compaction as the dashboards see it: projected from the log.
            rows = asyncio.run(_wait_caught_up(settings, summary.last_seqs, timeout_s, echo,
                                               worker, log_path))
        deletion = _delete_one(settings, rows, summary.last_seqs, compaction, echo, timeout_s,
                               worker, log_path, memory)
        if deletion is not None:  # the table shows the deleted session as readers see it
            rows = asyncio.run(_wait_caught_up(settings, summary.last_seqs, timeout_s, echo,
                                               worker, log_path))
        return DemoResult(rows, summary.to_json(), caught_up, compaction, deletion)
    finally:
        _stop(worker)


def _delete_one(settings: Settings, rows: list[dict[str, Any]], last_seqs: dict[str, int],
                compaction: dict[str, Any] | None, echo: Echo, timeout_s: float,
                worker: subprocess.Popen[bytes], log_path: Path,
                memory: DemoMemory | None) -> dict[str, Any] | None:
    """Delete one session (crypto-shred) and show its content gone, its audit trail kept,
    and what long-term memory learned only from it forgotten."""

    from sessionstream.governance.service import Governance
    from sessionstream.governance.wiring import key_store
    from sessionstream.producers.audit import WriterAuditLog
    from sessionstream.producers.writer import WriterConfig, read_log

    compacted = compaction.get("session_id") if compaction else None
    candidates = [r for r in rows if r["session_id"] != compacted] or rows
    if not candidates:
        return None
    target = min(candidates, key=lambda r: r["as_of_seq"])["session_id"]
    cfg = WriterConfig.from_settings(settings)
    first = _first_user_text(read_log(cfg, target).admitted)
    echo(f"deletion: session {target} before: first user message {first!r}")
    client = redisconn.from_settings(settings, decode_responses=True)
    try:
        other = next((r["session_id"] for r in rows if r["session_id"] != target), None)
        learned = memory.remember(target, other) if memory is not None else 0
        gov = Governance(cfg, key_store(settings, client), client, audit=WriterAuditLog(cfg),
                         principal=settings.principal,
                         memory=memory.cascade() if memory is not None else None)
        report = gov.delete(target, reason="demo: the user asked to be forgotten")
        kept = memory.kept() if memory is not None else []
    finally:
        if memory is not None:
            memory.close()
        client.close()
    assert report.audit_seq is not None
    last_seqs[target] = report.audit_seq
    asyncio.run(_wait_caught_up(settings, {target: report.audit_seq}, timeout_s, echo,
                                worker, log_path))
    fresh = WriterConfig.from_settings(settings)  # a new reader: no cached keys
    log = read_log(fresh, target).admitted
    audit = log[-1]
    echo(f"deletion: classes {', '.join(report.classes)} shredded; the log still holds "
         f"{len(log)} events in order, first user message now "
         f"{_first_user_text(log)!r}; audit: {audit.type} at seq {audit.seq} by "
         f"{audit.data['principal']} ({audit.data['reason']})")
    echo(f"deletion: {report.redis_keys_deleted} Redis keys/fields, "
         f"{report.feed_entries_deleted} change-feed entries and "
         f"{report.attachments_deleted} attachments purged; {report.note}")
    forgotten = report.memory.forgotten if report.memory is not None else []
    if memory is not None:
        echo(f"memory: {len(forgotten)} of {learned} memories of {memory.user} forgotten "
             f"with the session (derived only from it); {len(kept)} kept, citing "
             f"{', '.join(sorted({sid for k in kept for sid in k})) or 'nothing'} "
             f"(`sessionstream memory list --user {memory.user}`, the dashboard's memory "
             "page)")
    return {**report.to_json(), "events_in_log": len(log),
            "first_user_message_after": _first_user_text(log),
            "memories_forgotten": len(forgotten), "memories_kept": len(kept)}


class DemoMemory(Protocol):
    """What the demo's harness remembers for a user from the session it then deletes
    (the CLI gives the long-term memory client; None: the demo shows no memory)."""

    user: str

    def remember(self, target: str, other: str | None) -> int:
        """Propose memories citing ``target`` (and one citing ``other`` too); how many."""

    def cascade(self) -> Any:
        """The governance port that forgets by lineage (``Governance(memory=…)``)."""

    def kept(self) -> list[list[str]]:
        """The source sessions of each memory the user still has."""

    def close(self) -> None: ...


def _first_user_text(events: list[Any]) -> str | None:
    for event in events:
        if event.type == "user/message":
            content = event.data.get("content")
            return content if isinstance(content, str) else str(content)[:60]
    return None


def _compact_largest(settings: Settings, rows: list[dict[str, Any]],
                     last_seqs: dict[str, int], echo: Echo) -> dict[str, Any] | None:
    """Run the compaction agent once on the session with the largest surface."""
    from sessionstream.core.compaction import Budget
    from sessionstream.producers.compactor import Compactor
    from sessionstream.producers.writer import WriterConfig

    if not rows:
        return None
    target = max(rows, key=lambda r: r["surface_tokens"] or 0)["session_id"]
    echo(f"compaction: the agent compacts {target} (manual trigger)")
    report = Compactor(WriterConfig.from_settings(settings),
                       budget=Budget(tokens=4_000, keep_recent=4)).compact(
                           target, trigger="manual")
    if report.appended:
        last_seqs[target] = report.appended[-1]["seq"]
    echo(f"compaction: {report.outcome}, surface tokens {report.surface_tokens_before} -> "
         f"{report.surface_tokens_after}"
         + (f" ({report.reason})" if report.reason else ""))
    return report.to_json()


async def _wait_caught_up(settings: Settings, last_seqs: dict[str, int], timeout_s: float,
                          echo: Echo, worker: subprocess.Popen[bytes],
                          log_path: Path) -> list[dict[str, Any]]:
    """Poll the views until every session's as_of_seq reached its last admitted seq."""

    from sessionstream.governance.wiring import row_cipher
    from sessionstream.streams.read import read_views

    rows = row_cipher(settings)
    redis = redisconn.from_settings(settings, asyncio=True, decode_responses=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            snaps = {sid: await read_views(redis, settings.keys, sid, rows=rows)
                     for sid in last_seqs}
            behind = [sid for sid, seq in last_seqs.items()
                      if snaps[sid] is None or snaps[sid].as_of_seq < seq]  # type: ignore[union-attr]
            echo(f"projections: {len(last_seqs) - len(behind)}/{len(last_seqs)} sessions "
                 "caught up in Redis")
            if not behind:
                return [_row(sid, snaps[sid]) for sid in last_seqs]
            if worker.poll() is not None:
                raise DemoError(f"the worker exited with status {worker.returncode}; "
                                f"see {log_path}")
            if time.monotonic() > deadline:
                raise DemoError(f"{len(behind)} sessions not caught up after {timeout_s:.0f}s "
                                f"(e.g. {behind[0]}); see {log_path}")
            await asyncio.sleep(1.0)
    finally:
        await redis.aclose()


def _row(session_id: str, snap: Any) -> dict[str, Any]:
    views = snap.views
    turns = views.get("turns", {})
    tools = views.get("tools", {})
    surface = views.get("surface", {})
    usage = views.get("usage", {})
    compaction = views.get("compaction", {})
    return {
        "session_id": session_id,
        "as_of_seq": snap.as_of_seq,
        "status": views.get("index", {}).get("status"),
        "turns": turns.get("counts", {}),
        "tool_results": len(tools.get("results", {})),
        "open_calls": len(tools.get("open", [])),
        "surface_messages": len(surface.get("messages", [])),
        "surface_tokens": surface.get("token_estimate"),
        "output_tokens": usage.get("total", {}).get("output_tokens", 0),
        "compactions": compaction.get("outcomes", {}),
        "rejections": views.get("rejections", {}).get("total", 0),
        "quarantine": snap.quarantine,
    }


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
