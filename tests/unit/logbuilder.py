"""Hand-built session logs for example tests, written through the real Session.

Every event goes through :meth:`Session.append` (or :meth:`Session.admit` for a
type the catalog does not know), so an example log is one the write-time rules
accept. Turn and step ids are named ``t1, t2…`` / ``p1, p2…`` so tests can assert
them. Random logs come from ``tests.unit.strategies`` (``logs()``, ``random_log``).
"""

from __future__ import annotations

from typing import Any

from sessionstream.core.events import CountingClock, Event, SequentialIds
from sessionstream.core.session import Session
from tests.unit.strategies import admit_plugin_event


class LogBuilder:
    """A Session with shorthands for the events tests write most."""

    def __init__(self, session_id: str = "s1", tenant: str = "default",
                 lineage: dict[str, Any] | None = None) -> None:
        self.session = Session.create(
            session_id, tenant=tenant, lineage=lineage, clock=CountingClock(1_000),
            ids=SequentialIds(session_id),
        )
        self._turns = 0
        self._steps = 0

    @property
    def events(self) -> list[Event]:
        return list(self.session.events)

    @property
    def nodes(self) -> list[int]:
        """Identity seq of every surface node, by position."""
        return list(self.session.surface.node_seqs())

    def add(self, type: str, data: dict[str, Any] | None = None, *,
            surface_op: str | None = None, source: list[int] | None = None) -> Event:
        turn_id = step_id = None
        if type == "turn/start":
            self._turns += 1
            turn_id = f"t{self._turns}"
        if type == "step/start":
            self._steps += 1
            step_id = f"p{self._steps}"
        if self.session.catalog.get(type) is None:  # a plugin type: admitted, ignorable
            return admit_plugin_event(self.session, type, data)
        return self.session.append(type, data if data is not None else {},
                                   surface_op=surface_op, source_event_seqs=source or (),
                                   turn_id=turn_id, step_id=step_id)

    # shorthands ---------------------------------------------------------------
    def user(self, text: str) -> Event:
        return self.add("user/message", {"content": text})

    def assistant(self, text: str, calls: list[tuple[str, str]] = (),  # type: ignore[assignment]
                  usage: tuple[int, int] | None = None, **extra: Any) -> Event:
        data: dict[str, Any] = {"content": text, **extra}
        if calls:
            data["tool_calls"] = [{"call_id": c, "name": n, "arguments": {"q": c}}
                                  for c, n in calls]
        if usage is not None:
            data["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return self.add("assistant/message", data)

    def call(self, call_id: str, name: str, key: str | None = None) -> Event:
        data: dict[str, Any] = {"call_id": call_id, "name": name, "arguments": {"q": call_id}}
        if key is not None:
            data["idempotency_key"] = key
        return self.add("tool/call", data)

    def result(self, call_id: str, status: str = "ok", content: Any = "done",
               operation_id: str | None = None) -> Event:
        data: dict[str, Any] = {"call_id": call_id, "status": status, "content": content}
        if operation_id is not None:
            data["operation_id"] = operation_id
        return self.add("tool/result", data)

    def header(self, provider: str = "openai", model: str = "gpt-x") -> Event:
        return self.add("request/header", {"provider": provider, "model": model})

    def compact(self, shadowed: list[int], summary: str = "sum", cid: str = "k") -> Event:
        """A completed compaction replacing the surface run ``shadowed``; the replace event."""
        first = self.nodes.index(shadowed[0])
        self.add("compaction/start", {"compaction_id": cid, "trigger": "manual"})
        self.add("compaction/summary", {
            "compaction_id": cid, "first_position": first,
            "last_position": first + len(shadowed) - 1, "shadowed_seqs": shadowed,
            "tokens_before": 100, "tokens_after": 10,
            "summarizer": {"provider": "offline", "model": "det", "config": {}}})
        replace = self.add("user/message", {"content": summary}, surface_op="replace",
                           source=shadowed)
        self.add("compaction/end", {"compaction_id": cid, "outcome": "completed"})
        return replace

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
