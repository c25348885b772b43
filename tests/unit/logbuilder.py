"""Test helpers: build valid session logs event by event, and random ones from a seed.

Used until the Session (write-time invariants) is available to every test; the
events are made with ``make_event`` directly and keep turn/step ids like Session does.
"""

from __future__ import annotations

import random
from typing import Any

from sessionstream.events import Event, SurfaceOp, make_event


class LogBuilder:
    """Appends events with contiguous seqs, tracking the open turn and step ids."""

    def __init__(self, session_id: str = "s1", tenant: str = "default",
                 lineage: dict[str, Any] | None = None) -> None:
        self.session_id = session_id
        self.events: list[Event] = []
        self.nodes: list[int] = []  # first seq of every surface node, replaces folded
        self.turn: str | None = None
        self.step: str | None = None
        self._turns = 0
        self._steps = 0
        data: dict[str, Any] = {"format_version": 1, "tenant": tenant}
        if lineage is not None:
            data["lineage"] = lineage
        self.add("session/start", data)

    def add(self, type: str, data: dict[str, Any] | None = None, *,
            surface_op: str = "none", source: list[int] | None = None,
            ignorable: bool = False) -> Event:
        if type == "turn/start":
            self._turns += 1
            self.turn = f"t{self._turns}"
        if type == "step/start":
            self._steps += 1
            self.step = f"p{self._steps}"
        event = make_event(
            session_id=self.session_id,
            seq=len(self.events),
            event_id=f"{self.session_id}-e{len(self.events)}",
            time=1_000 + len(self.events),
            type=type,
            data=data if data is not None else {},
            surface_op=surface_op,
            source_event_seqs=source or [],
            ignorable=ignorable,
            turn_id=self.turn,
            step_id=self.step,
        )
        self.events.append(event)
        if event.surface_op is SurfaceOp.APPEND:
            self.nodes.append(event.seq)
        elif event.surface_op is SurfaceOp.REPLACE:  # a contiguous run, by the invariants
            shadowed = set(event.source_event_seqs)
            at = next(i for i, s in enumerate(self.nodes) if s in shadowed)
            self.nodes[at:at + len(shadowed)] = [event.seq]
        if type in ("step/end", "turn/end"):
            self.step = None
        if type == "turn/end":
            self.turn = None
        return event

    # shorthands ---------------------------------------------------------------
    def user(self, text: str) -> Event:
        return self.add("user/message", {"content": text}, surface_op="append")

    def assistant(self, text: str, calls: list[tuple[str, str]] = (),  # type: ignore[assignment]
                  usage: tuple[int, int] | None = None, **extra: Any) -> Event:
        data: dict[str, Any] = {"content": text, **extra}
        if calls:
            data["tool_calls"] = [{"call_id": c, "name": n, "arguments": {"q": c}}
                                  for c, n in calls]
        if usage is not None:
            data["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return self.add("assistant/message", data, surface_op="append")

    def call(self, call_id: str, name: str, key: str | None = None) -> Event:
        return self.add("tool/call", {"call_id": call_id, "name": name, "arguments": {"q": call_id},
                                      "idempotency_key": key})

    def result(self, call_id: str, status: str = "ok", content: Any = "done",
               operation_id: str | None = None) -> Event:
        return self.add("tool/result", {"call_id": call_id, "status": status, "content": content,
                                        "operation_id": operation_id}, surface_op="append")

    def header(self, provider: str = "openai", model: str = "gpt-x") -> Event:
        return self.add("request/header", {"provider": provider, "model": model})

    def tool_turn(self, prompt: str, calls: list[tuple[str, str]]) -> None:
        """The seed's two-step tool task: ask, call tools, answer."""
        self.add("turn/start")
        self.add("step/start")
        self.user(prompt)
        self.header()
        self.add("assistant/chunk", {"text": "…"})
        self.assistant("", calls, usage=(100, 10))
        for cid, name in calls:
            self.call(cid, name)
            self.result(cid, operation_id=f"op-{cid}")
        self.add("step/end")
        self.add("step/start")
        self.header()
        self.assistant("answer", usage=(150, 20))
        self.add("step/end")
        self.add("turn/end", {"reason": "completed"})

    def surface_seqs(self) -> list[int]:
        """First seq of every surface node (for choosing shadow ranges)."""
        return list(self.nodes)


def random_log(seed: int, actions: int = 40) -> list[Event]:
    """A random valid log: tool turns (some ending failed/cancelled/interrupted with
    calls left unanswered), user messages, context snapshots, domain events,
    compactions (completed and failed) and an unknown ignorable plugin type."""
    rng = random.Random(seed)
    b = LogBuilder(f"s{seed % 97}")
    call_n = 0
    for _ in range(actions):
        kind = rng.choice(["turn", "turn", "turn", "user", "context", "domain", "domain",
                           "business", "compaction", "plugin"])
        if kind == "turn":
            b.add("turn/start")
            b.user(f"q{rng.randrange(100)}")
            end = "completed"
            for _step in range(rng.randint(1, 3)):
                b.add("step/start")
                provider = rng.choice(["openai", "anthropic"])
                b.header(provider, rng.choice(["m1", "m2"]))
                calls = []
                for _ in range(rng.randint(0, 2)):
                    call_n += 1
                    calls.append((f"c{call_n}", rng.choice(["search", "send_invoice"])))
                b.assistant("x" * rng.randint(0, 30), calls,
                            usage=(rng.randint(1, 500), rng.randint(1, 50)))
                crash = rng.random() < 0.15
                for i, (cid, name) in enumerate(calls):
                    if crash and i == len(calls) - 1:
                        if rng.random() < 0.5:
                            b.call(cid, name, key=f"k-{cid}")
                        break
                    b.call(cid, name)
                    b.result(cid, rng.choice(["ok", "ok", "error"]),
                             operation_id=rng.choice([None, f"op-{cid}"]))
                if crash and calls:
                    end = rng.choice(["failed", "cancelled", "interrupted"])
                    break
                b.add("step/end")
            if end == "completed" and rng.random() < 0.1:
                end = "refused"
            b.add("turn/end", {"reason": end})
        elif kind == "user":
            b.user(f"note {rng.randrange(100)}")
        elif kind == "context":
            b.add("context/snapshot", {"snapshot_id": f"ctx{rng.randrange(3)}",
                                       "content": f"workspace {rng.randrange(3)}"},
                  surface_op="append")
        elif kind == "domain":
            choice = rng.randrange(4)
            tid = f"todo{rng.randrange(4)}"
            if choice == 0:
                b.add("todo/add", {"id": tid, "text": "do it"}, ignorable=True)
            elif choice == 1:
                b.add("todo/update", {"id": tid, "status": rng.choice(
                    ["pending", "in_progress", "done"])}, ignorable=True)
            elif choice == 2:
                b.add("plan/set", {"steps": ["a", "b"][: rng.randint(1, 2)]}, ignorable=True)
            else:
                b.add("goal/set", {"goal": rng.choice(["g1", "g2"])}, ignorable=True)
        elif kind == "business":
            choice = rng.randrange(4)
            if choice == 0:
                b.add("business/metric", {"id": rng.choice(["m_a", "m_b"]),
                                          "definition_version": "2026-07",
                                          "status": rng.choice(["proposed", "confirmed"])})
            elif choice == 1:
                b.add("business/filters", {"filters": {"patient_type": rng.choice(
                    ["outpatient", "inpatient"])}})
            elif choice == 2:
                b.add("business/plan", {"plan_hash": f"h{rng.randrange(5)}"})
            else:
                b.add("business/approval", {"approval": rng.choice(["approved", "rejected"])})
        elif kind == "compaction":
            cid = f"cmp{len(b.events)}"
            b.add("compaction/start", {"compaction_id": cid, "trigger": "pressure"})
            nodes = b.nodes
            if len(nodes) >= 2 and rng.random() < 0.8:
                # shadow a prefix that does not split a call from its result: stop before
                # the first node after which an assistant call is still unanswered
                n = _safe_prefix(b, nodes, rng.randint(1, min(len(nodes), 24)))
                if n:
                    shadowed = nodes[:n]
                    b.add("compaction/summary", {
                        "compaction_id": cid, "first_position": 0, "last_position": n - 1,
                        "shadowed_seqs": shadowed, "tokens_before": 100, "tokens_after": 10,
                        "summarizer": {"provider": "offline", "model": "det", "config": {}}})
                    b.add("user/message", {"content": f"summary of {n}"}, surface_op="replace",
                          source=shadowed)
                    b.add("compaction/end", {"compaction_id": cid, "outcome": "completed"})
                    continue
            b.add("compaction/end", {"compaction_id": cid, "outcome": "failed",
                                     "reason": "summarizer error"})
        else:
            b.add("plugin/thing", {"x": rng.randrange(10)}, ignorable=True)
    return b.events


def _safe_prefix(b: LogBuilder, nodes: list[int], want: int) -> int:
    open_calls: set[str] = set()
    best = 0
    for i, seq in enumerate(nodes[:want]):
        e = b.events[seq]
        if e.type == "assistant/message":
            open_calls |= {c["call_id"] for c in e.data.get("tool_calls") or ()}
        elif e.type == "tool/result":
            open_calls.discard(e.data["call_id"])
        if not open_calls:
            best = i + 1
    return best
